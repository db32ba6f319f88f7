"""Workflow host operations: register a run, add stages, report states, end it.

Only the session that registered a run (its host) may change it; a dormant run (its
host gone) may be taken back by the same session after a reconnect or by the same
Atomic session. Ending the root settles its sticky entries: those that never reached
any stage are reported undeliverable to senders who asked, then all are dropped.

Cost: each operation is O(the stages it names or adds), independent of how many runs
the broker or the host holds.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from schemas.errors import BusError
from schemas.names import PENDING, RUNNING, STAGE_STATES, TERMINAL_STATES, run_group

from broker.core.sessions.membership import change_groups, room_for
from broker.core.workflow.path_delivery import node_at, notify_undeliverable, settle_exact
from broker.core.runs.paths import looks_like_path, parse_path
from broker.core.messaging.ask_actions import settle_error
from broker.core.workflow import held_sends as held
from broker.core.workflow.closed_stages import close_run, forget_run
from broker.core.sessions.grants import check_run, run_grant, stage_grant
from broker.core.kernel.records import RunEnded
from broker.core.runs.run_tree import Node, Run, build_nodes
from broker.core.sessions.registry import Session
from broker.core.workflow.stage_binding import save, set_host
from broker.core.kernel.lifecycle import RunChanged, RunClosed, SessionChanged, emit
from broker.core.kernel.state import State


def register_run(state: State, session: Session, env: dict, now: float) -> None:
    """Answered once the run is durable (see :func:`_answer_when_saved`).

    Raises BusError(invalid_params | not_run_host | too_many_runs | too_many_groups)."""
    run_id = env.get("runId")
    path = parse_path(run_group(run_id), allow_run_only=True) if isinstance(run_id, str) else None
    if path is None or path.segments:
        raise BusError("invalid_params", detail="runId must be a non-empty string without '/'")
    late_router = env.get("lateRouter")
    if late_router is not None and not isinstance(late_router, bool):
        raise BusError("invalid_params", detail="lateRouter must be true or false")
    run = state.runs.get(run_id)
    created = run is None
    if run is None:
        state.hooks.check_run_here(state, run_id)
    if run is not None:
        # A run goes back only to the session that hosted it: the same id, which a
        # restarted process gets back only with its reclaim secret.
        if run.host_id not in (None, session.id) or \
                (run.host_id is None and run.last_host_id != session.id):
            raise BusError("not_run_host", run_id=run_id, detail=_registered(state, run))
        merge(run, None, env.get("stages") or [])
    else:
        if len(state.hosted.get(session.id, ())) >= state.limits.max_runs_per_session:
            raise BusError("too_many_runs", limit=state.limits.max_runs_per_session)
        if run_group(run_id) not in session.groups and session.broker is None:
            room_for(state, session)
        forget_run(state, run_id)
        run = Run(run_id, session.id, session.atomic_session_id, session.id, created_at=state.wall,
                  nonce=state.new_token()[:16])
        run.attach(build_nodes(env.get("stages") or [], None), None)
        state.runs[run_id] = run
        emit(state, RunChanged(run_id))
    set_host(state, run, session)
    if late_router is not None:
        run.late_router = late_router
    joined = run.group not in session.groups
    _join(state, session, run)
    answer = {"runId": run_id, "group": run.group, "groups": list(session.groups),
              "runGrant": run_grant(state.grant_key, run), **_stages_and_grants(state, run)}
    _answer_when_saved(state, session, env["id"], run, answer, created, joined)
    return None


def _answer_when_saved(state: State, session: Session, re: str, run: Run,
                       answer: dict[str, Any], created: bool, joined: bool) -> None:
    """Answer ``re`` once ``run``'s record is committed, as a queued send is: a run
    its host was told about survives a kill -9 right after the answer. A failed commit
    is the answer (the host registers again). A save the store refused (another
    broker owns the run: this one had not heard of it) undoes the run ``created``
    here, so that one broker alone holds it, and the host is told ``run_moving``."""
    session_id = session.id

    def reply(now: float, value: dict[str, Any] | BusError) -> None:
        live = state.registry.by_id.get(session_id)
        if live is not None:
            state.answer(live, re, value)

    def failed(now: float, error: BusError) -> None:
        error = run.refusal(error, state.cluster.endpoint)
        if error.code == "run_moving" and created:
            _unregister(state, session_id, run, joined)
        reply(now, error)

    state.persist(run.saved(state.broker_id), lambda now: reply(now, answer), failed)


def _unregister(state: State, session_id: str, run: Run, joined: bool) -> None:
    """Forget ``run``, registered here by ``session_id`` but owned by another broker
    (the store's fence may have taken it out of memory already)."""
    if state.runs.get(run.run_id) is run:
        forget(state, run)
    live = state.registry.by_id.get(session_id)
    if live is not None and joined and run.group in live.groups and len(live.groups) > 1:
        change_groups(state, live, [g for g in live.groups if g != run.group])
    elif live is not None:
        emit(state, SessionChanged(live))    # the others learn it hosts the run no more
    state.stats["runs.refused"] += 1


def take_over(state: State, session: Session, env: dict, now: float) -> dict[str, Any]:
    """Another session takes a run whose host is gone (leased or dormant), with the
    run's grant. Raises BusError(unknown_run | not_run_host | grant_required |
    invalid_grant | too_many_runs | too_many_groups)."""
    run = state.runs.get(env.get("runId") if isinstance(env.get("runId"), str) else "")
    if run is None:
        state.hooks.check_run_here(state, env.get("runId"))
        raise BusError("unknown_run", run_id=env.get("runId"))
    if run.host_id is not None and run.host_id != session.id:
        raise BusError("not_run_host", run_id=run.run_id, detail="")
    check_run(state.grant_key, run, env.get("grant"))
    if len(state.hosted.get(session.id, ())) >= state.limits.max_runs_per_session:
        raise BusError("too_many_runs", limit=state.limits.max_runs_per_session)
    _join(state, session, run)
    previous = run.last_host_id
    if previous and previous != session.id:
        state.hosted_before.get(previous, set()).discard(run.run_id)
    set_host(state, run, session)
    # Its subagents' holds are the new host's now; asks still waiting on one are told.
    for sub_id in run.subagents:
        live = state.registry.by_id.get(sub_id)
        for ask in state.asks.to_target(live) if live is not None else ():
            settle_error(state, ask, BusError("run_taken_over", run_id=run.run_id,
                                              name=session.name, id=session.id))
    save(state, run)
    return {"runId": run.run_id, "group": run.group, "groups": list(session.groups),
            "tookOverFrom": previous, "runGrant": run_grant(state.grant_key, run),
            **_stages_and_grants(state, run)}


def expire_leases(state: State) -> None:
    """Runs whose host's lease ran out (wall clock) become dormant. A run restored
    without a lease (its host was live when the broker stopped) gets one now."""
    for run_id in list(state.leased):
        run = state.runs.get(run_id)
        if run is None or run.host_id is not None:
            state.leased.discard(run_id)
            continue
        if run.lease_until is None:
            run.lease_until = state.wall + state.limits.host_lease_s
            save(state, run)
        elif state.wall >= run.lease_until:
            run.dormant = True
            state.leased.discard(run_id)
            state.stats["runs.dormant"] += 1
            save(state, run)
            emit(state, RunChanged(run_id))    # the others learn its subagents


def add_stages(state: State, session: Session, env: dict, now: float) -> dict[str, Any]:
    """Raises BusError(unknown_run | not_run_host | invalid_params)."""
    run = hosted(state, session, env)
    parent = None
    if env.get("parent"):
        parent = node_at(run, parse_path(f"{run.group}/{env['parent']}"))
        if parent is None:
            raise BusError("invalid_params", detail=f"no stage {env['parent']!r} in run {run.run_id!r}")
    merge(run, parent, env.get("stages") or [])
    save(state, run)
    return {"runId": run.run_id, **_stages_and_grants(state, run)}


def revoke_stage(state: State, session: Session, env: dict, now: float) -> dict[str, Any]:
    """The stage's grant stops working (a session bound with it stays bound).

    Raises BusError(unknown_run | not_run_host | invalid_params).
    """
    run = hosted(state, session, env)
    node = _stage_of(run, env.get("stage"))
    node.revoked = True
    save(state, run)
    return {"runId": run.run_id, "stage": run.canonical(node), "revoked": True}


def _join(state: State, session: Session, run: Run) -> None:
    """The host joins its run's group; a host on another broker (a mirror here, its
    operation forwarded) joins it there, on this answer (broker.core.cluster.forwarding)."""
    if run.group not in session.groups and session.broker is None:
        change_groups(state, session, [*session.groups, run.group])


def _stages_and_grants(state: State, run: Run) -> dict[str, Any]:
    """The run's agent stages, and the grant each node's session needs to bind (agent
    stages, and the routing connections of non-agent nodes)."""
    return {"stages": [run.canonical(n) for n in run.nodes() if n.is_agent],
            "grants": {run.canonical(n): stage_grant(state.grant_key, run, n)
                       for n in run.nodes() if not n.revoked and not n.terminal}}


def _stage_of(run: Run, stage: Any) -> Node:
    """The node a host names by path or by name. Raises BusError(invalid_params)."""
    if not isinstance(stage, str):
        raise BusError("invalid_params", detail="stage must be a stage path or name")
    node = node_at(run, parse_path(stage if looks_like_path(stage) else f"{run.group}/{stage}"))
    if node is None:
        raise BusError("invalid_params", detail=f"no stage {stage!r} in run {run.run_id!r}")
    return node


def stage_state(state: State, session: Session, env: dict, now: float) -> dict[str, Any]:
    """Raises BusError(unknown_run | not_run_host | invalid_params | invalid_transition)."""
    run = hosted(state, session, env)
    stage, new = env.get("stage"), env.get("state")
    if not isinstance(stage, str) or not isinstance(new, str) or new not in STAGE_STATES:
        raise BusError("invalid_params",
                       detail=f"stage must be a path and state one of {', '.join(sorted(STAGE_STATES))}")
    node = node_at(run, parse_path(stage if looks_like_path(stage) else f"{run.group}/{stage}"))
    if node is None:
        raise BusError("invalid_params", detail=f"no stage {stage!r} in run {run.run_id!r}")
    if node.terminal or (new == PENDING and node.state == RUNNING):
        if node.state != new:
            raise BusError("invalid_transition", stage=stage, old=node.state, new=new)
    saved = env.get("savedSession")
    if saved is not None and saved != "unreadable":
        raise BusError("invalid_params", detail="savedSession must be \"unreadable\"")
    node.state = new
    if new in TERMINAL_STATES and not node.started:
        settle_exact(state, run, node, f"stage {new} before it started")
    if saved == "unreadable" and not node.unreadable:
        node.unreadable = True
        held.unreadable(state, run, node.key())
    save(state, run)
    return {"runId": run.run_id, "stage": run.canonical(node), "state": node.state}


def _registered(state: State, run: Run) -> str:
    """What a session that tried to register ``run`` again needs to know: its state,
    its host, since when, and what can be done."""
    host = (run.host_id or run.last_host_id or "?")[:8]
    if run.host_id is not None:
        return (f": it is registered and live, hosted by session {host}; register "
                f"another run id")
    if run.dormant or run.lease_until is None:
        since = f" since {_utc(run.lease_until)}" if run.lease_until else ""
        state_text = f"dormant{since} (its host, session {host}, left and did not come back)"
    else:
        state_text = (f"waiting for its host (session {host}, gone) until "
                      f"{_utc(run.lease_until)}, then dormant")
    return (f": it is {state_text}; its host takes it back by connecting with its identity, "
            f"another session takes it over with the run's grant (take_over), the broker's "
            f"operator ends it (python -m client end-run {run.run_id}), or register another "
            f"run id")


def _utc(wall: float) -> str:
    return datetime.fromtimestamp(wall, timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def end_run(state: State, session: Session, env: dict, now: float) -> dict[str, Any]:
    """Raises BusError(unknown_run | not_run_host)."""
    return _end(state, hosted(state, session, env))


def end_abandoned(state: State, session: Session, env: dict, re: str, now: float) -> None:
    """The ``end_run`` kind: the operator ends a run whose host left (dormant, or in
    its host's lease), which nobody else could end.

    Raises BusError(operator_only | unknown_run | run_has_host)."""
    if not (session.is_control and session.operator):
        raise BusError("operator_only", what="end_run (a run whose host left)")
    run = state.runs.get(env["runId"])
    if run is None:
        state.hooks.check_run_here(state, env["runId"])
        raise BusError("unknown_run", run_id=env["runId"])
    if run.host_id is not None:
        raise BusError("run_has_host", run_id=run.run_id, host=run.host_id[:8])
    state.note("run_ended_by_operator", run=run.run_id, operator=session.name)
    state.answer(session, re, _end(state, run))


def _end(state: State, run: Run) -> dict[str, Any]:
    undeliverable = 0
    for entry in state.sticky.drop_run(run.run_id):
        if not entry.deliveries:
            undeliverable += 1
            notify_undeliverable(state, entry, "run ended before a matching stage received it")
    close_run(state, run)
    forget(state, run)
    state.persist(RunEnded(run.run_id, state.broker_id, run.epoch))
    return {"runId": run.run_id, "ended": True, "undeliverable": undeliverable}


def forget(state: State, run: Run) -> None:
    """``run`` is no longer this broker's: out of its tables, and the others told."""
    del state.runs[run.run_id]
    emit(state, RunClosed(run.run_id))
    state.leased.discard(run.run_id)
    for table in (state.hosted, state.hosted_before):
        for holder in {run.host_id, run.last_host_id}:
            table.get(holder, set()).discard(run.run_id)


def hosted(state: State, session: Session, env: dict) -> Run:
    """The run ``env`` names, if ``session`` hosts it. Raises BusError."""
    run = state.runs.get(env.get("runId") if isinstance(env.get("runId"), str) else "")
    if run is None:
        state.hooks.check_run_here(state, env.get("runId"))
        raise BusError("unknown_run", run_id=env.get("runId"))
    if run.host_id != session.id:
        raise BusError("not_run_host", run_id=run.run_id, detail="")
    return run


def merge(run: Run, parent: Node | None, specs: Any) -> None:
    """Add the stages of ``specs`` not yet under ``parent``; recurse into known ones."""
    if not isinstance(specs, list):
        raise BusError("invalid_params", detail="stages must be an array")
    siblings = parent.children if parent else run.roots
    names = {n.name: n for n in siblings}
    run.attach(build_nodes([s for s in specs if isinstance(s, dict) and s.get("name") not in names],
                           parent), parent)
    for spec in specs:
        if isinstance(spec, dict) and spec.get("name") in names and spec.get("children"):
            merge(run, names[spec["name"]], spec["children"])

