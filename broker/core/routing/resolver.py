"""What the ``to`` of a send or an ask names: one resolver, one precedence, typed targets.

Every verb that takes a ``to`` (``send`` alone, pipelined ``sends``, a send to a
``workflow:`` path, ``ask``) and the placement step that runs before any handler
(:mod:`broker.core.cluster.placement`) ask :func:`resolve`; the matching below it
(names and ids: :mod:`broker.core.messaging.targeting`; paths:
:mod:`broker.core.runs.paths`; closed stages, held subagents) are helpers that
answer one question each and decide no order. The order is :func:`resolve`'s
docstring, and nowhere else.

Once per request: when another broker is live, placement resolves a request's
target first (``placing=True``, which also weighs targets on other brokers) and
keeps the result, refusal included, in ``State.resolved`` for as long as
:func:`broker.core.assembly.dispatch.handle` handles that request; the handler's own
call gets it back instead of resolving again. A handler never sees a target on
another broker: such a request was forwarded or parked before it ran.
"""

from __future__ import annotations

from dataclasses import dataclass

from schemas.errors import BusError

from broker.core.sessions import backlog
from broker.core.sessions.authority import non_agent, refuse_non_agent, run_for
from broker.core.sessions.registry import Session
from broker.core.kernel.hooks import Hooks
from broker.core.kernel.state import State
from broker.core.messaging.inbound_gate import check_refuse
from broker.core.messaging.targeting import resolve_session
from broker.core.workflow import closed_stages as closed, held_sends as held
from broker.core.workflow.closed_stages import ClosedStage
from broker.core.workflow.path_delivery import stage_for_ask
from broker.core.runs.paths import PREFIX as PATH_PREFIX, WorkflowPath, looks_like_path, parse_path
from broker.core.runs.run_tree import Run, Subagent


@dataclass(frozen=True, slots=True)
class Mirror:
    """A session another broker holds (a mirror here): placement hands the request to
    that broker; a request already forwarded here delivers to the mirror."""

    session: Session


@dataclass(frozen=True, slots=True)
class RunPath:
    """A send to a ``workflow:`` path of a run this broker holds and the caller
    controls: delivered to live stages or kept as a sticky entry."""

    path: WorkflowPath
    run: Run


@dataclass(frozen=True, slots=True)
class ClosedStageHost:
    """A late message to a stage of an ended run: ``session`` is the run's host."""

    session: Session
    stage: ClosedStage


@dataclass(frozen=True, slots=True)
class HeldSubagent:
    """A send to a subagent of a dormant run this broker holds: kept until it is back."""

    run: Run
    sub: Subagent


@dataclass(frozen=True, slots=True)
class RemoteRun:
    """A path of a run another live broker owns (or, ended, whose host it holds)."""

    broker_id: str


@dataclass(frozen=True, slots=True)
class RemoteHeld:
    """A subagent of another broker's dormant run: that broker holds sends for it."""

    broker_id: str


@dataclass(frozen=True, slots=True)
class OrphanRun:
    """A path of a dead broker's run nobody adopted yet: the request waits for it."""

    run_id: str


# A session connected here (a name, id or prefix that matched it, or for an ask to a
# path the live session of the stage it names) is its own target, the Session itself:
# the common case takes no wrapper. Every other target is one of the types above.
Target = (Session | Mirror | RunPath | ClosedStageHost | HeldSubagent | RemoteRun | RemoteHeld
          | OrphanRun)


