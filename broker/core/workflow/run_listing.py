"""How workflow runs appear in ``list``: stages with labels, queued counts, delivery
states per sticky entry, future targets, and delivery evidence per target.

Every retained entry counts in exactly one of ``future`` (its queue key is not a
known agent stage: a pattern, a shared name, a path outside the known set) or
``delivery`` (its key is a known stage's canonical path: an exact target, also one
that was future until its stage was declared). A ``delivery`` row is evidence of what
happened to that target's entries at its stage, never a sign the stage is live or
still to come.

Read-only: nothing here changes state. A session sees the runs it controls
(:func:`~broker.core.sessions.authority.controlled_runs`).
"""

from __future__ import annotations

from typing import Any

from schemas.names import PENDING, RUNNING

from broker.core.workflow import closed_stages as closed
from broker.core.sessions.authority import controlled_runs, peek, visible_to
from broker.core.workflow.path_delivery import deliverable, queue_key
from broker.core.runs.run_tree import Run
from broker.core.sessions.registry import Session
from broker.core.kernel.state import State
from broker.core.workflow.sticky_queue import delivery_state


def run_rows(state: State, session: Session) -> dict[str, Any]:
    """The ``workflows`` and ``closedStages`` parts of a list answer (absent when
    there is none)."""
    rows = [run_row(state, run) for run in controlled_runs(state, session)]
    result: dict[str, Any] = {"workflows": rows} if rows else {}
    ended = closed.rows_for(state, session)
    if ended:
        result["closedStages"] = ended
    return result


def run_row(state: State, run: Run) -> dict[str, Any]:
    stages = []
    known: dict[str, tuple] = {}       # canonical path -> (node, unavailable)
    for node in run.nodes():
        if not node.is_agent:
            continue
        entries = state.sticky.matching(run.run_id, node)
        unavailable = not deliverable(node)
        states = [{"messageId": e.message_id, "target": str(e.target),
                   "state": delivery_state(e, node, unavailable=unavailable)}
                  for e in entries]
        label = node.state
        if label == RUNNING and run.dormant and node.session_id is None:
            label = PENDING   # the host is gone: the stage waits for a resume
        # The copyable name first (the canonical path, or the id when it has none),
        # then its status and its session's working directory, then the rest.
        row = {"id": node.id} if unavailable else {"target": run.canonical(node)}
        label = "delivery-unavailable" if unavailable else label
        live = state.registry.by_id.get(node.session_id) if node.session_id else None
        row.update(status=label, cwd=live.cwd if live is not None else None,
                   name=node.name, id=node.id, state=node.state, label=label,
                   sessionId=node.session_id,
                   queued=sum(1 for s in states if s["state"] == "queued"),
                   deliveryStates=states)
        stages.append(row)
        known[run.canonical(node)] = (node, unavailable)
    future: dict[str, int] = {}
    delivery: dict[str, list] = {}
    for entry in state.sticky.entries(run.run_id):
        # Keyed as it counts: a known stage's id (or mixed) spelling is that stage.
        target = queue_key(run, entry.target)
        stage = known.get(target)
        if stage is None:
            future[target] = future.get(target, 0) + 1
        else:
            delivery.setdefault(target, []).append(
                {"stage": target, "messageId": entry.message_id,
                 "state": delivery_state(entry, stage[0], unavailable=stage[1])})
    return {"runId": run.run_id, "group": run.group, "dormant": run.dormant,
            "host": run.host_id, "stages": stages,
            "future": [{"target": t, "queued": n} for t, n in future.items()],
            "delivery": [{"target": t, "deliveryStates": s} for t, s in delivery.items()]}


def list_sessions(state: State, session: Session, params: dict, re: str, now: float,
                 env: dict) -> dict[str, Any]:
    group = params.get("group")
    if group is not None:
        group = group.strip()
        rows = peek(state, session, group)
    else:
        rows = visible_to(state, session)
    result = {"self": session.public(), "sessions": [s.public() for s in rows]}
    if group is not None:
        result["group"] = group
    result.update(run_rows(state, session))
    if state.hooks.wait_for_owners(state, session, re, result, now):
        return None              # answered with the rows of runs other brokers own
    return result
