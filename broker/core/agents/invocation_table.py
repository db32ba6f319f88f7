"""Invoke jobs: the table of one-shot turns agents queued for their other sessions.

A job's life is a table keyed ``(state, input)`` (:data:`TRANSITIONS`)::

    queued --hand_over--> started --finished_ok--> done
       |                     |----finished_failed / session_ended / restarted--> failed
       |                     '--taken--> (gone: the store refused the start: another
       |                                  broker started it, or it was deleted)
       |--deleted--> (gone: its destination conversation was deleted)
       '--moved--> (gone from this broker: handed to the broker holding its destination)

Invariants:

* a job is handed over at most once: it leaves ``queued`` for ``started`` in memory
  before its ``started`` record is written, and the event is sent only once that
  record is committed; nothing ever moves a job back to ``queued`` except a failed
  write of that very record (nothing was handed over then);
* a job is deliverable only once its ``queued`` record is committed (``committed``);
* per destination (agent, channel) the unstarted jobs are kept in FIFO order, and at
  most one job is ``started`` at a time: the next one waits for ``finish_invocation``
  or the session leaving;
* ``recheck_at`` holds exactly the destinations found connected but busy, with the
  monotonic time they are looked at again;
* brokers sharing a store may each hold a copy of a queued job; only the broker
  holding the destination's live session hands it over, and the store's
  compare-and-set on ``started`` (:class:`~broker.core.kernel.records.InvocationState`)
  lets one hand-over through store-wide.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from schemas.names import DONE, FAILED, QUEUED, STARTED

from broker.core.kernel.records import InvocationSaved

Destination = tuple[str, str]     # (agent, channel)

HAND_OVER, FINISHED_OK, FINISHED_FAILED, SESSION_ENDED, RESTARTED, WRITE_FAILED, TAKEN = (
    "hand_over", "finished_ok", "finished_failed", "session_ended", "restarted", "write_failed",
    "taken")
GONE = "gone"     # not a stored state: the job is no longer this broker's to hand over

TRANSITIONS: dict[tuple[str, str], str] = {
    (QUEUED, HAND_OVER): STARTED,
    (STARTED, WRITE_FAILED): QUEUED,      # the started record never reached the store
    (STARTED, FINISHED_OK): DONE,
    (STARTED, FINISHED_FAILED): FAILED,
    (STARTED, SESSION_ENDED): FAILED,
    (STARTED, RESTARTED): FAILED,
    (STARTED, TAKEN): GONE,
}

SESSION_ENDED_TEXT = "destination session ended during the turn"
RESTARTED_TEXT = "the broker restarted during the turn"


@dataclass(slots=True, eq=False)
class Job:
    id: str
    agent: str
    channel: str
    from_channel: str
    reason: str
    created_at: float
    request: str                   # "<caller session id>/<request id>": a resend finds it
    state: str = QUEUED
    committed: bool = False

    @property
    def destination(self) -> Destination:
        return (self.agent, self.channel)

    def record(self) -> InvocationSaved:
        return InvocationSaved(self.id, self.agent, self.channel, self.from_channel,
                               self.reason, self.created_at, self.request)

    def row(self) -> dict[str, str | float]:
        """The committed job as another broker takes it (``link_jobs``)."""
        return {"id": self.id, "agent": self.agent, "channel": self.channel,
                "fromChannel": self.from_channel, "reason": self.reason,
                "createdAt": self.created_at, "request": self.request}

    @classmethod
    def from_row(cls, row: object) -> Job | None:
        """A job from another broker's ``link_jobs`` row; None for a malformed row."""
        if row.__class__ is not dict:
            return None
        texts = [row.get(k) for k in ("id", "agent", "channel", "fromChannel", "reason", "request")]
        created = row.get("createdAt")
        if not all(t.__class__ is str for t in texts) or not isinstance(created, (int, float)):
            return None
        job_id, agent, channel, from_channel, reason, request = texts
        return cls(job_id, agent, channel, from_channel, reason, float(created), request,
                   committed=True)

    @classmethod
    def from_record(cls, saved: InvocationSaved) -> Job:
        return cls(saved.id, saved.agent, saved.channel, saved.from_channel, saved.reason,
                   saved.created_at, saved.request, saved.state, committed=True)


class InvocationTable:
    """Unfinished jobs by id and per destination. See the module docstring."""

    def __init__(self) -> None:
        self.by_id: dict[str, Job] = {}
        self.by_request: dict[str, Job] = {}
        self.queued: dict[Destination, deque[Job]] = {}
        self.started: dict[Destination, Job] = {}
        self.recheck_at: dict[Destination, float] = {}

    def add(self, job: Job) -> None:
        """A queued job (a ``started`` one from a restore is failed by the caller first)."""
        self.by_id[job.id] = job
        self.by_request[job.request] = job
        self.queued.setdefault(job.destination, deque()).append(job)

    def queued_count(self, destination: Destination) -> int:
        return len(self.queued.get(destination, ()))

    def next_ready(self, destination: Destination) -> Job | None:
        """The job to hand over next, if one is committed and none is running."""
        if destination in self.started:
            return None
        jobs = self.queued.get(destination)
        return jobs[0] if jobs and jobs[0].committed else None

    def move(self, job: Job, event: str) -> str:
        """Apply ``event`` to ``job``; its new state. Raises KeyError for a move the
        table does not allow (a bug in the caller)."""
        new = TRANSITIONS[(job.state, event)]
        destination = job.destination
        if new == STARTED:
            self._unqueue(job)
            self.started[destination] = job
        elif new == QUEUED:
            del self.started[destination]
            self.queued.setdefault(destination, deque()).appendleft(job)
        else:
            if self.started.get(destination) is job:
                del self.started[destination]
            self._forget(job)
        job.state = new
        return new

    def drop(self, job: Job) -> None:
        """Forget a queued job (its write failed, or its destination was deleted)."""
        self._unqueue(job)
        self._forget(job)

    def take_committed(self, destination: Destination) -> list[Job]:
        """Remove and return the destination's committed queued jobs, in order (they
        move to the broker holding its session); uncommitted ones stay."""
        jobs = self.queued.get(destination)
        if not jobs:
            return []
        taken = [job for job in jobs if job.committed]
        for job in taken:
            self.drop(job)
        return taken

    def drop_queued(self, destination: Destination) -> int:
        jobs = self.queued.pop(destination, ())
        for job in jobs:
            self._forget(job)
        self.recheck_at.pop(destination, None)
        return len(jobs)

    def next_deadline(self) -> float | None:
        return min(self.recheck_at.values()) if self.recheck_at else None

    def due(self, now: float) -> list[Destination]:
        found = [d for d, at in self.recheck_at.items() if at <= now]
        for destination in found:
            del self.recheck_at[destination]
        return found

    def _forget(self, job: Job) -> None:
        self.by_id.pop(job.id, None)
        if self.by_request.get(job.request) is job:
            del self.by_request[job.request]

    def _unqueue(self, job: Job) -> None:
        jobs = self.queued.get(job.destination)
        if jobs is not None and job in jobs:
            jobs.remove(job)
            if not jobs:
                del self.queued[job.destination]