def resolve(state: State, caller: Session, to: str, verb: str, *,
            placing: bool = False) -> Target:
    """What ``to`` names for ``caller``'s ``verb`` ("send" or "ask").

    Precedence: the first step that finds anything wins; a step that refuses ends
    the resolution with that refusal. Steps marked *placing* count only when
    placement asks (another broker live, ``caller`` connected here): a request that
    reached its handler belongs here.

    A ``workflow:`` path:

    1. it must parse (``invalid_path``);
    2. *placing*: its run is not here and another live broker owns it, or it ended
       and that broker holds its last host: :class:`RemoteRun`;
    3. *placing*: its run is a dead broker's, not adopted yet: :class:`OrphanRun`;
    4. a stage of an ended run the caller may reach, by that spelling:
       :class:`ClosedStageHost` (an ask: ``stage_closed`` without a late router);
    5. the run here, which the caller must control (``unknown_run``,
       ``workflow_different_group``): a send gets :class:`RunPath`; an ask gets the
       one live session of the stage it names (the :class:`Session`)
       (``pending_stage_ask_unsupported``, ``run_dormant``, ``ambiguous_stage``,
       ``self_target``, ``non_agent_target``).

    Anything else:

    1. a session by exact id, name, unique 8-hex prefix or Atomic id, among those the
       caller may reach (:func:`~broker.core.messaging.targeting.resolve_session`:
       ``self_target``, ``different_group``, ``ambiguous_target``,
       ``invalid_target`` ends here too), then ``non_agent_target`` for a non-agent
       node's connection, ``inbound_refused`` for a session whose gate refuses
       (:mod:`broker.core.messaging.inbound_gate`) and ``target_backlogged``: the :class:`Session` when it
       is connected here, a :class:`Mirror` when another broker holds it;
    2. ``non_agent_target`` when ``to`` names a known non-agent node;
    3. the last session id of a closed stage: :class:`ClosedStageHost` (as in 4.
       above, ``stage_closed`` for an ask; ``target_backlogged``);
    4. *placing*: a subagent of another broker's dormant run: :class:`RemoteHeld`;
    5. a subagent of a dormant run here: a send gets :class:`HeldSubagent`, an ask
       is refused ``run_dormant``;
    6. ``target_not_found``.

    Raises BusError with the codes above.
    """
    if placing:
        try:
            found = _resolve(state, caller, to, verb == "ask", state.hooks)
        except BusError as error:
            state.resolved = (caller, to, verb, error)
            raise
        state.resolved = (caller, to, verb, found)
        return found
    known = state.resolved
    if known is not None and known[0] is caller and known[2] == verb and known[1] == to:
        if isinstance(known[3], BusError):
            raise known[3]
        return known[3]
    # The handler's own resolution, on the hot path: no layer more than it needs.
    if to.startswith(PATH_PREFIX):
        return _path(state, caller, to, verb == "ask", None)
    return _named(state, caller, to, verb == "ask", None)


# -- internals -----------------------------------------------------------------------

def _resolve(state: State, caller: Session, to: str, ask: bool,
             elsewhere: Hooks | None) -> Target:
    if looks_like_path(to):
        return _path(state, caller, to, ask, elsewhere)
    return _named(state, caller, to, ask, elsewhere)


def _named(state: State, caller: Session, to: str, ask: bool,
           elsewhere: Hooks | None) -> Target:
    try:
        session = resolve_session(state, caller, to)
    except BusError as error:
        if error.code != "target_not_found":
            raise
        refuse_non_agent(state, caller, to, None)
        stage = closed.reachable(state, caller, to, ask=ask)
        if stage is not None:
            host = _host(state, stage)
            backlog.check(state, host)
            return ClosedStageHost(host, stage)
        holder = elsewhere.holder_of(state, caller, to) if elsewhere is not None else None
        if holder is not None:
            return RemoteHeld(holder)
        dormant = held.find(state, caller, to)
        if dormant is None:
            raise
        if ask:
            raise BusError("run_dormant", run_id=dormant[0].run_id)
        return HeldSubagent(*dormant)
    if non_agent(state, session):        # a non-agent node's connection
        raise BusError("non_agent_target", to=to)
    check_refuse(session)
    backlog.check(state, session)
    return session if session.broker is None else Mirror(session)


def _path(state: State, caller: Session, to: str, ask: bool,
          elsewhere: Hooks | None) -> Target:
    path = parse_path(to)
    if elsewhere is not None and path.run_id not in state.runs:
        broker_id = elsewhere.run_broker(state, path.run_id)
        if broker_id is not None:
            return RemoteRun(broker_id)
        if elsewhere.orphaned(state, path.run_id):
            return OrphanRun(path.run_id)
    stage = closed.reachable(state, caller, to, ask=ask)
    if stage is not None:
        # Its backlog is checked as each item is delivered (path_delivery.send_late) or
        # as the ask is admitted (ask_actions.open_ask).
        return ClosedStageHost(_host(state, stage), stage)
    run = run_for(state, caller, path)
    if ask:
        return stage_for_ask(state, caller, run, path, to)
    return RunPath(path, run)


def _host(state: State, stage: ClosedStage) -> Session:
    """The host of a closed stage the caller may reach: connected here (closed_stages
    keeps the stages of open hosts only)."""
    return state.registry.by_id[stage.host_id]
