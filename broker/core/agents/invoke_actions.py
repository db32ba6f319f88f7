"""invoke and finish_invocation, and handing queued jobs to their destinations.

The job table and its states are :mod:`broker.core.agents.invocation_table`; this module decides
when a job moves. A job is answered ``queued: true`` only once its record is
committed. It is handed over when its destination conversation has a live session
whose status is ``idle``: at once, when that session connects or turns idle, when
the previous job of that destination finishes, or at a recheck every
INVOKE_RECHECK_S while the session is busy. A destination without a live session
keeps its jobs until one connects.

Invariant (at most once): :func:`hand_over` moves the job to ``started`` and writes
that first; the ``invocation`` event is sent when the write is committed, and only to
the session that was live when the job started. A started job whose session leaves
before ``finish_invocation`` is failed, never handed over again.

Across brokers sharing a store: a job is handed over only by the broker holding its
destination's live session. A broker holding committed jobs whose destination is a
mirror (its session is on another broker) sends them to that broker over the link
(``link_jobs``) and forgets them; the store's compare-and-set on ``started`` makes
any copy left elsewhere (another broker loaded it at start) harmless: its start is
refused (``invocation_taken``) and it is dropped, nothing sent.
"""

from __future__ import annotations

from typing import Any

from schemas import envelopes
from schemas.errors import BusError
from schemas.limits import INVOKE_RECHECK_S, MAX_QUEUED_INVOCATIONS, MAX_REASON_CHARS
from schemas.names import CHANNEL_ALIASES, FAILED, IDLE, STARTED

from broker.core.agents.activity import touch
from broker.core.agents.registry import Conversation
from broker.core.agents.channels import check_channel
from broker.core.kernel.commands import LinkSend, Send
from broker.core.agents.invocation_table import (FINISHED_FAILED, FINISHED_OK, HAND_OVER, SESSION_ENDED,
                          SESSION_ENDED_TEXT, TAKEN, WRITE_FAILED, Destination, Job)
from broker.core.kernel.records import InvocationState
from broker.core.sessions.registry import Session
from broker.core.kernel.lifecycle import SessionChanged, emit
from broker.core.kernel.state import State


def caller_conversation(state: State, session: Session, what: str) -> Conversation:
    """The conversation ``session`` speaks for. Raises BusError(no_agent)."""
    conversation = state.conversations.by_session.get(session.id)
    if conversation is None:
        raise BusError("no_agent", what=what)
    return conversation


def invoke(state: State, session: Session, env: dict, re: str, now: float) -> None:
    """Raises BusError(no_agent | invoke_disabled | invoke_remote_caller | invalid_params |
    invoke_alias | invalid_channel | invoke_self | invoke_cross_agent | channel_not_found |
    invoke_remote_target | invoke_ephemeral | too_many_invocations)."""
    caller = caller_conversation(state, session, "invoke")
    target = _destination(state, caller, env["session"])
    reason = env["reason"]
    if not 0 < len(reason) <= MAX_REASON_CHARS:
        raise BusError("invalid_params", detail=f"reason must be 1 to {MAX_REASON_CHARS} characters")
    table = state.invocations
    request = f"{session.id}/{re}"
    again = table.by_request.get(request)
    if again is not None:
        # A client resending after a reconnect or a broker restart: the same job. One
        # still uncommitted is answered by its commit (to the session's new connection).
        if again.committed:
            state.answer(session, re, _queued(again))
        return
    if queued_count(state, target) >= MAX_QUEUED_INVOCATIONS:
        raise BusError("too_many_invocations", session=target.channel, limit=MAX_QUEUED_INVOCATIONS)
    job = Job(state.new_id(), target.agent, target.channel, caller.channel, reason, state.wall,
              request)
    table.add(job)
    state.stats["invocations.queued"] += 1

    def committed(at: float) -> None:
        job.committed = True
        tell(state, session, re, _queued(job))
        offer(state, job.destination, at)

    def refused(at: float, error: BusError) -> None:
        table.drop(job)
        tell(state, session, re, error)

    state.persist(job.record(), committed, refused)


def queued_count(state: State, conversation: Conversation) -> int:
    """The conversation's unstarted jobs: those here, or those its session's broker
    holds when that is another broker (as its link rows say)."""
    here = state.invocations.queued_count((conversation.agent, conversation.channel))
    return max(here, conversation.queued_elsewhere) if conversation.live else here


def _queued(job: Job) -> dict[str, Any]:
    return {"queued": True, "id": job.id, "session": job.channel}


def tell(state: State, session: Session, re: str, value: dict[str, Any] | BusError) -> None:
    """A deferred answer, to the session's connection now (it may have moved)."""
    live = state.registry.by_id.get(session.id)
    if live is not None:
        state.answer(live, re, value)


def _destination(state: State, caller: Conversation, channel: str) -> Conversation:
    conversations = state.conversations
    if not conversations.settings_of(caller.agent).invoke:
        raise BusError("invoke_disabled", agent=caller.agent)
    if caller.remote:
        raise BusError("invoke_remote_caller")
    if channel in CHANNEL_ALIASES:
        raise BusError("invoke_alias", session=channel)
    check_channel(channel)
    if channel == caller.channel:
        raise BusError("invoke_self")
    target = conversations.get(caller.agent, channel)
    if target is None:
        if conversations.agents_of.get(channel):
            raise BusError("invoke_cross_agent", session=channel)
        raise BusError("channel_not_found", channel=channel, agent=caller.agent)
    if target.remote:
        raise BusError("invoke_remote_target", session=channel)
    if not target.persistent:
        raise BusError("invoke_ephemeral", session=channel)
    return target


