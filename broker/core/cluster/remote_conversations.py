"""Agents' conversations whose session another broker holds, as this broker sees them.

A link row of an agent session (:func:`broker.core.cluster.peers.link_row`) carries its
conversation: channel id, persistence, last activity and the number of invoke jobs
queued for it there (:func:`link_fields`). Each mirror with such a row is attached
to that conversation here (:func:`mirrored`), created if this broker did not know it,
so ``list_sessions``, ``respond`` (``last``, explicit ids) and ``invoke`` see the
agents' conversations of every broker. When the mirror leaves, a persistent
conversation stays remembered here, as a local one would; an ephemeral one is
forgotten (:func:`session_left`, a lifecycle listener: the agents room handles only
its own sessions' conversations).

Invariants:

* the broker holding a conversation's live session owns its record: a mirrored
  conversation is never written to the store by this broker;
* a conversation has one live session store-wide as far as links tell: a row naming
  a conversation a local session holds is not attached (the local one stays);
* jobs this broker holds for a mirrored conversation go to the mirror's broker as
  soon as the mirror is attached (:func:`broker.core.agents.invoke_actions.offer`);
* a local conversation's activity reaches the other brokers at most once per
  :data:`broker.core.agents.activity.TELL_ACTIVE_S` (plus every other change of its row).
"""

from __future__ import annotations

from typing import Any

from broker.core.agents import invoke_actions as invoking
from broker.core.agents.registry import Conversation
from broker.core.sessions.registry import Session
from broker.core.kernel.lifecycle import SessionLeft
from broker.core.kernel.state import State

def link_fields(state: State, session: Session) -> dict[str, Any]:
    """The conversation fields of a local session's link row ({} when not an agent's)."""
    conversation = state.conversations.by_session.get(session.id)
    if conversation is None:
        return {}
    conversation.told_at = conversation.last_active_at
    conversation.told_queued = state.invocations.queued_count(
        (conversation.agent, conversation.channel))
    return {"channel": conversation.channel, "persistent": conversation.persistent,
            "lastActiveAt": conversation.last_active_at,
            "queuedInvocations": conversation.told_queued}


def mirrored(state: State, mirror: Session, row: dict[str, Any], now: float) -> None:
    """Attach ``mirror`` (just added or updated from ``row``) to its conversation."""
    agent, channel = mirror.agent, row.get("channel")
    if agent.__class__ is not str or channel.__class__ is not str:
        return
    conversations = state.conversations
    conversation = conversations.get(agent, channel)
    if conversation is None:
        conversation = Conversation(agent, channel, row.get("persistent") is not False)
        conversations.add(conversation)
    elif conversation.live and conversation.session_id != mirror.id:
        state.stats["conversations.held_twice"] += 1    # the live one keeps it
        return
    if not conversation.live:
        conversations.attach(conversation, mirror.id)
    conversation.persistent = row.get("persistent") is not False
    active = row.get("lastActiveAt")
    if isinstance(active, (int, float)) and (conversation.last_active_at is None
                                             or active > conversation.last_active_at):
        conversation.last_active_at = float(active)
    queued = row.get("queuedInvocations")
    conversation.queued_elsewhere = queued if queued.__class__ is int and queued >= 0 else 0
    invoking.offer(state, (agent, channel), now)


def session_left(state: State, event: SessionLeft) -> None:
    """Lifecycle listener: a mirror's conversation goes with it (its own broker keeps
    the record)."""
    session = event.session
    if session.broker is None:
        return
    conversation = state.conversations.by_session.get(session.id)
    if conversation is not None:
        mirror_left(state, conversation)


def mirror_left(state: State, conversation: Conversation) -> None:
    """The conversation's session, on another broker, is gone from here."""
    conversation.queued_elsewhere = 0
    if conversation.persistent:
        state.conversations.detach(conversation)
    else:
        state.conversations.forget(conversation)
