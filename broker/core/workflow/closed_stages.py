"""Stages of ended runs: listed as closed while their host is open, and where a late
message to one of them goes.

When a host ends a run, each agent stage that ran is kept as a :class:`ClosedStage`
under the host, for as long as the host session stays connected. Its reply mode is
``post-mortem only`` when the host declared a late-message router for the run
(``register_run`` with ``lateRouter``), else ``unavailable``. A late message names
the stage by its canonical path, its final-stage-name variant
(``workflow:<run>/<stage name>``) or the id of the last session that ran it:

* an ask to a post-mortem stage is handed to the host (marked ``postMortem`` with the
  stage's path), which answers with one turn of the saved conversation;
* an ask to an unavailable stage is refused ``stage_closed``;
* a plain send reaches the host session.

Invariants: closed stages never outlive their host's session; a run id registered
again hides the closed stages of its earlier generation.
"""

from __future__ import annotations

from dataclasses import dataclass

from schemas.errors import BusError

from broker.core.runs.run_tree import Run
from broker.core.sessions.registry import Session
from broker.core.kernel.lifecycle import SessionLeft
from broker.core.kernel.state import State

POST_MORTEM = "closed · reply: post-mortem only"
UNAVAILABLE = "closed · reply: unavailable"


@dataclass(frozen=True, slots=True)
class ClosedStage:
    host_id: str
    run_id: str
    target: str                 # canonical path
    name: str
    stage_id: str | None
    session_id: str | None      # the last session that ran it
    post_mortem: bool

    @property
    def label(self) -> str:
        return POST_MORTEM if self.post_mortem else UNAVAILABLE

    def row(self) -> dict:
        return {"target": self.target, "name": self.name, "id": self.stage_id,
                "sessionId": self.session_id, "runId": self.run_id, "label": self.label}

    def late_fields(self) -> dict:
        """What a late message to this stage carries to its host."""
        return {"postMortem": True, "target": self.target, "stage": self.target}

    def spellings(self) -> set[str]:
        found = {self.target, f"workflow:{self.run_id}/{self.name}"}
        if self.session_id:
            found.add(self.session_id)
        return found


def close_run(state: State, run: Run) -> None:
    """``run`` ended: keep its stages that ran, under its host, if the host is here."""
    host = state.registry.by_id.get(run.host_id or "")
    if host is None:
        return
    kept = state.closed.setdefault(host.id, {})
    for node in run.nodes():
        if node.is_agent and node.started:
            stage = ClosedStage(host.id, run.run_id, run.canonical(node), node.name, node.id,
                                node.last_session_id, run.late_router)
            for spelling in stage.spellings():
                kept[spelling] = stage


def host_gone(state: State, session: Session) -> None:
    state.closed.pop(session.id, None)


def forget_run(state: State, run_id: str) -> None:
    """A run id registered again: its earlier generation's closed stages go."""
    for kept in state.closed.values():
        for spelling in [s for s, stage in kept.items() if stage.run_id == run_id]:
            del kept[spelling]


def rows_for(state: State, session: Session) -> list[dict]:
    """The closed stages ``session`` sees: its own (as host) and those of hosts it
    shares the ended run's group with."""
    rows, seen = [], set()
    for host_id, kept in state.closed.items():
        for stage in kept.values():
            if stage.target not in seen and _may_reach(state, session, stage):
                seen.add(stage.target)
                rows.append(stage.row())
    return rows


def reachable(state: State, sender: Session, to: str, *, ask: bool) -> ClosedStage | None:
    """The closed stage ``to`` spells, if ``sender`` may reach it (its host is then
    connected here: see :func:`_may_reach`). Raises BusError(stage_closed) for an ask
    to a stage whose host has no late-message router."""
    for kept in state.closed.values():
        stage = kept.get(to)
        if stage is not None and _may_reach(state, sender, stage):
            if ask and not stage.post_mortem:
                raise BusError("stage_closed", to=to)
            return stage
    return None


def _may_reach(state: State, session: Session, stage: ClosedStage) -> bool:
    if session.id == stage.host_id:
        return True
    host = state.registry.by_id.get(stage.host_id)
    return host is not None and f"workflow:{stage.run_id}" in session.groups


def session_left(state: State, event: SessionLeft) -> None:
    """Lifecycle listener: a host's closed stages go with it (:func:`host_gone`)."""
    host_gone(state, event.session)
