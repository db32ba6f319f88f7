"""The in-memory store: the reference semantics of :class:`broker.store.Store`.

Plain dicts, one per table, for core tests and as the definition the database stores
are tested against (``tests/unit/test_store_contract.py`` feeds each the same records
and compares the snapshots; the retention windows are in :mod:`broker.store`).

Semantics (every store keeps the same ones):

* ``apply`` is all-or-nothing: the batch is applied in order to copies of the tables,
  which replace the live ones only when every record went in;
* ``IdentitySaved`` upserts by session id; ``LeaseRenewed`` upserts by broker id but
  keeps the first ``started_at``, ``pid`` and ``endpoint``, and deletes every other
  broker's row on the same endpoint; ``LeaseReleased`` deletes;
* ``SessionClaimed`` takes an id unless another broker with a live lease (not among
  the claim's ``gone``) holds it, or it carries a ``token_hash`` the id's identity
  row does not have (or there is no row), or its ``attempt`` is older than the one of
  the same ``instance`` that took the id, and is returned refused then (a newer attempt
  of that instance takes it from a live holder); ``SessionReleased``
  deletes a claim of that broker; a lease renewal forgets the claims of brokers
  without a row;
* every write for a run (``RunSaved``, ``RunEnded`` and the ``Sticky*`` records) with
  an ``epoch`` other than 0 is *fenced*: it applies only while the stored run has the
  record's ``owner`` and ``epoch`` (:meth:`MemoryTables.fence_holds`); a run adopted
  or taken at start gets the next epoch, so a deposed owner writes nothing to it;
* ``RunSaved`` upserts by run id (a run keeps its place in load order), and is
  returned refused when another broker owns the stored run, or it is fenced out;
  ``RunEnded`` deletes the run, its sticky entries and their deliveries;
* ``StickySaved`` inserts, and a seq already stored fails the batch; an entry whose
  request (sender id, message id) is stored already, by any broker, is not written
  and is returned as a ``StickyKept`` holding the stored entry; one fenced out is
  returned refused;
* leases are judged by the store's clock: a ``LeaseRenewed`` with ``lease_s`` ends
  that long after it, and ``adopt_runs`` takes only the runs of a broker whose lease
  has ended by it (or a broker's own);
  ``StickyAnswered`` sets the entry's answered-to list (no entry: nothing happens);
  ``StickyDelivery`` upserts by (seq, stage, transcript) and keeps its place;
  ``StickyDropped`` deletes one entry and its deliveries;
* payloads (run records, attachments, answered-to lists) are kept as a msgpack round
  trip of what was given: a value a database store could not encode fails here too,
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
import secrets
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import msgpack

from broker.core.kernel.records import (ConversationDeleted, ConversationSaved, IdentitySaved,
                                        InvocationSaved, InvocationState, LeaseReleased,
                                        LeaseRenewed, Record, RecoveryDeleted, RecoverySaved,
                                        RunEnded, RunSaved, SessionClaimed, SessionReleased,
                                        Snapshot, StickyAnswered, StickyDelivery, StickyDropped,
                                        StickyKept, StickyRow, StickySaved, ClaimStale)
from broker.store import (FINISHED_KEEP_S, IDENTITY_KEEP_S, IDENTITY_LIMIT, UNFINISHED,
                          apply_each, named_ids, writers_of)


def copy_payload(value: Any) -> Any:
    """``value`` as a store gives it back: through msgpack, as the SQLite blobs go.

    Raises TypeError for a value msgpack cannot encode."""
    return msgpack.unpackb(msgpack.packb(value, use_bin_type=True), raw=False)


@dataclass(slots=True)
class MemoryTables:
    identities: dict[str, IdentitySaved] = field(default_factory=dict)
    leases: dict[str, LeaseRenewed] = field(default_factory=dict)
    claims: dict[str, str] = field(default_factory=dict)     # session id -> broker id
    claim_attempts: dict[str, tuple[str, int]] = field(default_factory=dict)  # -> (instance, attempt)
    runs: dict[str, RunSaved] = field(default_factory=dict)
    sticky: dict[int, StickySaved] = field(default_factory=dict)
    requests: dict[tuple[str, str], int] = field(default_factory=dict)   # (sender, message id) -> seq
    answered: dict[int, list[str]] = field(default_factory=dict)
    deliveries: dict[tuple[int, str, str], StickyDelivery] = field(default_factory=dict)
    conversations: dict[tuple[str, str], ConversationSaved] = field(default_factory=dict)
    invocations: dict[str, tuple[InvocationSaved, float]] = field(default_factory=dict)
    started_by: dict[str, str] = field(default_factory=dict)    # job id -> broker
    recoveries: dict[tuple[str, str], RecoverySaved] = field(default_factory=dict)
    clock: Callable[[], float] = time.time      # the store's clock (leases)

    def copy(self) -> MemoryTables:
        # Shallow is enough: every value is a frozen record or a list no one else holds.
        return MemoryTables(*(dict(getattr(self, f.name)) for f in dataclasses.fields(self)
                              if f.name != "clock"), clock=self.clock)

    def fence_holds(self, record: Any) -> bool:
        """Whether a write for a run may apply: unfenced (epoch 0), or the stored run is
        still the writer's at the writer's epoch."""
        if record.epoch == 0:
            return True
        run = self.runs.get(record.run_id)
        return run is not None and run.owner == record.owner and run.epoch == record.epoch

    def forget_entry(self, seq: int) -> None:
        """Delete an entry and its deliveries (deliveries may exist without the entry)."""
        saved = self.sticky.pop(seq, None)
        if saved is not None:
            self.requests.pop((saved.sender_id, saved.message_id), None)
        self.answered.pop(seq, None)
        for key in [key for key in self.deliveries if key[0] == seq]:
            del self.deliveries[key]

    # -- writers, one per record type (broker.store.RECORD_HANDLERS) -------------------

    def save_identity(self, record: IdentitySaved) -> None:
        self.identities[record.session_id] = record

    def renew_lease(self, record: LeaseRenewed) -> None:
        for other in [b for b, lease in self.leases.items()
                      if lease.endpoint == record.endpoint and b != record.broker_id]:
            del self.leases[other]
        held = self.leases.get(record.broker_id)
        # Claims of brokers without a row are nobody's: they go with each renewal.
        live = set(self.leases) | {record.broker_id}
        for session_id in [s for s, b in self.claims.items() if b not in live]:
            del self.claims[session_id]
            self.claim_attempts.pop(session_id, None)
        until = self.clock() + record.lease_s if record.lease_s > 0 else record.until
        self.leases[record.broker_id] = dataclasses.replace(record, until=until) if held is None \
            else dataclasses.replace(held, until=until)

    def release_lease(self, record: LeaseReleased) -> None:
        self.leases.pop(record.broker_id, None)

    def claim_session(self, record: SessionClaimed) -> bool | ClaimStale:
        if record.token_hash is not None:
            known = self.identities.get(record.session_id)
            if known is None or known.token_hash != record.token_hash:
                return False
        holder = self.claims.get(record.session_id)
        instance, held = self.claim_attempts.get(record.session_id, ("", 0))
        same = holder is not None and record.instance != "" and record.instance == instance
        if same and 0 < record.attempt < held:
            return ClaimStale(record)                      # a stale hello
        lease = self.leases.get(holder) if holder is not None else None
        if holder is not None and holder != record.broker_id and lease is not None \
                and lease.until > record.at and holder not in record.gone \
                and not (same and 0 < held < record.attempt):
            return False
        self.claims[record.session_id] = record.broker_id
        self.claim_attempts[record.session_id] = \
            (record.instance, max(held, record.attempt) if same else record.attempt)
        return True

    def release_session(self, record: SessionReleased) -> None:
        if self.claims.get(record.session_id) == record.broker_id:
            del self.claims[record.session_id]
            self.claim_attempts.pop(record.session_id, None)

    def save_run(self, record: RunSaved) -> bool | None:
        held = self.runs.get(record.run_id)
        if held is not None and held.owner != "" and (
                held.owner != record.owner or record.epoch and held.epoch != record.epoch):
            return False     # refused: another broker owns it (adopted it): its copy is the run
        self.runs[record.run_id] = RunSaved(record.run_id, copy_payload(record.record),
                                            record.owner, record.epoch)
        return None

    def end_run(self, record: RunEnded) -> None:
        if not self.fence_holds(record):
            return
        for seq in [seq for seq, entry in self.sticky.items() if entry.run_id == record.run_id]:
            self.forget_entry(seq)
        self.runs.pop(record.run_id, None)

    def save_sticky(self, record: StickySaved) -> StickyKept | bool | None:
        if record.seq in self.sticky:
            raise ValueError(f"sticky entry {record.seq} is already stored")
        request = (record.sender_id, record.message_id)
        held = self.requests.get(request)
        if held is not None:
            return StickyKept(record, self.row(held))
        if not self.fence_holds(record):
            return False
        self.sticky[record.seq] = dataclasses.replace(record, attachments=copy_payload(record.attachments))
        self.requests[request] = record.seq
        return None

    def row(self, seq: int) -> StickyRow:
        """The entry ``seq`` as read back."""
        saved = self.sticky[seq]
        return StickyRow(dataclasses.replace(saved, attachments=copy_payload(saved.attachments)),
                         list(self.answered.get(seq, [])))

    def answer_sticky(self, record: StickyAnswered) -> None:
        delivered_to = copy_payload(record.delivered_to)   # encoded even when no entry, as in SQL
        if record.seq in self.sticky and self.fence_holds(record):
            self.answered[record.seq] = delivered_to

    def record_delivery(self, record: StickyDelivery) -> None:
        if not self.fence_holds(record):
            return
        self.deliveries[(record.seq, record.stage, record.transcript)] = record

    def drop_sticky(self, record: StickyDropped) -> None:
        if self.fence_holds(record):
            self.forget_entry(record.seq)

    def save_conversation(self, record: ConversationSaved) -> None:
        self.conversations[(record.agent, record.channel)] = record

    def delete_conversation(self, record: ConversationDeleted) -> None:
        key = (record.agent, record.channel)
        self.conversations.pop(key, None)
        self.recoveries.pop(key, None)
        for job_id in [i for i, (job, _) in self.invocations.items()
                       if (job.agent, job.channel) == key and job.state == "queued"]:
            del self.invocations[job_id]

    def save_invocation(self, record: InvocationSaved) -> None:
        if record.id in self.invocations:
            raise ValueError(f"invocation {record.id} is already stored")
        self.invocations[record.id] = (record, record.created_at)

    def set_invocation_state(self, record: InvocationState) -> bool | None:
        held = self.invocations.get(record.id)
        if record.state == "started" and (held is None or held[0].state != "queued"):
            return False                      # refused: not queued (any more)
        if held is not None:
            self.invocations[record.id] = (dataclasses.replace(held[0], state=record.state), record.at)
            if record.state == "started":
                self.started_by[record.id] = record.broker_id

    def save_recovery(self, record: RecoverySaved) -> None:
        self.recoveries[(record.agent, record.channel)] = dataclasses.replace(
            record, drafts=copy_payload(record.drafts))

    def delete_recovery(self, record: RecoveryDeleted) -> None:
        self.recoveries.pop((record.agent, record.channel), None)


class MemoryStore:
    """Every table in dicts; see the module docstring for the semantics."""

    def __init__(self, *, identity_limit: int = IDENTITY_LIMIT,
                 clock: Callable[[], float] = time.time) -> None:
        """``clock``: the wall clock retention and leases are judged by at ``load``
        (a core test passes its fake one, the clock its records were written with)."""
        self.identity_limit = identity_limit
        self._clock = clock
        self._tables = MemoryTables(clock=clock)
        self._closed = False
        self._grant_key = secrets.token_bytes(32)

    def apply(self, records: Sequence[Record]) -> list[Record]:
        """Apply ``records`` in order, all or none; returns the records not written
        (refused claims and job starts, entries kept already). Raises TypeError for a
        value that is not a record or not encodable, ValueError for a sticky seq
        already stored."""
        self._check_open()
        staged = self._tables.copy()
        refused = apply_each(records, writers_of(staged))
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
                    tables.runs[run.run_id] = dataclasses.replace(run, owner=owner,
                                                                  epoch=run.epoch + 1)
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
        lease = tables.leases.get(dead)
        if dead != owner and lease is not None and lease.until > self._clock():
            return Snapshot()        # its lease is live: it owns its runs still
        run_ids = {run.run_id for run in tables.runs.values() if run.owner == dead}
        for run_id in run_ids:
            run = tables.runs[run_id]
            tables.runs[run_id] = dataclasses.replace(run, owner=owner, epoch=run.epoch + 1)
        runs, sticky, deliveries = self._runs(run_ids)
        return Snapshot(runs=runs, sticky=sticky, deliveries=deliveries)

    def _runs(self, run_ids: set[str], everything: bool = False) -> tuple[list, list, list]:
        """Copies of the runs ``run_ids``, their sticky entries and delivery states
        (``everything``: every delivery state, even one whose entry is gone)."""
        tables = self._tables
        runs = [RunSaved(r.run_id, copy_payload(r.record), r.owner, r.epoch)
                for r in tables.runs.values() if r.run_id in run_ids]
        sticky = [tables.row(seq) for seq, e in sorted(tables.sticky.items())
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

    def failure_code(self, exc: BaseException) -> str:
        return "internal_error"       # nothing here is ever unavailable: a failure is a bug

    def close(self) -> None:
        self._closed = True

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("the store is closed")
