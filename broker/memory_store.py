"""The in-memory store: the reference semantics of :class:`broker.core.kernel.records.Store`.

Plain dicts, one per table, for core tests and as the definition the SQLite store is
tested against (``tests/unit/test_store_contract.py`` feeds both the same records and
compares the snapshots). The retention rules both stores apply at :meth:`load` are
defined here, once.

Semantics (the SQLite store keeps the same ones):

* ``apply`` is all-or-nothing: the batch is applied in order to copies of the tables,
  which replace the live ones only when every record went in;
* ``IdentitySaved`` upserts by session id; ``LeaseRenewed`` upserts by broker id but
  keeps the first ``started_at``, ``pid`` and ``endpoint``, and deletes every other
  broker's row on the same endpoint; ``LeaseReleased`` deletes;
* ``SessionClaimed`` takes an id unless another broker with a live lease (not among
  the claim's ``gone``) holds it, or it carries a ``token_hash`` the id's identity
  row does not have (or there is no row), and is returned refused then; ``SessionReleased``
  deletes a claim of that broker; a lease renewal forgets the claims of brokers
  without a row;
* ``RunSaved`` upserts by run id (a run keeps its place in load order);
  ``RunEnded`` deletes the run, its sticky entries and their deliveries;
* ``StickySaved`` inserts, and a seq already stored fails the batch; an entry whose
  request (sender id, message id) is stored already, by any broker, is not written
  and is returned as a ``StickyKept`` holding the stored entry;
  ``StickyAnswered`` sets the entry's answered-to list (no entry: nothing happens);
  ``StickyDelivery`` upserts by (seq, stage, transcript) and keeps its place;
  ``StickyDropped`` deletes one entry and its deliveries;
* payloads (run records, attachments, answered-to lists) are kept as a msgpack round
  trip of what was given: a value the SQLite store could not encode fails here too,
  and a caller changing its dict afterwards changes nothing stored;
* ``ConversationSaved`` upserts by (agent, channel) and keeps its place;
  ``ConversationDeleted`` deletes the conversation, its recovery row and its queued
  (not started) invocations;
* ``InvocationSaved`` inserts (an id already stored fails the batch);
  ``InvocationState`` sets a job's state (no job: nothing happens), except that a
  move to ``started`` of a job not queued (or unknown) is refused; ``load`` returns
  the unfinished jobs (queued, started) by first save, and forgets finished ones
  older than :data:`FINISHED_KEEP_S`;
* ``RecoverySaved`` upserts by (agent, channel) (drafts are a payload);
  ``RecoveryDeleted`` deletes;
* ``load`` forgets identities older than :data:`IDENTITY_KEEP_S` and returns the
  newest ``identity_limit`` of the rest, and those of the ids its runs, entries and
  conversations name (:func:`named_ids`: a run's host is never lost to the bound);
  every list is oldest first (identities by time, runs and deliveries by first save,
  entries by seq).
"""

from __future__ import annotations

import dataclasses
import functools
import secrets
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import msgpack

from broker.core.kernel.records import (ConversationDeleted, ConversationSaved, IdentitySaved,
                           InvocationSaved, InvocationState, LeaseReleased, LeaseRenewed, Record,
                           RecoveryDeleted, RecoverySaved, RunEnded, RunSaved, SessionClaimed,
                           SessionReleased, Snapshot, StickyAnswered, StickyDelivery, StickyDropped,
                           StickyKept, StickyRow, StickySaved)

IDENTITY_KEEP_S = 30 * 24 * 3600   # who held an id is remembered for 30 days
IDENTITY_LIMIT = 200_000           # newest identities restored at start, at most
FINISHED_KEEP_S = 7 * 24 * 3600    # a done or failed invoke job is kept a week
UNFINISHED = ("queued", "started")


def copy_payload(value: Any) -> Any:
    """``value`` as a store gives it back: through msgpack, as the SQLite blobs go.

    Raises TypeError for a value msgpack cannot encode."""
    return msgpack.unpackb(msgpack.packb(value, use_bin_type=True), raw=False)