def finish(state: State, session: Session, env: dict, re: str, now: float) -> None:
    """``finish_invocation``: answered once the outcome is committed.

    Raises BusError(no_agent | unknown_invocation)."""
    conversation = caller_conversation(state, session, "finish_invocation")
    table = state.invocations
    job = table.by_id.get(env["id"])
    if (job is None or table.started.get((conversation.agent, conversation.channel)) is not job):
        raise BusError("unknown_invocation", id=env["id"])
    ok = env["ok"] is True
    error = None if ok else (env.get("error") or "the destination reported a failure")
    new_state = table.move(job, FINISHED_OK if ok else FINISHED_FAILED)
    state.stats[f"invocations.{new_state}"] += 1

    state.persist(InvocationState(job.id, new_state, state.wall, error),
                  lambda at: tell(state, session, re, {}),
                  lambda at, refusal: tell(state, session, re, refusal))
    offer(state, job.destination, now)


def offer(state: State, destination: Destination, now: float) -> None:
    """Hand the destination its next job if its session is here and idle (recheck if
    busy), or send its committed jobs to the broker holding its session."""
    table = state.invocations
    conversation = state.conversations.get(*destination)
    if conversation is not None:
        _tell_count(state, conversation)
    job = table.next_ready(destination)
    if job is None:
        return
    session = state.registry.by_id.get(conversation.session_id or "") if conversation else None
    if session is None or not conversation.live:
        return                                  # waits until a session connects
    if session.broker is not None:
        _move(state, destination, session.broker)
        return
    if session.status != IDLE:
        table.recheck_at.setdefault(destination, now + INVOKE_RECHECK_S)
        return
    hand_over(state, job, session)


def hand_over(state: State, job: Job, session: Session) -> None:
    """Start ``job`` in ``session``: durably ``started`` first, the event on commit."""
    table = state.invocations
    table.move(job, HAND_OVER)
    table.recheck_at.pop(job.destination, None)
    conversation = state.conversations.by_session.get(session.id)
    if conversation is not None:
        _tell_count(state, conversation)

    def committed(at: float) -> None:
        live = state.registry.by_id.get(session.id)
        if live is not session or job.state != STARTED:
            return                              # it left meanwhile: the job failed
        state.stats["invocations.started"] += 1
        touch(state, session)
        state.out.append(Send(session.identity, envelopes.invocation(
            job.id, job.agent, job.from_channel, job.reason)))

    def refused(at: float, error: BusError) -> None:
        if job.state != STARTED:
            return
        if error.code == "invocation_taken":    # not queued in the store: not ours to start
            table.move(job, TAKEN)
            state.stats["invocations.taken"] += 1
            offer(state, job.destination, at)
            return
        table.move(job, WRITE_FAILED)           # nothing was handed over: try again later
        table.recheck_at.setdefault(job.destination, at + INVOKE_RECHECK_S)

    state.persist(InvocationState(job.id, STARTED, state.wall, broker_id=state.broker_id),
                  committed, refused)


def _tell_count(state: State, conversation: Conversation) -> None:
    """Other brokers list a local conversation's queued jobs: tell them of a change."""
    if not state.cluster.peers or conversation.told_queued == state.invocations.queued_count(
            (conversation.agent, conversation.channel)):
        return
    session = state.registry.by_id.get(conversation.session_id or "")
    if session is not None and session.broker is None and conversation.live:
        emit(state, SessionChanged(session))


def _move(state: State, destination: Destination, broker_id: str) -> None:
    """The destination's session is on ``broker_id``: its committed jobs go there."""
    jobs = state.invocations.take_committed(destination)
    if jobs:
        state.stats["invocations.moved"] += len(jobs)
        state.out.append(LinkSend(broker_id, [envelopes.link_jobs([job.row() for job in jobs])]))


def arrived(state: State, jobs: list[Job], now: float) -> None:
    """Committed jobs this broker did not hold, for destinations whose session is here
    (or was): sent by another broker (``link_jobs``) or read from the store when the
    destination opened here (:class:`~broker.core.kernel.commands.ReadJobs`). Kept, each
    once, and offered."""
    table = state.invocations
    destinations = set()
    for job in jobs:
        if job.id not in table.by_id and job.request not in table.by_request:
            table.add(job)
            destinations.add(job.destination)
    for destination in sorted(destinations):
        offer(state, destination, now)


def recheck(state: State, now: float) -> None:
    """The engine's tick: destinations whose recheck time came."""
    for destination in state.invocations.due(now):
        offer(state, destination, now)


def session_left(state: State, conversation: Conversation) -> None:
    """The conversation's session is gone: a job running in it has failed."""
    table = state.invocations
    destination = (conversation.agent, conversation.channel)
    table.recheck_at.pop(destination, None)
    job = table.started.get(destination)
    if job is not None:
        table.move(job, SESSION_ENDED)
        state.stats[f"invocations.{FAILED}"] += 1
        state.persist(InvocationState(job.id, FAILED, state.wall, SESSION_ENDED_TEXT))


def status_changed(state: State, session: Session, now: float) -> None:
    """A session reported a status: idle may let its next job start."""
    if session.status == IDLE:
        conversation = state.conversations.by_session.get(session.id)
        if conversation is not None:
            offer(state, (conversation.agent, conversation.channel), now)

