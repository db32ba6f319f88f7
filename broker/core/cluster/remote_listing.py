"""Runs other brokers own, in a ``list`` here: their rows are asked of their owners.

Only a run's owner holds its stages, sticky entries and delivery states
(:mod:`broker.core.cluster.ownership`); the other brokers know only who owns it. So when a
session here lists while it is a member of the invocation group of a run another
live broker owns (a peer that joined ``workflow:<run>``, a host whose client failed
over here), this broker asks each owner once (``link_list``: the session and those
run ids) and answers the ``list`` when every owner has answered (``link_listed``).
The owner checks control as for its own sessions (the session is a mirror there,
with the same groups: its presence goes before the question on the same link) and
answers with the rows it would list itself, so the list here shows those runs
exactly as the owner's own list does.

Why asking, not copies pushed on every change: a run changes on every queued send,
hand-over and stage state, and a copy would have to follow each one to every broker
whether anyone lists or not; asking costs one round trip per owner per ``list``, and
the rows are the owner's at that moment (a send it answered ``queued`` before is in
them).

Bounds, so a list never hangs: an owner that has not answered within
:data:`LIST_WAIT_S`, that goes meanwhile, or whose runs wait for an adoption (it
died) does not hold the answer up: its runs are listed with ``state:
"root-unresolved"`` and a ``diagnostic`` naming the run, the broker and what went
wrong. A session has at most :data:`MAX_LISTS_WAITING` lists waiting; the runs of a
further one are listed that way at once, without asking.

Invariants: every list waiting here is answered exactly once (all owners answered,
its deadline passed, or its owners went), and is forgotten with its session.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from schemas import envelopes
from schemas.names import run_group, run_of_group

from broker.core.cluster import ownership
from broker.core.sessions.authority import controls, may_control
from broker.core.cluster.peers import Peer
from broker.core.kernel.commands import LinkSend
from broker.core.workflow.run_listing import run_row
from broker.core.sessions.registry import Session
from broker.core.kernel.state import State

LIST_WAIT_S = 1.0        # an owner's rows are waited for this long at most
MAX_LISTS_WAITING = 8    # per session
UNRESOLVED = "root-unresolved"


@dataclass(slots=True, eq=False)
class WaitingList:
    """A ``list`` answered once its owners' rows are in."""

    session: Session
    re: str
    answer: dict[str, Any]
    order: list[str]                       # run ids, in the session's membership order
    rows: dict[str, dict]                  # run id -> its row (here, from its owner, marker)
    asked: dict[str, list[str]] = field(default_factory=dict)   # broker id -> run ids
    deadline: float = 0.0


def wait_for_owners(state: State, session: Session, re: str, answer: dict[str, Any],
                    now: float) -> bool:
    """Complete ``answer`` (a list of ``session``'s, with this broker's rows) with the
    runs other brokers own; True when it is answered here (at once, or once its owners
    answered), False when no other broker owns any of them (or none is live)."""
    if not state.cluster.others:
        return False
    order: list[str] = []                  # every invocation group's run, in order
    asked: dict[str, list[str]] = {}
    markers: dict[str, dict] = {}
    for group in session.groups:
        owner = run_of_group(group)
        if owner is None or owner[1]:
            continue
        run_id = owner[0]
        order.append(run_id)
        if run_id in state.runs or not may_control(session, run_id, group):
            continue
        peer = ownership.owner(state, run_id)
        if peer is not None:
            asked.setdefault(peer.broker_id, []).append(run_id)
            continue
        dead = _orphaned_by(state, run_id)
        if dead is not None:      # else ended, or never known: not listed, as on its owner
            markers[run_id] = unresolved(run_id, dead, f"broker {dead} that owned it is gone "
                                         "and no broker has taken it over yet")
    if not asked and not markers:
        return False
    waiting = state.cluster.listing.setdefault(session.id, {})
    if asked and len(waiting) >= MAX_LISTS_WAITING:
        for broker_id, run_ids in asked.items():
            for run_id in run_ids:
                markers[run_id] = unresolved(run_id, broker_id, f"not asked: {len(waiting)} "
                                             "lists of this session already wait for other brokers")
        asked = {}
    rows = {row["runId"]: row for row in answer.get("workflows", ())}
    rows.update(markers)
    pending = WaitingList(session, re, answer, order, rows, asked, now + LIST_WAIT_S)
    if not asked:
        if not waiting:
            del state.cluster.listing[session.id]
        _finish(pending)
        state.answer(session, re, answer)
        return True
    state.cluster.list_seq += 1
    token = str(state.cluster.list_seq)
    waiting[token] = pending
    for broker_id, run_ids in asked.items():
        state.out.append(LinkSend(broker_id, [envelopes.link_list(session.id, token, run_ids)]))
    state.stats["list.asked_owners"] += 1
    return True


