"""Where a request belongs: here, on another broker, or parked until a run is adopted.

:func:`place` is asked once by :func:`broker.core.assembly.dispatch.handle` after an
envelope passed its checks and before any handler runs, so no handler forwards or
parks anything and a request is never half-handled before it moves:

* ``None``: handle it here (always, when no other broker is live or dead-and-pending,
  and for every request of a mirror: it was forwarded here already).
* :class:`Forward`: hand it whole to another broker (see
  :mod:`broker.core.cluster.forwarding`), which answers over the link.
* :class:`Park`: it needs a run whose broker died and that nobody adopted yet; it
  waits for the adoption (:func:`broker.core.cluster.ownership.hold`) and is then
  handled again from the start.

A send's or an ask's target is resolved here, once
(:func:`broker.core.routing.resolver.resolve`); when the request stays, its
handler gets that same result (or refusal) back instead of resolving again.

What moves, by kind:

====================  ===============================================================
``call`` send / ask   the target's broker when ``to`` resolves to a mirror; a path's
                      run owner (or, for an ended run, its last host's broker); the
                      owner of a dormant run whose subagent ``to`` names. A send with
                      ``replyTo`` stays: the thread is in the replier's own tables.
``sends``             as a send, for the one target of the batch
``call`` status       with ``messageId``: the broker that delivered that message (it
                      keeps the receipt, broker.core.messaging.receipts)
``supervisor``        the broker of the asker's parent, when the parent is a mirror
``workflow``          the run's owner; parked when the run is an orphan
``hello`` (stage)     refused ``run_moving`` when the stage's run is an orphan (its
                      adoption asked for, as for a parked request); the client
                      says hello again after a pause
====================  ===============================================================
"""

from __future__ import annotations

from dataclasses import dataclass

from schemas.errors import BusError
from schemas.names import STAGE

from broker.core.cluster import ownership
from broker.core.cluster.forwarding import hand
from broker.core.kernel.state import State
from broker.core.routing.resolver import (ClosedStageHost, Mirror, OrphanRun, RemoteHeld,
                                            RemoteRun, resolve)
from broker.core.messaging import guard
from broker.core.sessions.registry import Session


@dataclass(frozen=True, slots=True)
class Forward:
    """Hand the request to ``broker_id``; ``name`` is what a refusal calls the target;
    ``again``: if that broker dies first, handle the request again rather than fail it
    (paths: the run's adopter answers it); ``target_id``: the target session's id, when
    it is one (an ask's edge of the wait-for graph, broker.core.cluster.waiters)."""

    broker_id: str
    name: str
    again: bool = False
    target_id: str | None = None


@dataclass(frozen=True, slots=True)
class Park:
    """Wait for the adoption of ``run_id``, a dead broker's run."""

    run_id: str


Placement = Forward | Park | None


def place(state: State, session: Session | None, kind: str, env: dict) -> Placement:
    """Where the checked envelope ``env`` of ``kind`` from ``session`` (None: a hello)
    belongs. Raises nothing: a target that does not resolve is handled here, where
    the refusal is this broker's own."""
    cluster = state.cluster
    if not cluster.others or (session is not None and session.broker is not None):
        return None
    if kind == "call":
        action = env.get("action")
        if action == "ask" or (action == "send" and env.get("replyTo") is None):
            return _for_target(state, session, env.get("to"), action)
        if action == "status" and env.get("messageId").__class__ is str:
            return _for_receipt(state, session, env["messageId"])
        return None
    if kind == "sends":
        return _for_target(state, session, env.get("to"), "send")
    if kind == "supervisor":
        parent = state.registry.by_id.get(session.parent_id or "")
        return Forward(parent.broker, parent.name, target_id=parent.id) \
            if parent is not None and parent.broker is not None else None
    if kind == "workflow":
        return _for_run(state, env.get("runId"))
    if kind == "hello" and env.get("sessionKind") == STAGE and env.get("stage").__class__ is str:
        run_id = ownership.path_run(env["stage"])
        return Park(run_id) if ownership.orphaned(state, run_id) else None
    return None


