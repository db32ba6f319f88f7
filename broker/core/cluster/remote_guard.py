"""A person's input, across brokers: the loop guard restarts on every broker.

A guarded session keeps its view of each peer on its own broker
(:mod:`broker.core.messaging.guard`), also of a peer another broker holds. When a
person speaks to a session (``status`` ``humanInput``), its broker resets the pairs
it sees and tells every broker it is linked to (``link_human_input``,
:func:`human_input`); each resets the views its guarded sessions keep of that session
(:func:`told`). Only the
broker holding the session may say so: a notice about a session the sender does not
hold is ignored. People's prompts are rare, so telling every linked broker costs one
small envelope per prompt and broker.
"""

from __future__ import annotations

from schemas import envelopes

from broker.core.cluster.peers import Peer
from broker.core.kernel.commands import LinkSend
from broker.core.kernel.state import State
from broker.core.messaging import guard
from broker.core.sessions.registry import Session


def human_input(state: State, session: Session) -> None:
    """A person gave ``session`` (held here) input: its pairs restart here and on every
    linked broker."""
    guard.human_input(state, session.id)
    state.stats["guard.human_input"] += 1
    for peer in state.cluster.linked():
        state.out.append(LinkSend(peer.broker_id, [envelopes.link_human_input(session.id)]))


def told(state: State, peer: Peer, env: dict, now: float) -> None:
    """``link_human_input`` from ``peer``: a person spoke to one of its sessions."""
    mirror = state.cluster.remote.get(env["session"])
    if mirror is None or mirror.broker != peer.broker_id:
        return                  # not a session that broker holds, as far as we know
    guard.human_input(state, mirror.id)
    state.stats["guard.human_input_remote"] += 1
