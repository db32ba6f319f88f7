"""Workflow host operations: register a run, add stages, report states, end it.

Only the session that registered a run (its host) may change it; a dormant run (its
host gone) may be taken over by the same session after a reconnect or by the same
Atomic session. Ending the root settles its sticky entries: those that never reached
any stage are reported undeliverable to senders who asked, then all are dropped.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from schemas.errors import BusError

from .paths import looks_like_path, parse_path
from .runs import RUNNING, STATES, TERMINAL_STATES, Node, Run, build_nodes
from .sessions import Session

if TYPE_CHECKING:
    from .workflow import Workflows


def register_run(wf: Workflows, session: Session, env: dict, now: float) -> dict:
    run_id = env.get("runId")
    path = parse_path(f"workflow:{run_id}", allow_run_only=True) if isinstance(run_id, str) else None
    if path is None or path.segments:
        raise BusError("invalid_params", detail="runId must be a non-empty string without '/'")
    existing = wf.runs.get(run_id)
    if existing is not None:
        if existing.host_id not in (None, session.id):
            raise BusError("not_run_host", run_id=run_id)
        if existing.host_id is None and existing.host_atomic and \
                existing.host_atomic != session.atomic_session_id and existing.last_host_id != session.id:
            raise BusError("not_run_host", run_id=run_id)
        run = existing
        run.host_id = session.id
        merge(run, None, env.get("stages") or [])
    else:
        run = Run(run_id, session.id, session.atomic_session_id, session.id, created_at=now)
        run.roots = build_nodes(env.get("stages") or [], None)
        wf.runs[run_id] = run
    run.last_host_id = session.id
    if run.group not in session.groups:
        from .actions import change_groups  # noqa: PLC0415
        change_groups(wf.engine, session, [*session.groups, run.group])
    wf.save(run)
    return {"runId": run_id, "group": run.group, "groups": list(session.groups),
            "stages": [run.canonical(n) for n in run.nodes() if n.is_agent]}

def add_stages(wf: Workflows, session: Session, env: dict, now: float) -> dict:
    run = hosted(wf, session, env)
    parent = None
    if env.get("parent"):
        parent = wf.node_at(run, parse_path(f"{run.group}/{env['parent']}"))
        if parent is None:
            raise BusError("invalid_params", detail=f"no stage {env['parent']!r} in run {run.run_id!r}")
    merge(run, parent, env.get("stages") or [])
    wf.save(run)
    return {"runId": run.run_id, "stages": [run.canonical(n) for n in run.nodes() if n.is_agent]}

def stage_state(wf: Workflows, session: Session, env: dict, now: float) -> dict:
    run = hosted(wf, session, env)
    stage, state = env.get("stage"), env.get("state")
    if not isinstance(stage, str) or not isinstance(state, str) or state not in STATES:
        raise BusError("invalid_params", detail=f"stage must be a path and state one of {', '.join(sorted(STATES))}")
    node = wf.node_at(run, parse_path(stage if looks_like_path(stage) else f"{run.group}/{stage}"))
    if node is None:
        raise BusError("invalid_params", detail=f"no stage {stage!r} in run {run.run_id!r}")
    if node.terminal or (state == "PENDING" and node.state == RUNNING):
        if node.state != state:
            raise BusError("invalid_transition", stage=stage, old=node.state, new=state)
    node.state = state
    if state in TERMINAL_STATES and not node.started:
        wf.settle_exact(run, node, f"stage {state} before it started")
    wf.save(run)
    return {"runId": run.run_id, "stage": run.canonical(node), "state": node.state}

def end_run(wf: Workflows, session: Session, env: dict, now: float) -> dict:
    run = hosted(wf, session, env)
    undeliverable = 0
    for entry in wf.sticky.drop_run(run.run_id):
        if not entry.deliveries:
            undeliverable += 1
            wf.notify(entry, "run ended before a matching stage received it")
    del wf.runs[run.run_id]
    wf.engine.persist(("run_end", run.run_id))
    return {"runId": run.run_id, "ended": True, "undeliverable": undeliverable}


def hosted(wf: Workflows, session: Session, env: dict) -> Run:
    run = wf.runs.get(env.get("runId") if isinstance(env.get("runId"), str) else "")
    if run is None:
        raise BusError("unknown_run", run_id=env.get("runId"))
    if run.host_id != session.id:
        raise BusError("not_run_host", run_id=run.run_id)
    return run

def merge(run: Run, parent: Node | None, specs: Any) -> None:
    if not isinstance(specs, list):
        raise BusError("invalid_params", detail="stages must be an array")
    siblings = parent.children if parent else run.roots
    names = {n.name: n for n in siblings}
    fresh = build_nodes([s for s in specs if isinstance(s, dict) and s.get("name") not in names], parent)
    siblings.extend(fresh)
    for spec in specs:
        if isinstance(spec, dict) and spec.get("name") in names and spec.get("children"):
            merge(run, names[spec["name"]], spec["children"])


OPS = {
    "register_run": register_run,
    "add_stages": add_stages,
    "stage_state": stage_state,
    "end_run": end_run,
}