def carry_out(state: State, session: Session | None, identity: bytes, where: Placement,
              env: dict, ids: list, now: float) -> None:
    """Do what :func:`place` decided for ``env`` (request ids ``ids``); a guarded
    sender's message to another broker's session passes its guard first (:func:`_guarded`)."""
    if isinstance(where, Forward):
        if where.target_id is not None and session.guard is not None and \
                env.get("k") != "supervisor":
            env, ids = _guarded(state, session, identity, where.target_id, env, ids, now)
            if not ids:
                return
        try:
            hand(state, session, where.broker_id, where.name, env, ids, again=where.again,
                 target_id=where.target_id)
        except BusError as error:
            if error.code != "broker_unreachable":
                raise
            for request_id in ids:          # every request of a pipelined batch
                if request_id.__class__ is str:
                    state.answer(identity, request_id, error)
        return
    try:
        ownership.hold(state, where.run_id, now, identity, env)
    except BusError as error:         # too many waiting: these are refused
        for request_id in ids:
            if request_id.__class__ is str:
                state.answer(identity, request_id, error)


def _guarded(state: State, session: Session, identity: bytes, target_id: str, env: dict,
             ids: list, now: float) -> tuple[dict, list]:
    """A send, sends or ask of a guarded session to another broker's session: its
    flood and loop guard (broker.core.messaging.guard) is checked and counted here,
    where it is (there it is a mirror, which has none). What it refuses is answered
    and left out of what is handed over; an id handed over before passes unchecked
    (a resend: that broker answers it as the first time)."""
    peer = state.registry.by_id.get(target_id)
    fresh = [i for i in ids if i.__class__ is str and i not in state.receipts.elsewhere]
    if peer is None or not fresh:
        return env, ids
    try:
        left = guard.quota(state, session, peer, now)
    except BusError as error:
        left, refusal = 0, error
    else:
        refusal = guard.full(state, session, peer, now) if left < len(fresh) else None
    if left:
        guard.passed(state, session, peer, now, min(left, len(fresh)))
    refused = set(fresh[left:])
    if not refused:
        return env, ids
    for request_id in fresh[left:]:
        state.answer(identity, request_id, refusal)
    kept = [i for i in ids if i not in refused]
    if env.get("k") == "sends":
        env = {**env, "ids": kept,
               "messages": [m for i, m in zip(ids, env["messages"]) if i not in refused]}
    return env, kept


def _for_target(state: State, session: Session, to: object, verb: str) -> Placement:
    """Where ``to`` (resolved once: the handler gets the same result back) takes a
    send or ask; a target that does not resolve is refused here, by this broker."""
    if to.__class__ is not str:
        return None
    try:
        target = resolve(state, session, to, verb, placing=True)
    except BusError:
        return None
    kind = target.__class__
    if kind is RemoteRun:
        return Forward(target.broker_id, to, again=True)
    if kind is OrphanRun:
        return Park(target.run_id)
    if kind is RemoteHeld:
        # A subagent of another broker's dormant run: that broker holds sends for it.
        return Forward(target.broker_id, to)
    if kind is Mirror or (kind is ClosedStageHost and target.session.broker is not None):
        return Forward(target.session.broker, target.session.name, target_id=target.session.id)
    return None


def _for_receipt(state: State, session: Session, msg_id: str) -> Placement:
    """A message this session sent to another broker's session: that broker keeps its
    receipt (see broker.core.messaging.receipts)."""
    where = state.receipts.elsewhere.get(msg_id)
    if where is None or where[1] != session.id or msg_id in state.receipts.by_id:
        return None
    return Forward(where[0], msg_id)


def _for_run(state: State, run_id: object) -> Placement:
    if run_id.__class__ is not str or run_id in state.runs:
        return None
    peer = ownership.owner(state, run_id)
    if peer is not None:
        return Forward(peer.broker_id, f"workflow:{run_id}", again=True)
    return Park(run_id) if ownership.orphaned(state, run_id) else None