@dataclass(slots=True)
class _Tables:
    identities: dict[str, IdentitySaved] = field(default_factory=dict)
    leases: dict[str, LeaseRenewed] = field(default_factory=dict)
    claims: dict[str, str] = field(default_factory=dict)     # session id -> broker id
    runs: dict[str, RunSaved] = field(default_factory=dict)
    sticky: dict[int, StickySaved] = field(default_factory=dict)
    requests: dict[tuple[str, str], int] = field(default_factory=dict)   # (sender, message id) -> seq
    answered: dict[int, list[str]] = field(default_factory=dict)
    deliveries: dict[tuple[int, str, str], StickyDelivery] = field(default_factory=dict)
    conversations: dict[tuple[str, str], ConversationSaved] = field(default_factory=dict)
    invocations: dict[str, tuple[InvocationSaved, float]] = field(default_factory=dict)
    started_by: dict[str, str] = field(default_factory=dict)    # job id -> broker
    recoveries: dict[tuple[str, str], RecoverySaved] = field(default_factory=dict)

    def copy(self) -> _Tables:
        # Shallow is enough: every value is a frozen record or a list no one else holds.
        return _Tables(*(dict(getattr(self, f.name)) for f in dataclasses.fields(self)))

    def forget_entry(self, seq: int) -> None:
        """Delete an entry and its deliveries (deliveries may exist without the entry)."""
        saved = self.sticky.pop(seq, None)
        if saved is not None:
            self.requests.pop((saved.sender_id, saved.message_id), None)
        self.answered.pop(seq, None)
        for key in [key for key in self.deliveries if key[0] == seq]:
            del self.deliveries[key]


def named_ids(runs: Sequence[RunSaved], sticky: Sequence[StickyRow],
              conversations: Sequence[ConversationSaved]) -> list[str]:
    """The session ids a snapshot's runs (hosts, subagents), entries (senders) and
    conversations name: their identities are loaded whatever their age."""
    named: set[str] = set()
    for run in runs:
        record = run.record if isinstance(run.record, dict) else {}
        if isinstance(record.get("host"), str):
            named.add(record["host"])
        named.update(s["id"] for s in record.get("subagents") or ()
                     if isinstance(s, dict) and isinstance(s.get("id"), str))
    named.update(row.entry.sender_id for row in sticky)
    named.update(c.session_id for c in conversations if c.session_id)
    return sorted(named)


def _identity(tables: _Tables, record: IdentitySaved) -> None:
    tables.identities[record.session_id] = record


def _lease(tables: _Tables, record: LeaseRenewed) -> None:
    for other in [b for b, lease in tables.leases.items()
                  if lease.endpoint == record.endpoint and b != record.broker_id]:
        del tables.leases[other]
    held = tables.leases.get(record.broker_id)
    # Claims of brokers without a row are nobody's: they go with each renewal.
    live = set(tables.leases) | {record.broker_id}
    for session_id in [s for s, b in tables.claims.items() if b not in live]:
        del tables.claims[session_id]
    tables.leases[record.broker_id] = record if held is None else dataclasses.replace(held, until=record.until)


def _release(tables: _Tables, record: LeaseReleased) -> None:
    tables.leases.pop(record.broker_id, None)


def _claim(tables: _Tables, record: SessionClaimed) -> bool:
    if record.token_hash is not None:
        known = tables.identities.get(record.session_id)
        if known is None or known.token_hash != record.token_hash:
            return False
    holder = tables.claims.get(record.session_id)
    lease = tables.leases.get(holder) if holder is not None else None
    if holder is not None and holder != record.broker_id and lease is not None \
            and lease.until > record.at and holder not in record.gone:
        return False
    tables.claims[record.session_id] = record.broker_id
    return True


def _unclaim(tables: _Tables, record: SessionReleased) -> None:
    if tables.claims.get(record.session_id) == record.broker_id:
        del tables.claims[record.session_id]


def _run(tables: _Tables, record: RunSaved) -> None:
    held = tables.runs.get(record.run_id)
    if held is not None and held.owner not in (record.owner, ""):
        return           # another broker adopted it: its copy is the run
    tables.runs[record.run_id] = RunSaved(record.run_id, copy_payload(record.record), record.owner)


def _run_end(tables: _Tables, record: RunEnded) -> None:
    for seq in [seq for seq, entry in tables.sticky.items() if entry.run_id == record.run_id]:
        tables.forget_entry(seq)
    tables.runs.pop(record.run_id, None)


def _sticky(tables: _Tables, record: StickySaved) -> StickyKept | None:
    if record.seq in tables.sticky:
        raise ValueError(f"sticky entry {record.seq} is already stored")
    request = (record.sender_id, record.message_id)
    held = tables.requests.get(request)
    if held is not None:
        return StickyKept(record, _row(tables, held))
    tables.sticky[record.seq] = dataclasses.replace(record, attachments=copy_payload(record.attachments))
    tables.requests[request] = record.seq
    return None


