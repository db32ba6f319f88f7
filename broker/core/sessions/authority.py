"""Who may see, reach and steer whom: every visibility and authority rule, in one place.

Visibility is membership intersection, extended one way by workflow invocation
control. A session *controls* run R when it is a member of R's invocation group
``workflow:R`` and is not a stage of some other home: a stage session controls only
its own run, and only when it lives in the invocation group itself (not a subgroup).
Control lets a session see, send to, queue for and ask the stages of R, including
those isolated in R's subgroups; subgroup members see only their own subgroup. A
read-only ``group`` peek (``list``/``status``) crosses no more than that: see
:func:`peek`.
A control connection (:mod:`broker.core.sessions.control`) is outside all of this as the one
seen: the registry's indexes never yield it, so it is nobody's peer, watcher or
target; as a viewer it sees as a member of its home group.
Authority is a relation the broker records (a run's host, a stage's binding, a
child's parent), never a flag a client asserts.

Cost: every function here is O(the caller's memberships + what it returns), found
through the registry's indexes (``by_group``, ``subgroups``); none scans all
sessions or all runs.
"""

from __future__ import annotations

from typing import Any, Iterable

from schemas.errors import BusError
from schemas.names import run_group, run_of_group

from broker.core.runs.paths import WorkflowPath, parse_path, path_run
from broker.core.runs.run_tree import Run
from broker.core.sessions.registry import Session
from broker.core.kernel.state import State


def controls(session: Session, run: Run) -> bool:
    return run.group in session.groups and may_control(session, run.run_id, run.group)


def may_control(session: Session, run_id: str, group: str) -> bool:
    """Whether ``session``, as a member of ``group`` (run ``run_id``'s invocation
    group), controls that run: anyone but a stage, and a stage only its own run from
    its home in that group. A mirror's stage (bound on its own broker) counts as one."""
    if session.binding is not None:
        own_run = session.binding.run_id
    elif session.mirrored_stage is not None:
        own_run = path_run(session.mirrored_stage)
    else:
        return True
    return own_run == run_id and session.home_group == group


def _subgroup_runs(state: State, groups: Iterable[str]) -> list[Run]:
    """Runs owning the subgroups among ``groups``."""
    runs = []
    for group in groups:
        if "/" not in group:           # the common case, cheaply: not a subgroup
            continue
        owner = run_of_group(group)
        if owner is not None and owner[1]:
            run = state.runs.get(owner[0])
            if run is not None:
                runs.append(run)
    return runs


def controlled_runs(state: State, session: Session) -> list[Run]:
    """The runs ``session`` controls, in the order of its memberships."""
    runs = []
    for group in session.groups:
        owner = run_of_group(group)
        if owner is not None and not owner[1]:
            run = state.runs.get(owner[0])
            if run is not None and controls(session, run):
                runs.append(run)
    return runs


def sees_into(state: State, viewer: Session, groups: Iterable[str]) -> bool:
    """Whether control over a run lets ``viewer`` see members of ``groups``."""
    return any(controls(viewer, run) for run in _subgroup_runs(state, groups))


def visible(state: State, viewer: Session, other: Session) -> bool:
    if viewer is other or not viewer.groups.keys().isdisjoint(other.groups):
        return True
    return sees_into(state, viewer, other.groups)


def visible_to(state: State, viewer: Session) -> list[Session]:
    """Every other session ``viewer`` may see, in connection order."""
    registry = state.registry
    ids = registry.neighbours(viewer)
    for run in controlled_runs(state, viewer):
        for group in registry.subgroups.get(run.run_id, ()):
            ids |= registry.by_group.get(group, set())
    ids.discard(viewer.id)
    return sorted((registry.by_id[i] for i in ids), key=lambda s: (s.connected_at, s.id))


def may_peek(state: State, viewer: Session, group: str) -> bool:
    """Whether a read-only ``group`` filter shows ``viewer`` the members of ``group``.

    Its members may; anyone may peek at an ordinary group (anyone may join it). A
    workflow group is isolated: a run's subgroup shows only to those who control the
    run, so a subgroup member never discovers a sibling subgroup; its invocation group
    shows to no stage session outside it, so neither a subgroup member (ownership
    grants no reverse access) nor another run's stage looks in.
    """
    owner = run_of_group(group)
    if owner is None or group in viewer.groups:
        return True
    run_id, subgroup = owner
    if subgroup:
        run = state.runs.get(run_id)
        return run is not None and controls(viewer, run)
    return viewer.binding is None


