"""The persistence worker: a thread that owns the store, and the shell's handle on it.

The API the IO shell uses (every call from the shell's own thread)::

    worker = PersistenceWorker(ctx, store, broker_id)
    worker.start(); worker.ready.wait()
    worker.submit([(ticket_or_None, record), ...])      # one batch per loop round
    # poll worker.socket for POLLIN while worker.owes > 0, then:
    for report in worker.reports():                     # never blocks; WorkerReport
        report.done, report.failed                      # tickets
        report.error                                    # str | None
        report.code                                     # failed tickets' error code | None
        report.retained, report.lost                    # unwaited records kept / dropped
        report.refused                                  # (ticket, code) of records refused
        report.fenced                                   # runs whose writes were fenced out
        report.dropped                                  # refused records nobody waited for
        report.kept                                     # (ticket, StickyRow): entries whose
                                                        # request was stored already
        report.brokers                                  # live lease rows | None
        report.jobs                                     # queued jobs read for ReadJobs
    worker.submit([(None, READ_BROKERS)])               # ask for the rows alone
    worker.submit([(None, AdoptRuns(dead_broker_id))])  # take a dead broker's runs
    for dead, snapshot in worker.adopted(): ...         # Snapshot, or None if it failed
    worker.stop(release=LeaseReleased(broker_id))       # safe to call twice

Theory of operation. ``submit`` appends the batch to an inbox deque and sends a 1-byte
wake frame over an inproc PAIR; the records cross threads by reference, never
encoded, so the shell's cost per round is one append and one send. The worker drains
every batch waiting in the inbox, applies them all with one ``store.apply`` (group
commit: one transaction, one fsync), and answers with one :class:`WorkerReport`
naming the tickets now durable, which crosses back the same way: by reference through a
deque, with a 1-byte frame over the PAIR to wake the shell. After a batch holding a
``LeaseRenewed`` or :data:`READ_BROKERS` (a marker, not a record) the report also
lists the other brokers whose lease is live (their ``LeaseRenewed`` rows: endpoint,
lease end, CURVE key): how the shell finds the brokers to link to, and whose CURVE
keys to allow; after a batch holding :class:`~broker.core.kernel.commands.ReadJobs`
(a read, not a record) it lists those conversations' queued jobs (``jobs``, their
``InvocationSaved`` records). A failed transaction reports the same tickets
failed, with the error text and the error code their waiters get (see
:meth:`broker.store.Store.failure_code`), and the worker keeps serving: nothing waits forever
and nothing is claimed kept that was not.

While the store is unavailable (a lock held by another process, a full disk, a database
server gone), the records nobody waits for (identities, leases, delivery states) are
retained, not dropped: they are written, in their order and before anything newer, by
the next batch or by a retry every :data:`RETRY_S` seconds, so the broker catches up
by itself once the database is usable again. A retry that fails for a reason of the records
themselves drops them (they would fail every batch after). At most
:data:`RETAIN_LIMIT` records are retained (the oldest go first, counted as lost), and
a lease renewal replaces the renewal retained before it.

An ``AdoptRuns`` item (a command, not a record) asks the store for a dead broker's
runs after the batch's records are written (:meth:`Store.adopt_runs`); the snapshot
it returns crosses back by reference through a deque, like batches do, and is in it
before the report covering its batch is sent.

Threading invariants:

* ``submit``, ``reports``, ``owes``, ``socket`` and ``stop`` belong to the shell's
  thread (zmq sockets are not thread-safe, ``owes`` is a plain int); the worker thread
  touches only the inbox (``deque.popleft``, atomic), the outbox of reports and of
  adoptions (``deque.append``, atomic) and its own end of the PAIR;
* a report is in the outbox before its wake frame is sent, and the shell takes one
  report per frame it reads, so a frame always finds its report and no report is
  taken before its frame (which would leave a stale frame to wake the shell later);
* reports, and the rows and records in them, are built fresh by the worker and never
  touched by it once queued (``WorkerReport`` is frozen; the stores return new rows);
* ``commits``, ``records`` and ``applied`` are written by the worker only, and
  ``submitted`` by the shell only; either side reads them for statistics (plain ints,
  so a read is never torn). ``commit_times`` has a lock of its own;
* from ``start()`` until the thread ends, the worker thread is the only user of the
  store; before ``start()`` the shell may ``load()`` from it;
* records handed to ``submit`` are not changed afterwards (they are frozen, and the
  core builds fresh payload dicts and lists for each);
* a wake frame is sent after its batch is in the inbox, and the worker looks at the
  inbox before each wait, so no batch is left behind (a stale wake finds it empty);
* every batch submitted is covered by exactly one report, and every report covers at
  least one batch; ``owes`` drops by the batches a report covers, so at 0 nothing is
  in flight and the shell can stop polling the socket;
* ``stop`` queues its release behind every batch already submitted, so they are all
  applied first;
* retained records are the worker's alone (``_retained``); a batch whose retained
  records cannot be written fails its tickets at once, without a second wait.
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass

import zmq

from broker.core.kernel.commands import AdoptRuns, ReadJobs
from broker.core.kernel.records import (InvocationSaved, LeaseRenewed, Record, Snapshot,
                                        StickyKept, StickyRow, refusal_codes)
from broker.core.kernel.secret_ids import new_hex_id
from broker.store import UNAVAILABLE, Store
from .commit_times import CommitTimes

_WAKE = b"\x01"
_STOP = None                 # in the inbox: the last item, once stop() is called
_POLLIN = int(zmq.POLLIN)
_EVENTS = int(zmq.EVENTS)
_NOBLOCK = int(zmq.NOBLOCK)

RETRY_S = 1.0                # how often retained records are retried while idle
RETAIN_LIMIT = 50_000        # retained records at most; past it the oldest are lost

Batch = list[tuple[int | None, Record]]
READ_BROKERS = "read-brokers"   # in a batch: report the live brokers' rows (no write)


@dataclass(frozen=True, slots=True)
class WorkerReport:
    """What the worker says about the batches it took together (see the module
    docstring): each ticket among them is in exactly one of ``done``, ``failed``,
    ``refused`` and ``kept``."""

    batches: int                        # how many submitted batches this report covers
    done: Sequence[int]                 # tickets now durable
    failed: Sequence[int]               # tickets whose transaction failed, with ``code``
    error: str | None = None            # what went wrong (a failure, or a read after it)
    code: str | None = None             # the failed tickets' error code
    retained: int = 0                   # unwaited records kept for a retry
    lost: int = 0                       # retained records dropped since the last report
    refused: Sequence[tuple[int, str]] = ()       # (ticket, code): records the store refused
    kept: Sequence[tuple[int, StickyRow]] = ()    # (ticket, entry as stored): sticky
                                                  # entries whose request was kept already
    brokers: list[LeaseRenewed] | None = None     # the other live brokers' lease rows
    jobs: Sequence[InvocationSaved] = ()          # queued jobs read for ``ReadJobs``
    dropped: int = 0                    # refused records without a ticket: not retried
    # Runs whose fenced writes the store refused: another broker owns them now (see
    # broker.core.cluster.ownership.depose); reported before the refused tickets.
    fenced: Sequence[str] = ()


class PersistenceWorker:
    """The worker thread and the shell's end of its socket (see the module docstring)."""

    def __init__(self, ctx: zmq.Context, store: Store, broker_id: str) -> None:
        self.store = store
        self.broker_id = broker_id
        self.ready = threading.Event()     # set once the worker's socket is connected
        self.owes = 0                      # batches submitted, not yet reported on
        self.commits = 0                   # transactions committed (worker's count)
        self.records = 0                   # records in them
        self.commit_times = CommitTimes()  # how long each committed transaction took
        self.submitted = 0                 # items handed over (shell's count)
        self.applied = 0                   # items done with, written or not (worker's count)
        self._ctx = ctx
        self._inbox: collections.deque[Batch | None] = collections.deque()
        self._adopted: collections.deque[tuple[str, Snapshot | None]] = collections.deque()
        self._reports: collections.deque[WorkerReport] = collections.deque()
        self._retained: list[Record] = []  # unwaited records the store could not take yet
        self._lost = 0                     # retained records dropped since the last report
        # A fresh name: several brokers (tests) may share one context.
        self._endpoint = f"inproc://intercom-persistence-{new_hex_id(32)}"
        self.socket: zmq.Socket = ctx.socket(zmq.PAIR)
        self.socket.linger = 0
        self.socket.bind(self._endpoint)
        self._thread = threading.Thread(target=self._run, name="persistence", daemon=True)
        self._stopping = False
        self._closed = False

    # -- the shell's side ----------------------------------------------------------------

    def start(self) -> None:
        self._thread.start()

    def submit(self, items: Batch) -> None:
        """Hand one batch to the worker; its tickets come back in a later report.

        Raises RuntimeError once ``stop`` was called."""
        if self._stopping:
            raise RuntimeError("the persistence worker is stopped")
        self._inbox.append(items)
        self.owes += 1
        self.submitted += len(items)
        self._wake()

    @property
    def pending(self) -> int:
        """Items handed over and not yet done with, and records retained for a retry."""
        return self.submitted - self.applied + len(self._retained)

    def reports(self) -> list[WorkerReport]:
        """Every report whose frame is waiting on the socket, oldest first; [] when
        none (never blocks)."""
        sock = self.socket
        queued = self._reports
        found = []
        # EVENTS first: a raised zmq.Again per call costs more than the read itself.
        while sock.getsockopt(_EVENTS) & _POLLIN:
            sock.recv(_NOBLOCK)
            report = queued.popleft()         # queued before its frame was sent
            self.owes -= report.batches
            found.append(report)
        return found

    def adopted(self) -> list[tuple[str, Snapshot | None]]:
        """Answers to ``AdoptRuns`` items, oldest first: (dead broker id, its runs as
        now owned here, or None when the store failed)."""
        found = []
        while self._adopted:
            found.append(self._adopted.popleft())
        return found

    def stop(self, release: Record | None = None, timeout: float = 10) -> bool:
        """Apply ``release`` (after every batch already submitted), end the thread,
        close the store and this socket. Safe to call twice, and before ``start``.

        True once the store is closed; False when the thread did not finish within
        ``timeout`` seconds (it still owns the store then, and closes it when done)."""
        if self._closed:
            return not self._thread.is_alive()
        self._stopping = True
        if self._thread.is_alive():
            if release is not None:
                self._inbox.append([(None, release)])
            self._inbox.append(_STOP)
            self._wake()
            self._thread.join(timeout)
            done = not self._thread.is_alive()
        else:
            if self._thread.ident is None:
                # Never started: the store is this thread's to use and close.
                if release is not None:
                    self._apply_release(release)
                self.store.close()
            done = True   # a thread that already ended closed the store on its way out
        self.socket.close(linger=0)
        self._closed = True
        return done

    def _wake(self) -> None:
        try:
            self.socket.send(_WAKE, _NOBLOCK)
        except zmq.Again:
            # The pipe is full of wakes the worker has yet to read, or the worker has
            # not connected yet; either way it looks at the inbox before it next waits.
            pass

    def _apply_release(self, release: Record) -> None:
        try:
            self.store.apply([release])
        except Exception:
            pass   # shutting down: the lease simply runs out

    # -- the worker's side ---------------------------------------------------------------

    def _run(self) -> None:
        sock = self._ctx.socket(zmq.PAIR)
        sock.linger = 0
        try:
            sock.connect(self._endpoint)
            self.ready.set()
            self._serve(sock)
        except zmq.ContextTerminated:
            pass   # the shell tore the context down without stop(): just finish
        finally:
            sock.close(linger=0)
            self.store.close()

    def _serve(self, sock: zmq.Socket) -> None:
        while True:
            items, batches, stopping = self._take()
            if batches:
                report = self._commit(items, batches)
                self.applied += len(items)
                self._reports.append(report)
                sock.send(_WAKE)
            if stopping:
                return
            if self._retained and not sock.poll(RETRY_S * 1000, zmq.POLLIN):
                self._write_retained()        # idle while records wait: retry them
                continue
            sock.recv()                       # wait for a wake, then take every other one
            while sock.getsockopt(_EVENTS) & _POLLIN:
                sock.recv(_NOBLOCK)

    def _take(self) -> tuple[Batch, int, bool]:
        """Every batch in the inbox, joined: (items, how many batches, stop seen)."""
        inbox = self._inbox
        items: Batch = []
        batches = 0
        while inbox:
            batch = inbox.popleft()
            if batch is _STOP:
                return items, batches, True
            items.extend(batch)
            batches += 1
        return items, batches, False

    def _commit(self, items: Batch, batches: int) -> WorkerReport:
        tickets = [ticket for ticket, _ in items if ticket is not None]
        adoptions = [item.broker_id for _, item in items if type(item) is AdoptRuns]
        if adoptions:
            items = [(ticket, item) for ticket, item in items if type(item) is not AdoptRuns]
        records = [record for _, record in items
                   if record is not READ_BROKERS and type(record) is not ReadJobs]
        reads = [record for _, record in items if type(record) is ReadJobs]
        wants_brokers = len(records) < len(items) or \
            any(type(record) is LeaseRenewed for record in records)
        error = None if not self._retained else self._write_retained()
        refused: list = []
        if error is None and records:     # a read of the brokers alone writes nothing
            started = time.perf_counter()
            try:
                refused = self.store.apply(records) or []
            except Exception as exc:  # disk full, a lock, corrupt file, a bad record
                error = exc
            else:
                self.commit_times.record(time.perf_counter() - started)
        if error is not None:
            code = self.store.failure_code(error)
            if code == UNAVAILABLE:
                self._retain([record for ticket, record in items
                              if ticket is None and record is not READ_BROKERS
                              and type(record) is not ReadJobs])
            self._adopted.extend((dead, None) for dead in adoptions)   # asked again later
            return self._report(batches, [], tickets, repr(error), code)
        if records:
            self.commits += 1
            self.records += len(records)
        done, refusals, kept_rows, dropped, fenced = tickets, (), (), 0, ()
        if refused:
            fenced = sorted({r.run_id for r in refused
                             if type(r) is not StickyKept and getattr(r, "epoch", 0)})
            # Claims another live broker's session holds (records.SessionClaimed), and
            # entries whose request another write kept first (records.StickyKept), and
            # hand-overs of jobs another broker started (records.InvocationState).
            kept = {id(r.saved): r.kept for r in refused if type(r) is StickyKept}
            codes = refusal_codes(refused)
            ids = set(codes)
            refusals = [(t, codes[id(record)]) for t, record in items
                        if t is not None and id(record) in ids]
            kept_rows = [(t, kept[id(record)]) for t, record in items
                         if t is not None and id(record) in kept]
            settled = {t for t, _ in refusals} | {t for t, _ in kept_rows}
            # Refused records nobody waits for (a run saved again after another broker
            # took it): the store's copy stands, so they are dropped, not retried.
            dropped = sum(1 for t, record in items
                          if t is None and (id(record) in ids or id(record) in kept))
            done = [t for t in tickets if t not in settled]
        read_error = None
        for dead in adoptions:
            try:
                self._adopted.append((dead, self.store.adopt_runs(dead, self.broker_id)))
            except Exception as exc:  # asked again by the core
                self._adopted.append((dead, None))
                read_error = f"adopting the runs of broker {dead}: {exc!r}"
        jobs: Sequence[InvocationSaved] = ()
        if reads:
            try:
                jobs = [job for read in reads
                        for job in self.store.queued_jobs(read.agent, read.channel)]
            except Exception as exc:  # the jobs wait for the conversation's next open
                read_error = f"reading queued jobs: {exc!r}"
        brokers = None
        if wants_brokers:
            try:
                brokers = self.store.brokers(time.time(), exclude=self.broker_id)
            except Exception as exc:  # the batch is durable all the same
                read_error = f"reading live brokers: {exc!r}"
        return self._report(batches, done, [], read_error, None, refusals, kept_rows,
                            brokers, jobs, dropped, fenced)

    def _report(self, batches: int, done: list[int], failed: list[int], error: str | None,
                code: str | None, refused: Sequence = (), kept: Sequence = (),
                brokers: list[LeaseRenewed] | None = None, jobs: Sequence = (),
                dropped: int = 0, fenced: Sequence[str] = ()) -> WorkerReport:
        lost, self._lost = self._lost, 0
        return WorkerReport(batches, done, failed, error, code, len(self._retained), lost,
                            refused, kept, brokers, jobs, dropped, fenced)

    def _write_retained(self) -> Exception | None:
        """Write the retained records in their own transaction.

        None once they are written, or dropped because the store refuses the records
        themselves (counted lost); the exception while the store is still unavailable
        (they stay retained)."""
        retained = self._retained
        try:
            self.store.apply(retained)
        except Exception as exc:
            if self.store.failure_code(exc) == UNAVAILABLE:
                return exc
            self._lost += len(retained)
        else:
            self.commits += 1
            self.records += len(retained)
        self._retained = []
        return None

    def _retain(self, records: list[Record]) -> None:
        """Keep ``records`` for a retry, after those already kept; bounded."""
        if not records:
            return
        retained = self._retained
        retained.extend(records)
        if any(type(r) is LeaseRenewed for r in records):
            # A renewal supersedes those before it (the same row, a later time).
            last = {r.broker_id: r for r in retained if type(r) is LeaseRenewed}
            retained[:] = [r for r in retained if type(r) is not LeaseRenewed
                           or last[r.broker_id] is r]
        if len(retained) > RETAIN_LIMIT:
            excess = len(retained) - RETAIN_LIMIT
            del retained[:excess]
            self._lost += excess
