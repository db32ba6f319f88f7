"""When an agent's conversation is active: the one rule, and who hears of it.

A conversation becomes active when its session starts a turn or receives something
(a message, an output, an invocation); ``respond`` channel ``last`` picks the most
recently active one. Other brokers learn a local conversation's activity from its
link row (:mod:`broker.core.cluster.remote_conversations`), at most once per
:data:`TELL_ACTIVE_S`, so a burst of messages costs one row, not one per message,
and ``last`` may lag by that much across brokers.
"""

from __future__ import annotations

from broker.core.sessions.registry import Session
from broker.core.kernel.lifecycle import SessionChanged, emit
from broker.core.kernel.state import State

TELL_ACTIVE_S = 1.0


def touch(state: State, session: Session) -> None:
    """``session`` started a turn or received something: its conversation is active."""
    conversations = state.conversations
    conversations.touch(session.id, state.wall)
    if session.broker is not None or not state.cluster.peers:
        return
    conversation = conversations.by_session.get(session.id)
    if conversation is not None and (conversation.told_at is None
                                     or state.wall - conversation.told_at >= TELL_ACTIVE_S):
        emit(state, SessionChanged(session))
