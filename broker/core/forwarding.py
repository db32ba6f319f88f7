"""Requests for sessions held by other brokers: handed to that broker, answered from there.

A ``send``, ``sends``, ``ask`` or supervisor ask of a session held here, whose target
resolves (with every targeting and visibility rule, mirrors included) to a mirror, is
forwarded whole to the broker holding the target. That broker handles it as if the
asker were connected there (the asker is a mirror on it), so the one send path, the
ask table and the reply rules all run where the target is, and its answer, the
target's reply and every refusal come back over the link (``relay``) to the asker.
So a ``send`` is ``delivered`` only once the target's broker has handed it over.

A ``workflow:`` path is forwarded the same way to the run's *owner*: the broker
holding the run's host session (each link row lists the runs its session hosts,
``Cluster.run_hosts``). The owner alone decides delivery or queueing, positions and
every cap, and answers ``queued`` only after its own commit; a run whose host is on
this broker (or whose host no broker announces) is handled here.

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

from .admission import resolve_target
from .cluster import Forwarded, Peer
from .commands import LinkSend
from .paths import looks_like_path, parse_path
from .sessions import Session
from .state import State


def forward(state: State, session: Session, to: object, env: dict, ids: list) -> bool:
    """Forward ``env`` (request ids ``ids``) when ``to`` names a mirror; False to
    handle it here."""
    if session.broker is not None or to.__class__ is not str:
        return False
    if looks_like_path(to):
        host = run_owner(state, to)
        return host is not None and to_broker(state, session, host, env, ids, name=to)
    try:
        target = resolve_target(state, session, to)
    except BusError:
        return False
    return to_broker(state, session, target, env, ids)


def run_owner(state: State, to: str) -> Session | None:
    """The mirror hosting the run a path names, when its host is on another broker."""
    try:
        run_id = parse_path(to).run_id
    except BusError:
        return None
    run = state.runs.get(run_id)
    if run is not None and run.host_id is not None:
        local = state.registry.by_id.get(run.host_id)
        if local is not None and local.broker is None:
            return None
    host = state.registry.by_id.get(state.cluster.run_hosts.get(run_id, ""))
    return host if host is not None and host.broker is not None else None


def to_broker(state: State, session: Session, target: Session, env: dict, ids: list,
              name: str | None = None) -> bool:
    """Forward ``env`` to ``target``'s broker if it is a mirror; False if it is local."""
    if target.broker is None or session.broker is not None:
        return False
    mine = state.cluster.forwarded.setdefault(session.id, {})
    for request_id in ids:
        if request_id.__class__ is str:
            mine[request_id] = Forwarded(target.broker, name or target.name)
    state.stats["forwarded"] += 1
    state.out.append(LinkSend(target.broker, [envelopes.forward(session.id, env)]))
    return True


def answered(state: State, session: Session, env: dict) -> None:
    """An envelope relayed to local ``session``: the answers in it end their wait."""
    mine = state.cluster.forwarded.get(session.id)
    if not mine:
        return
    kind = env.get("k")
    if kind == "result":
        mine.pop(env.get("re"), None)
    elif kind == "acks" and isinstance(env.get("ids"), list):
        for request_id in env["ids"]:
            if request_id.__class__ is str:
                mine.pop(request_id, None)
    if not mine:
        del state.cluster.forwarded[session.id]


def broker_gone(state: State, peer: Peer) -> None:
    """Every request waiting on ``peer`` fails now."""
    cluster = state.cluster
    for session_id in list(cluster.forwarded):
        session = state.registry.by_id.get(session_id)
        mine = cluster.forwarded[session_id]
        for request_id, where in list(mine.items()):
            if where.broker_id != peer.broker_id:
                continue
            del mine[request_id]
            if session is not None:
                state.answer(session, request_id,
                             BusError("peer_disconnected", name=where.target_name))
        if not mine:
            del cluster.forwarded[session_id]