def query(state: State, peer: Peer, env: dict, now: float) -> None:
    """``link_list`` from ``peer``: the rows of the runs named that its session controls."""
    mirror = state.cluster.remote.get(env["from"])
    rows = []
    if mirror is not None and mirror.broker == peer.broker_id:
        for run_id in env["runs"][:state.limits.max_groups]:
            run = state.runs.get(run_id) if run_id.__class__ is str else None
            if run is not None and controls(mirror, run):
                rows.append(run_row(state, run))
    state.out.append(LinkSend(peer.broker_id, [envelopes.link_listed(env["from"], env["token"], rows)]))


def listed(state: State, peer: Peer, env: dict, now: float) -> None:
    """``link_listed`` from ``peer``: its rows go into the list; answered when complete."""
    waiting = state.cluster.listing.get(env["to"])
    pending = waiting.get(env["token"]) if waiting else None
    if pending is None or peer.broker_id not in pending.asked:
        state.stats["list.late_rows"] += 1
        return
    asked = set(pending.asked.pop(peer.broker_id))
    for row in env["rows"]:
        if row.__class__ is dict and row.get("runId") in asked:
            pending.rows[row["runId"]] = row
    if not pending.asked:
        _answer(state, env["to"], env["token"])


def expire(state: State, now: float) -> None:
    """Lists whose owners did not all answer in time are answered with what is known."""
    for session_id, waiting in list(state.cluster.listing.items()):
        for token, pending in list(waiting.items()):
            if now >= pending.deadline:
                state.stats["list.owner_timeout"] += 1
                _give_up(pending, lambda broker_id: f"broker {broker_id} that owns it did not "
                                                    f"answer within {LIST_WAIT_S:g} s")
                _answer(state, session_id, token)


def broker_gone(state: State, peer: Peer) -> None:
    """``peer`` is gone: lists waiting on it are answered without its runs' rows."""
    for session_id, waiting in list(state.cluster.listing.items()):
        for token, pending in list(waiting.items()):
            if peer.broker_id in pending.asked:
                _give_up(pending, lambda broker_id: f"broker {broker_id} that owns it went away "
                                                    "before answering; list again shortly",
                         only=peer.broker_id)
                if not pending.asked:
                    _answer(state, session_id, token)


def next_deadline(state: State) -> float | None:
    deadlines = [p.deadline for w in state.cluster.listing.values() for p in w.values()]
    return min(deadlines) if deadlines else None


def unresolved(run_id: str, broker_id: str, diagnostic: str) -> dict[str, Any]:
    """The row of a run whose owner cannot be asked: its id and what went wrong."""
    return {"runId": run_id, "group": run_group(run_id), "owner": broker_id,
            "state": UNRESOLVED, "diagnostic": f"run {run_id}: {diagnostic}"}


# -- internals -----------------------------------------------------------------------

def _orphaned_by(state: State, run_id: str) -> str | None:
    """The dead broker whose run ``run_id`` waits for an adoption, if any."""
    for dead, orphans in state.cluster.orphans.items():
        if run_id in orphans.hosts:
            return dead
    return None


def _give_up(pending: WaitingList, why, only: str | None = None) -> None:
    for broker_id in [only] if only else list(pending.asked):
        for run_id in pending.asked.pop(broker_id, ()):
            pending.rows[run_id] = unresolved(run_id, broker_id, why(broker_id))


def _finish(pending: WaitingList) -> None:
    rows = [pending.rows[r] for r in pending.order if r in pending.rows]
    answer = pending.answer
    answer.pop("workflows", None)
    if rows:
        # Before closedStages, as on the run's own broker.
        ended = answer.pop("closedStages", None)
        answer["workflows"] = rows
        if ended is not None:
            answer["closedStages"] = ended


def _answer(state: State, session_id: str, token: str) -> None:
    waiting = state.cluster.listing.get(session_id)
    pending = waiting.pop(token, None) if waiting else None
    if waiting is not None and not waiting:
        del state.cluster.listing[session_id]
    if pending is None or state.registry.by_id.get(session_id) is not pending.session:
        return
    _finish(pending)
    state.answer(pending.session, pending.re, pending.answer)