def peek(state: State, viewer: Session, group: str) -> list[Session]:
    """The other members of ``group`` that a read-only filter shows ``viewer``, in
    connection order; none (as for a group nobody is in) when it may not look in."""
    if not may_peek(state, viewer, group):
        return []
    rows = [s for s in state.registry.members(group) if s is not viewer]
    return sorted(rows, key=lambda s: (s.connected_at, s.id))


def watchers(state: State, groups: Iterable[str]) -> set[str]:
    """Sessions that may see members of ``groups`` through invocation control."""
    found: set[str] = set()
    registry = state.registry
    for run in _subgroup_runs(state, groups):
        found |= {i for i in registry.by_group.get(run.group, ())
                  if controls(registry.by_id[i], run)}
    return found


def check_join(state: State, session: Session, group: str) -> None:
    """Subgroups are joined only with control over their run.

    Raises BusError(workflow_different_group).
    """
    owner = run_of_group(group)
    if owner is not None and owner[1]:
        run = state.runs.get(owner[0])
        if run is None or not controls(session, run):
            raise different_group(session, owner[0])


def check_claimed(groups: list[str], home: str, is_stage: bool) -> None:
    """Groups a connecting session claims (home and restored memberships).

    A stage keeps its own home; anyone else may hold a run's subgroup only together
    with that run's invocation group, as control requires.
    Raises BusError(workflow_different_group).
    """
    for group in {home, *groups}:
        owner = run_of_group(group)
        if owner is None or not owner[1]:
            continue
        if is_stage:
            if group != home:
                raise BusError("workflow_different_group", hint="")
        elif group.split("/", 1)[0] not in groups:
            raise BusError("workflow_different_group", hint="")


def run_for(state: State, session: Session, path: WorkflowPath) -> Run:
    """The run a path names, if ``session`` controls it.

    Raises BusError(unknown_run | workflow_different_group).
    """
    run = state.runs.get(path.run_id)
    if run is None:
        if run_group(path.run_id) in session.groups:
            raise BusError("unknown_run", run_id=path.run_id)
        # No such run here: joining its group would not help, so no hint says so.
        raise BusError("workflow_different_group", hint="")
    if not controls(session, run):
        raise different_group(session, path.run_id, run)
    return run


def different_group(session: Session, run_id: str, run: Any = None) -> BusError:
    """The refusal of a run's stages to a session without control, saying how control
    is gained (a stage never gains it), and whether the run's host is gone (what is
    queued to a dormant run waits for it to resume)."""
    if session.stage is None and run is not None and run.host_id is None:
        return BusError("workflow_different_group", hint=(
            f"; its host left (the run is dormant or waits for it): what members queue "
            f"waits for the run to resume. To queue anyway, join its invocation group "
            f"first: intercom({{action: \"join\", group: \"{run_group(run_id)}\"}})"))
    if session.stage is not None:
        hint = ("; a workflow stage cannot steer another run, nor its own run's parent "
                "or sibling groups")
    else:
        hint = (f"; to steer it, join its invocation group first: "
                f"intercom({{action: \"join\", group: \"{run_group(run_id)}\"}})")
    return BusError("workflow_different_group", hint=hint)


def non_agent(state: State, session: Session) -> bool:
    """Whether ``session`` is the connection of a non-agent node (prompt, tool, ui) of a
    run this broker knows: bound here, or a mirror of one bound on another broker."""
    if session.binding is not None:
        run_id, key = session.binding.run_id, session.binding.node_key
    elif session.mirrored_stage is not None:
        try:
            path = parse_path(session.mirrored_stage)
        except BusError:          # its broker checked it; a bad row binds nothing here
            return False
        run_id, key = path.run_id, "/".join(path.segments)
    else:
        return False
    run = state.runs.get(run_id)
    node = run.node_by_key(key) if run else None
    return node is not None and not node.is_agent


def refuse_non_agent(state: State, caller: Session, to: str, target: Session | None) -> None:
    """Known non-agent ids, names and connections never receive messages.

    Raises BusError(non_agent_target).
    """
    if target is not None:
        if non_agent(state, target):
            raise BusError("non_agent_target", to=to)
        return
    for group in caller.groups:
        owner = run_of_group(group)
        run = state.runs.get(owner[0]) if owner is not None and not owner[1] else None
        if run is not None:
            nodes = run.anywhere.get(to)
            if nodes and not any(n.is_agent for n in nodes):
                raise BusError("non_agent_target", to=to)


def refuse_non_agent_launcher(state: State, session: Session) -> None:
    """A non-agent node's connection launches no child: it gets no child grant, so it
    never becomes anyone's supervisor.

    Raises BusError(non_agent_launcher).
    """
    if non_agent(state, session):
        raise BusError("non_agent_launcher", stage=session.stage)
