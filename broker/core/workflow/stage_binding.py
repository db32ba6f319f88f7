"""Stage sessions: binding a connecting session to its node, and what follows from it.

A session that connects with ``kind="stage"`` and a canonical path is bound to that
node (materialized if the host has not declared it yet): it gets its home group from
the node, a typed :class:`~broker.core.sessions.registry.StageBinding`, and, before anything
else, every retained sticky entry for the node that its transcript has not
acknowledged, in FIFO order. Receipts (``received``) mark hand-overs acknowledged.
A run's host going and coming back is tracked here too.

Invariants:

* a node names at most one live session (``node.session_id``), cleared when it leaves;
* a hand-over is acknowledged only for the (node, transcript) it was made to.
"""

from __future__ import annotations

from schemas.errors import BusError
from schemas.names import ACKED, AUTO_GROUPS, DEFAULT_GROUP, PENDING, RUNNING, SENT

from broker.core.workflow import held_sends as held
from broker.core.sessions.grants import check_stage
from broker.core.workflow.path_delivery import deliverable, hand_over, node_at
from broker.core.runs.paths import WorkflowPath, parse_path
from broker.core.kernel.records import StickyDelivery
from broker.core.runs.run_tree import Node, Run, build_nodes
from broker.core.sessions.registry import Session, StageBinding
from broker.core.kernel.lifecycle import RunChanged, SessionChanged, SessionLeft, emit
from broker.core.kernel.state import State

MAX_RECEIPTS = 512       # ids read from one ``received`` envelope


def stage_home(state: State, stage: str, group: str | None, grant: object,
               now: float) -> tuple[str, Run, Node]:
    """Home group, run and node of a connecting stage session, if its grant allows.

    Raises BusError(invalid_path | unknown_run | run_elsewhere |
    grant_required | invalid_grant).
    """
    path = parse_path(stage)
    if path.is_pattern:
        raise BusError("invalid_path", to=stage, detail="a stage binds to an exact path")
    run = state.runs.get(path.run_id)
    if run is None:
        state.hooks.check_run_here(state, path.run_id)
        raise BusError("unknown_run", run_id=path.run_id)
    # The exact name path first: an id elsewhere in the tree may spell the same segments.
    node = run.by_key.get("/".join(path.segments)) or node_at(run, path)
    if node is None:
        # Only the host declares stages: an unknown path has no grant to match.
        check_stage(state.grant_key, run, materialize(run, path, attach=False), grant)
        node = materialize(run, path)
    else:
        check_stage(state.grant_key, run, node, grant)
    group = group or node.group
    if group is None:
        home = run.group
    elif group == DEFAULT_GROUP:
        home = DEFAULT_GROUP
    elif group in AUTO_GROUPS:
        home = f"{run.group}/{node.name}"
    else:
        home = f"{run.group}/{group.strip()}"
    return home, run, node


def materialize(run: Run, path: WorkflowPath, *, attach: bool = True) -> Node:
    """A node for a path the host has not declared (its parent must be known);
    ``attach=False`` only builds it (to check a grant before the run changes).

    Raises BusError(invalid_path).
    """
    parent = None
    if len(path.segments) > 1:
        parent = node_at(run, WorkflowPath(run.run_id, path.segments[:-1]))
        if parent is None:
            raise BusError("invalid_path", to=str(path), detail="its parent stage is not known")
    nodes = build_nodes([{"name": path.segments[-1]}], parent)
    if attach:
        run.attach(nodes, parent)
    return nodes[0]


def bind(state: State, session: Session, run: Run, node: Node, transcript: str,
         now: float) -> None:
    """Bind ``session`` to ``node`` and hand it the retained entries, FIFO."""
    session.binding = StageBinding(run.run_id, node.key(), run.canonical(node), transcript)
    node.session_id = node.last_session_id = session.id
    node.transcript = transcript
    node.started = True
    if node.state == PENDING:
        node.state = RUNNING
    save(state, run)
    held.stage_restored(state, run, node.key())
    if not deliverable(node):
        return
    for entry in state.sticky.matching(run.run_id, node):
        if entry.deliveries.get((node.key(), transcript)) != ACKED:
            hand_over(state, entry, node, session, now, before_start=True)


def reconnected(state: State, session: Session, now: float) -> None:
    """A bound stage's client came back on a new connection (a blip, a failover back):
    the entries handed to its old connection and not acknowledged since are handed
    over again, in order (its client drops copies by message id)."""
    binding = session.binding
    run = state.runs.get(binding.run_id) if binding is not None else None
    node = run.node_by_key(binding.node_key) if run is not None else None
    if node is None or node.session_id != session.id or not deliverable(node):
        return
    for entry in state.sticky.matching(run.run_id, node):
        if entry.deliveries.get((node.key(), binding.transcript)) == SENT:
            hand_over(state, entry, node, session, now, before_start=False, record=False)


def unbind(state: State, session: Session) -> None:
    """``session`` left: its node has no live session, its runs no live host."""
    own = session.binding
    run = state.runs.get(own.run_id) if own else None
    if run is not None:
        node = run.node_by_key(own.node_key)
        if node is not None and node.session_id == session.id:
            node.session_id = None
    for run_id in state.hosted.pop(session.id, ()):
        run = state.runs.get(run_id)
        if run is not None and run.host_id == session.id:
            # The run stays as it was for the host's lease; then it is dormant.
            run.last_host_id, run.host_id = session.id, None
            run.lease_until = state.wall + state.limits.host_lease_s
            state.leased.add(run.run_id)
            save(state, run)


def host_returned(state: State, session: Session) -> None:
    """A host that reconnects (even to a restarted broker, or to another broker: then
    it is a mirror here and hosts through forwarded operations) takes its runs back."""
    for run_id in state.hosted_before.get(session.id, ()):
        run = state.runs.get(run_id)
        if run is not None and run.host_id is None and run.last_host_id == session.id:
            set_host(state, run, session)
            save(state, run)


def set_host(state: State, run: Run, session: Session) -> None:
    """``session`` hosts ``run`` now (a dormant or leased run is resumed)."""
    run.host_id = session.id
    run.last_host_id = session.id
    if run.dormant:
        emit(state, RunChanged(run.run_id))    # its subagents are reachable again
    run.lease_until, run.dormant = None, False
    state.leased.discard(run.run_id)
    state.hosted.setdefault(session.id, set()).add(run.run_id)
    state.hosted_before.setdefault(session.id, set()).add(run.run_id)
    emit(state, SessionChanged(session))     # other brokers learn who owns the run


def received(state: State, session: Session, ids: list) -> None:
    """Receipts: these hand-overs entered the stage's context."""
    own = session.binding
    if own is None:
        return
    for msg_id in ids[:MAX_RECEIPTS]:
        entry = state.sticky.by_message.get(msg_id) if isinstance(msg_id, str) else None
        key = (own.node_key, own.transcript)
        if entry is not None and key in entry.deliveries:
            entry.deliveries[key] = ACKED
            state.persist(StickyDelivery(entry.seq, own.node_key, own.transcript, ACKED,
                                         state.wall, entry.run_id))


def save(state: State, run: Run) -> None:
    state.persist(run.saved(state.broker_id))


def session_left(state: State, event: SessionLeft) -> None:
    """Lifecycle listener: see :func:`unbind`."""
    unbind(state, event.session)
