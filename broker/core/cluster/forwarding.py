"""Requests for sessions held by other brokers: handed to that broker, answered from there.

Which requests move, and where, is decided once, before any handler runs, by
:mod:`broker.core.cluster.placement`; this module carries them (:func:`hand`) and
settles their answers. A ``send``, ``sends``, ``ask`` or supervisor ask of a session
held here, whose target resolves (with every targeting and visibility rule, mirrors included) to a mirror, is
forwarded whole to the broker holding the target. That broker handles it as if the
asker were connected there (the asker is a mirror on it), so the one send path, the
ask table and the reply rules all run where the target is, and its answer, the
target's reply and every refusal come back over the link (``relay``) to the asker.
So a ``send`` is ``delivered`` only once the target's broker has handed it over.

A ``workflow:`` path is forwarded the same way to the run's *owner*
(:mod:`broker.core.cluster.ownership`), whether its host is connected or not. The owner alone
decides delivery or queueing, positions and every cap, and answers ``queued`` only
after its own commit. A run this broker owns, or that no broker owns (an unknown run,
or one that ended: then the host's broker, from the link rows' ``hosts``, takes
post-mortem traffic) is handled here.

A host operation (``workflow``: ``stage_state``, ``add_stages``, ``end_run``, ...) on a
run another live broker owns is forwarded to the owner too (decided in :mod:`broker.core.cluster.placement`):
a host whose client failed over to another broker while its run's broker restarted
on its endpoint keeps hosting it from where it is, and never needs to move. The owner
checks the host as for a local one (the host is a mirror there); memberships are the
holding broker's, so a run group the owner grants is joined here on its answer
(:func:`answered`).

Anything else stays here: a target that does not resolve (the refusal is this
broker's own, the same as for a local target), a send that is a
reply (``replyTo``: the thread is in the replier's own tables), and every request of
a mirror (handled where it was forwarded to, never forwarded again).

Until its answer comes back, each forwarded request is in ``Cluster.forwarded``; if
the target's broker goes first, the request fails with ``peer_disconnected`` at once.
"""

from __future__ import annotations

from schemas import envelopes
from schemas.errors import BusError

from broker.core.cluster import waiters
from broker.core.messaging.ask_cycles import to_wire
from broker.core.sessions.membership import change_groups
from broker.core.cluster.peers import Forwarded, Peer
from broker.core.kernel.commands import LinkSend
from broker.core.sessions.registry import Session
from broker.core.kernel.state import State


def hand(state: State, session: Session, broker_id: str, name: str, env: dict,
         ids: list, again: bool = False, target_id: str | None = None) -> None:
    """Send ``env`` (request ids ``ids``) to ``broker_id``, which answers over the link;
    ``name`` is what a refusal calls the target, ``target_id`` its session id when
    known here. An ask carries who waits on ``session`` (see
    :mod:`broker.core.cluster.waiters`). Raises BusError(control_other_broker) for a
    control connection: it is no mirror there, so nobody could answer it."""
    if session.is_control:
        raise BusError("control_other_broker", name=name, broker=broker_id)
    peer = state.cluster.peers.get(broker_id)
    if peer is not None and peer.silent:
        # Its lease says it lives, its link says nothing: never queue into a copy here.
        raise BusError("broker_unreachable", name=name, broker=broker_id)
    mine = state.cluster.forwarded.setdefault(session.id, {})
    kept = env if again else None
    if env.get("k") in _MESSAGES:         # their receipts are that broker's
        state.receipts.elsewhere.put_all([i for i in ids if i.__class__ is str],
                                         value=(broker_id, session.id))
    for request_id in ids:
        if request_id.__class__ is str:
            mine[request_id] = Forwarded(broker_id, name, kept)
    waiting = None
    if (env.get("k") == "supervisor" or env.get("action") == "ask") and \
            ids and ids[0].__class__ is str:
        waiting = waiters.away(state, session, ids[0], target_id, broker_id)
    state.stats["forwarded"] += 1
    state.out.append(LinkSend(broker_id, [envelopes.forward(
        session.id, env, to_wire(waiting) if waiting else None)]))


_MESSAGES = frozenset({"call", "sends", "supervisor"})


def answered(state: State, session: Session, env: dict) -> None:
    """An envelope relayed to local ``session``: the answers in it end their wait."""
    mine = state.cluster.forwarded.get(session.id)
    if not mine:
        return
    kind = env.get("k")
    if kind == "result":
        where = mine.pop(env.get("re"), None)
        if where is not None and state.asks.away:
            state.asks.close_away(env["re"])
        if where is not None and where.env is not None and where.env.get("k") == "workflow":
            _join_granted(state, session, env)
    elif kind == "acks" and isinstance(env.get("ids"), list):
        for request_id in env["ids"]:
            if request_id.__class__ is str:
                mine.pop(request_id, None)
    if not mine:
        del state.cluster.forwarded[session.id]


def _join_granted(state: State, session: Session, answer: dict) -> None:
    """A host operation's answer from the run's broker names the run's group: the
    host joins it here, where its memberships are kept (best effort: a host at its
    group bound is told its groups as they are)."""
    group = answer.get("group")
    if answer.get("ok") is not True or group.__class__ is not str or group in session.groups:
        return
    try:
        change_groups(state, session, [*session.groups, group])
    except BusError:
        state.stats["forwarded.group_not_joined"] += 1
    answer["groups"] = list(session.groups)


def broker_gone(state: State, peer: Peer, again: bool = True,
                code: str = "peer_disconnected") -> list[tuple[bytes, dict]]:
    """Every request waiting on ``peer`` fails now with ``code``, except (``again``)
    those for a workflow path: returned (identity, envelope) to be handled again, so
    the run's adopter answers them (with the first answer, if ``peer`` had committed
    one: the store keeps one entry per request)."""
    cluster = state.cluster
    handled: dict[int, tuple[bytes, dict]] = {}
    for session_id in list(cluster.forwarded):
        session = state.registry.by_id.get(session_id)
        mine = cluster.forwarded[session_id]
        for request_id, where in list(mine.items()):
            if where.broker_id != peer.broker_id:
                continue
            del mine[request_id]
            state.asks.close_away(request_id)
            if session is None:
                continue
            if again and where.env is not None:
                handled[id(where.env)] = (session.identity, where.env)
            else:
                state.answer(session, request_id,
                             BusError(code, name=where.target_name, broker=peer.broker_id))
        if not mine:
            del cluster.forwarded[session_id]
    return list(handled.values())
