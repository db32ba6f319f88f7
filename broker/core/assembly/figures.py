"""What the broker holds and does, as figures: the ``stats`` answer and the metrics.

The core knows its own state. The IO side (the store file's size, commit latency,
records waiting for the persistence worker, the process's pid and start time) is the
shell's: it hands those in as a :class:`ShellFigures` once a second
(:meth:`~broker.core.assembly.engine.Engine.shell_figures`), and a ``stats`` answer
carries the latest. The metrics endpoint exports the same figures
(:meth:`~broker.core.assembly.engine.Engine.figures`), so the two never disagree on what
a number means.

Invariants:

* only a control connection may ask (:func:`broker.core.sessions.control.require`);
* every call builds its answer afresh from plain values (new dicts and lists, no
  object of the state), so the shell may hand it to another thread;
* a call costs O(sessions + queued entries + stages + other brokers), plus
  O(n log top) to pick the largest rows; nothing is kept between calls.
"""

from __future__ import annotations

import heapq
from collections import Counter
from typing import Any

from schemas.errors import BusError
from schemas.limits import STATS_TOP_DEFAULT, STATS_TOP_MAX
from schemas.names import CONTROL, DONE, FAILED, RUNNING

from broker.core.sessions import control
from broker.core.sessions.registry import Session
from broker.core.kernel.state import State
from broker.core.kernel.inputs import ShellFigures

REFUSED = "refused."


def stats(state: State, session: Session, env: dict, re: str, now: float) -> None:
    """The ``stats`` kind. Raises BusError(control_only | invalid_params)."""
    control.require(session, "stats")
    top = env.get("top", STATS_TOP_DEFAULT)
    if not 1 <= top <= STATS_TOP_MAX:
        raise BusError("invalid_params", detail=f"top must be 1 to {STATS_TOP_MAX}")
    state.answer(session, re, figures(state, now, top))


def figures(state: State, now: float, top: int = STATS_TOP_DEFAULT) -> dict[str, Any]:
    """Everything ``stats`` answers (see :data:`schemas.kinds` for the field list)."""
    shell = state.shell or ShellFigures()
    counters = state.stats
    return {
        "broker": {"id": state.broker_id, "pid": shell.pid, "startedAt": shell.started_at,
                   "uptimeS": round(state.wall - shell.started_at, 3) if shell.started_at else None,
                   "framesIn": shell.frames_in, "framesOut": shell.frames_out},
        "sessions": _sessions(state),
        "groups": {"count": len(state.registry.by_group)},
        "runs": _runs(state, top),
        "queues": _queues(state, top),
        "backlog": _backlog(state, top),
        "asks": {"pending": len(state.asks.by_id)},
        "invocations": {"queued": sum(len(q) for q in state.invocations.queued.values()),
                        "started": len(state.invocations.started),
                        DONE: counters[f"invocations.{DONE}"],
                        FAILED: counters[f"invocations.{FAILED}"]},
        "conversations": _conversations(state),
        "brokers": _brokers(state),
        "store": {"fileBytes": shell.store_file_bytes, "commitP50S": shell.commit_p50_s,
                  "commitP99S": shell.commit_p99_s, "commits": shell.commits,
                  "pendingRecords": shell.pending_records},
        "counters": _counters(counters),
        "lastRefusals": [{"at": at, "code": code, "re": re, **caller}
                         for at, code, caller, re in state.refusals],
    }


def _sessions(state: State) -> dict[str, Any]:
    kinds = Counter(s.kind for s in state.registry.by_id.values() if s.broker is None)
    return {"local": sum(kinds.values()), "byKind": dict(sorted(kinds.items())),
            "mirrored": len(state.cluster.remote)}


def _runs(state: State, top: int) -> dict[str, Any]:
    dormant = sum(1 for run in state.runs.values() if run.dormant)
    closed = {stage.run_id for kept in state.closed.values() for stage in kept.values()}
    held = state.sticky.held
    # The most queued first, then the newest; stages are counted for those rows only.
    largest = heapq.nlargest(top, ((held(run_id)[0], run.created_at, run_id)
                                   for run_id, run in state.runs.items()))
    return {"live": len(state.runs) - dormant, "dormant": dormant, "closed": len(closed),
            "elsewhere": len(state.cluster.run_owners),
            "top": [_run_row(state, state.runs[run_id], top) for _, _, run_id in largest]}


def _run_row(state: State, run, top: int) -> dict[str, Any]:
    host = state.registry.by_id.get(run.host_id or "")
    nodes = list(run.nodes())
    entries, size = state.sticky.held(run.run_id)
    return {"runId": run.run_id, "host": host.name if host is not None else None,
            "dormant": run.dormant,
            "stages": dict(sorted(Counter(node.state for node in nodes).items())),
            "running": [node.key() for node in nodes if node.state == RUNNING][:top],
            "entries": entries, "bytes": size}


def _queues(state: State, top: int) -> dict[str, Any]:
    depths = state.sticky.depths()
    largest = heapq.nlargest(top, depths.items(), key=lambda item: (item[1][0], item[1][1]))
    return {"entries": sum(d[0] for d in depths.values()),
            "bytes": state.sticky.total_bytes,
            "top": [{"runId": run_id, "target": key, "entries": d[0], "bytes": d[1]}
                    for (run_id, key), d in largest]}


def _backlog(state: State, top: int) -> dict[str, Any]:
    # (minus the backlog, serial, session): the furthest behind first, then the oldest;
    # serials are unique, so sessions themselves are never compared.
    rows = [(s.read_bytes - s.sent_bytes, s.serial, s) for s in state.registry.by_id.values()
            if s.broker is None and s.kind != CONTROL]
    inbound = state.asks.inbound
    return {"bytes": -sum(row[0] for row in rows),
            "top": [{"id": s.id, "name": s.name, "kind": s.kind, "status": s.status_text,
                     "backlogBytes": -behind, "pendingAsks": len(inbound.get(s.id, ())),
                     "groups": len(s.groups)}
                    for behind, _, s in heapq.nsmallest(top, rows)]}


def _conversations(state: State) -> dict[str, Any]:
    conversations = [c for by_channel in state.conversations.by_agent.values()
                     for c in by_channel.values()]
    return {"total": len(conversations), "live": sum(1 for c in conversations if c.live),
            "persistent": sum(1 for c in conversations if c.persistent),
            "agents": len(state.conversations.by_agent)}


def _brokers(state: State) -> dict[str, Any]:
    cluster = state.cluster
    peers = [{"brokerId": p.broker_id, "endpoint": p.endpoint, "gone": p.gone,
              "linked": p.identity is not None and not p.gone and not p.silent,
              "unreachable": p.silent, "sessions": len(p.mirrors),
              "leaseUntil": p.lease_until} for p in cluster.peers.values()]
    return {"peers": sorted(peers, key=lambda p: p["brokerId"]),
            "links": sum(1 for p in peers if p["linked"]),
            "unlinked": dict(cluster.unlinked), "orphaned": sorted(cluster.orphans),
            "moving": sorted(cluster.moving)}


def _counters(counters: Counter[str]) -> dict[str, Any]:
    refusals = {name[len(REFUSED):]: n for name, n in counters.items() if name.startswith(REFUSED)}
    return {"messagesRouted": counters["messages.routed"], "asksSettled": counters["asks.settled"],
            "refusals": dict(sorted(refusals.items())), "refused": sum(refusals.values()),
            "events": {name: n for name, n in sorted(counters.items())
                       if not name.startswith(REFUSED)}}