def _row(tables: _Tables, seq: int) -> StickyRow:
    """The entry ``seq`` as read back."""
    saved = tables.sticky[seq]
    return StickyRow(dataclasses.replace(saved, attachments=copy_payload(saved.attachments)),
                     list(tables.answered.get(seq, [])))


def _answered(tables: _Tables, record: StickyAnswered) -> None:
    delivered_to = copy_payload(record.delivered_to)   # encoded even when no entry, as in SQL
    if record.seq in tables.sticky:
        tables.answered[record.seq] = delivered_to


def _delivery(tables: _Tables, record: StickyDelivery) -> None:
    tables.deliveries[(record.seq, record.stage, record.transcript)] = record


def _drop(tables: _Tables, record: StickyDropped) -> None:
    tables.forget_entry(record.seq)


def _conversation(tables: _Tables, record: ConversationSaved) -> None:
    tables.conversations[(record.agent, record.channel)] = record


def _conversation_deleted(tables: _Tables, record: ConversationDeleted) -> None:
    key = (record.agent, record.channel)
    tables.conversations.pop(key, None)
    tables.recoveries.pop(key, None)
    for job_id in [i for i, (job, _) in tables.invocations.items()
                   if (job.agent, job.channel) == key and job.state == "queued"]:
        del tables.invocations[job_id]


def _invocation(tables: _Tables, record: InvocationSaved) -> None:
    if record.id in tables.invocations:
        raise ValueError(f"invocation {record.id} is already stored")
    tables.invocations[record.id] = (record, record.created_at)


def _invocation_state(tables: _Tables, record: InvocationState) -> bool | None:
    held = tables.invocations.get(record.id)
    if record.state == "started" and (held is None or held[0].state != "queued"):
        return False                      # refused: not queued (any more)
    if held is not None:
        tables.invocations[record.id] = (dataclasses.replace(held[0], state=record.state), record.at)
        if record.state == "started":
            tables.started_by[record.id] = record.broker_id


def _recovery(tables: _Tables, record: RecoverySaved) -> None:
    tables.recoveries[(record.agent, record.channel)] = dataclasses.replace(
        record, drafts=copy_payload(record.drafts))


def _recovery_deleted(tables: _Tables, record: RecoveryDeleted) -> None:
    tables.recoveries.pop((record.agent, record.channel), None)


_WRITERS: dict[type, Callable[[_Tables, Any], None]] = {
    IdentitySaved: _identity,
    LeaseRenewed: _lease,
    LeaseReleased: _release,
    SessionClaimed: _claim,
    SessionReleased: _unclaim,
    RunSaved: _run,
    RunEnded: _run_end,
    StickySaved: _sticky,
    StickyAnswered: _answered,
    StickyDelivery: _delivery,
    StickyDropped: _drop,
    ConversationSaved: _conversation,
    ConversationDeleted: _conversation_deleted,
    InvocationSaved: _invocation,
    InvocationState: _invocation_state,
    RecoverySaved: _recovery,
    RecoveryDeleted: _recovery_deleted,
}


def apply_each(records: Sequence[Record], writers: dict[type, Callable]) -> list:
    """Write ``records`` in order with ``writers``; the records not written (see
    :meth:`broker.core.kernel.records.Store.apply`). A writer returns False for a refused
    claim, the :class:`StickyKept` that stands for its record, or anything else (None,
    True) when it wrote."""
    refused = []
    for record in records:
        outcome = writer_for(record, writers)(record)
        if outcome is False:
            refused.append(record)
        elif outcome.__class__ is StickyKept:
            refused.append(outcome)
    return refused


def writer_for(record: Record, writers: dict[type, Callable]) -> Callable:
    """The writer for ``record``'s type. Raises TypeError for anything not a record."""
    try:
        return writers[type(record)]
    except KeyError:
        raise TypeError(f"not a store record: {type(record).__name__}") from None


class MemoryStore:
    """Every table in dicts; see the module docstring for the semantics."""

    def __init__(self, *, identity_limit: int = IDENTITY_LIMIT,
                 clock: Callable[[], float] = time.time) -> None:
        """``clock``: the wall clock retention and leases are judged by at ``load``
        (a core test passes its fake one, the clock its records were written with)."""
        self.identity_limit = identity_limit
        self._clock = clock
        self._tables = _Tables()
        self._closed = False
        self._grant_key = secrets.token_bytes(32)

    def apply(self, records: Sequence[Record]) -> list[Record]:
        """Apply ``records`` in order, all or none; returns the records not written
        (refused claims and job starts, entries kept already). Raises TypeError for a
        value that is not a record or not encodable, ValueError for a sticky seq
        already stored."""
        self._check_open()
        staged = self._tables.copy()
        writers = {cls: functools.partial(write, staged) for cls, write in _WRITERS.items()}
        refused = apply_each(records, writers)
        self._tables = staged
        return refused

    def claims(self) -> dict[str, str]:
        """Who holds each claimed id (for tests)."""
        return dict(self._tables.claims)

    def load(self, owner: str | None = None, gone: Sequence[str] = ()) -> Snapshot:
        self._check_open()
        tables = self._tables
        cutoff = self._clock() - IDENTITY_KEEP_S
        for sid in [sid for sid, ident in tables.identities.items() if ident.at < cutoff]:
            del tables.identities[sid]
        identities = sorted(tables.identities.values(), key=lambda i: (i.at, i.session_id))
        finished_cutoff = self._clock() - FINISHED_KEEP_S
        for job_id in [i for i, (job, at) in tables.invocations.items()
                       if job.state not in UNFINISHED and at < finished_cutoff]:
            del tables.invocations[job_id]
        owners: dict[str, str] = {}
        live_others = {lease.broker_id for lease in tables.leases.values()
                       if lease.until > self._clock() and lease.broker_id not in gone
                       and lease.broker_id != owner}
        if owner is None:
            run_ids = set(tables.runs) | {e.run_id for e in tables.sticky.values()}
        else:
            live = {lease.broker_id for lease in tables.leases.values()
                    if lease.until > self._clock() and lease.broker_id not in gone}
            run_ids = set()
            for run in list(tables.runs.values()):
                if run.owner == owner or run.owner not in live:
                    tables.runs[run.run_id] = dataclasses.replace(run, owner=owner)
                    run_ids.add(run.run_id)
                else:
                    owners[run.run_id] = run.owner
        runs, sticky, deliveries = self._runs(run_ids, everything=owner is None)
        conversations = list(tables.conversations.values())
        named = set(named_ids(runs, sticky, conversations))
        newest = len(identities) - max(self.identity_limit, 0)   # the index of the first
        return Snapshot(
            identities=[i for n, i in enumerate(identities) if n >= newest or i.session_id in named],
            runs=runs, sticky=sticky, deliveries=deliveries, owners=owners,
            conversations=conversations,
            invocations=[job for job, _ in tables.invocations.values() if job.state in UNFINISHED
                         and not (owner is not None and job.state == "started"
                                  and tables.started_by.get(job.id) in live_others)],
            recoveries=[dataclasses.replace(r, drafts=copy_payload(r.drafts))
                        for r in tables.recoveries.values()],
            grant_key=self._grant_key)

    def adopt_runs(self, dead: str, owner: str) -> Snapshot:
        self._check_open()
        tables = self._tables
        run_ids = {run.run_id for run in tables.runs.values() if run.owner == dead}
        for run_id in run_ids:
            tables.runs[run_id] = dataclasses.replace(tables.runs[run_id], owner=owner)
        runs, sticky, deliveries = self._runs(run_ids)
        return Snapshot(runs=runs, sticky=sticky, deliveries=deliveries)

    def _runs(self, run_ids: set[str], everything: bool = False) -> tuple[list, list, list]:
        """Copies of the runs ``run_ids``, their sticky entries and delivery states
        (``everything``: every delivery state, even one whose entry is gone)."""
        tables = self._tables
        runs = [RunSaved(r.run_id, copy_payload(r.record), r.owner)
                for r in tables.runs.values() if r.run_id in run_ids]
        sticky = [_row(tables, seq) for seq, e in sorted(tables.sticky.items())
                  if e.run_id in run_ids]
        seqs = {row.entry.seq for row in sticky}
        deliveries = [d for d in tables.deliveries.values() if everything or d.seq in seqs]
        return runs, sticky, deliveries

    def queued_jobs(self, agent: str, channel: str) -> list[InvocationSaved]:
        self._check_open()
        return [job for job, _ in self._tables.invocations.values()
                if (job.agent, job.channel) == (agent, channel) and job.state == "queued"]

    def live_brokers(self, now: float, exclude: str | None = None) -> int:
        self._check_open()
        return sum(1 for lease in self._tables.leases.values()
                   if lease.until > now and lease.broker_id != exclude)

    def brokers(self, now: float, exclude: str | None = None) -> list[LeaseRenewed]:
        self._check_open()
        return sorted((lease for lease in self._tables.leases.values()
                       if lease.until > now and lease.broker_id != exclude),
                      key=lambda lease: (lease.started_at, lease.broker_id))

    def close(self) -> None:
        self._closed = True

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("the store is closed")
