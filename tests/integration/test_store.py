"""The SQLite store and its persistence worker on a real file and real inproc sockets.

Waiting rule: nothing sleeps; :func:`wait_reports` polls the worker's socket with a
deadline until the worker owes nothing.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import apsw
import pytest
import zmq

from broker.persistence import READ_BROKERS
from broker.core.kernel.records import (LeaseReleased, LeaseRenewed, RunSaved, StickyDelivery,
                                 StickyRow, StickySaved)
from broker import persistence
from broker.persistence import RETRY_S, PersistenceWorker, WorkerReport
from broker.store.sqlite import BUSY_TIMEOUT_MS, SqliteStore

NOW = time.time()
ME = "broker-me"


def entry(seq: int, **fields) -> StickySaved:
    values = dict(seq=seq, run_id="r1", target="workflow:r1/a", sender_id="s-1",
                  sender_name="sender", message_id=f"m{seq}", message="hello", attachments=[],
                  sent_at=NOW, ack=True, position=seq, not_in_known_set=False)
    values.update(fields)
    return StickySaved(**values)


def lease(broker_id: str, until: float) -> LeaseRenewed:
    return LeaseRenewed(broker_id, 4242, f"ipc:///tmp/{broker_id}.sock", NOW, until)


def wait_reports(worker: PersistenceWorker, timeout: float = 10.0) -> list[WorkerReport]:
    """Every report until the worker owes nothing; fails after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    reports: list[WorkerReport] = []
    while worker.owes:
        remaining = deadline - time.monotonic()
        assert remaining > 0, f"the worker still owes {worker.owes} batches after {timeout:g} s"
        if worker.socket.poll(int(remaining * 1000) + 1, zmq.POLLIN):
            reports += worker.reports()
    return reports


@pytest.fixture
def db(tmp_path):
    return tmp_path / "bus.db"


@pytest.fixture
def ctx() -> Iterator[zmq.Context]:
    context = zmq.Context()
    yield context
    context.term()   # every worker is stopped by then (see start_worker)


@pytest.fixture
def start_worker(ctx, db):
    """Start a worker on the test's file; every one is stopped at teardown."""
    workers: list[PersistenceWorker] = []

    def _start(*, before_start: list | None = None, started: bool = True) -> PersistenceWorker:
        worker = PersistenceWorker(ctx, SqliteStore(db), ME)
        workers.append(worker)
        for batch in before_start or []:
            worker.submit(batch)
        if started:
            worker.start()
            assert worker.ready.wait(10), "the worker never connected"
        return worker

    yield _start
    for worker in workers:
        assert worker.stop(timeout=10), "a worker did not stop"


def reopen(db) -> SqliteStore:
    return SqliteStore(db)


# -- the store on a file -----------------------------------------------------------------

def test_a_batch_commits_as_one_and_survives_reopen(db):
    store = SqliteStore(db)
    store.apply([RunSaved("r1", {"runId": "r1", "stages": []}), entry(1),
                 StickyDelivery(1, "a", "t1", "sent", NOW)])
    store.close()
    snapshot = reopen(db).load()
    assert snapshot.runs == [RunSaved("r1", {"runId": "r1", "stages": []})]
    assert snapshot.sticky == [StickyRow(entry(1), [])]
    assert snapshot.deliveries == [StickyDelivery(1, "a", "t1", "sent", NOW)]


def test_a_failing_record_leaves_nothing_of_its_batch_on_disk(db):
    store = SqliteStore(db)
    store.apply([entry(1)])
    with pytest.raises(apsw.ConstraintError):
        store.apply([RunSaved("r2", {"runId": "r2"}), entry(1)])   # seq 1 again
    store.close()
    snapshot = reopen(db).load()
    assert (snapshot.runs, [row.entry.seq for row in snapshot.sticky]) == ([], [1])


def test_the_file_is_opened_in_wal_mode_with_the_synchronous_mode_asked_for(db):
    store = SqliteStore(db, synchronous="NORMAL")
    ((mode,),) = store.conn.execute("PRAGMA journal_mode")
    ((synchronous,),) = store.conn.execute("PRAGMA synchronous")
    store.close()
    assert (mode, synchronous) == ("wal", 1)   # NORMAL is 1


def test_two_stores_on_one_file_see_each_others_leases(db):
    first, second = SqliteStore(db), SqliteStore(db)
    first.apply([lease("one", NOW + 30)])
    second.apply([lease("two", NOW + 30)])
    counts = (first.live_brokers(NOW, exclude="one"), second.live_brokers(NOW, exclude="two"))
    first.close()
    second.close()
    assert counts == (1, 1)


# -- the worker --------------------------------------------------------------------------

def test_the_worker_reports_submitted_tickets_done_and_they_survive_reopen(start_worker, db):
    worker = start_worker()
    worker.submit([(1, RunSaved("r1", {"runId": "r1"})), (None, entry(1)),
                   (2, StickyDelivery(1, "a", "t1", "sent", NOW))])
    reports = wait_reports(worker)
    assert worker.stop()
    assert reports == [WorkerReport(1, done=[1, 2], failed=[])]
    snapshot = reopen(db).load()
    assert (snapshot.runs, snapshot.sticky) == ([RunSaved("r1", {"runId": "r1"})], [StickyRow(entry(1), [])])


def test_batches_waiting_together_are_committed_in_one_transaction(start_worker):
    worker = start_worker(before_start=[[(1, RunSaved("r1", {}))], [(2, RunSaved("r2", {}))],
                                        [(3, RunSaved("r3", {}))]])
    reports = wait_reports(worker)
    assert reports == [WorkerReport(3, done=[1, 2, 3], failed=[])]
    assert (worker.commits, worker.records) == (1, 3)


def test_a_failed_batch_is_reported_failed_with_the_error(start_worker):
    worker = start_worker()
    worker.submit([(1, entry(1))])
    wait_reports(worker)
    worker.submit([(2, RunSaved("r2", {})), (3, entry(1))])   # seq 1 again: the batch fails
    (report,) = wait_reports(worker)
    assert (report.done, report.failed, report.brokers) == ([], [2, 3], None)
    assert "ConstraintError" in report.error and report.code == "internal_error"


def test_the_worker_keeps_serving_after_a_failed_batch(start_worker, db):
    worker = start_worker()
    worker.submit([(1, entry(1)), (2, entry(1))])
    wait_reports(worker)
    worker.submit([(3, RunSaved("r3", {}))])
    assert wait_reports(worker) == [WorkerReport(1, done=[3], failed=[])]
    assert worker.stop()
    snapshot = reopen(db).load()
    assert (snapshot.runs, snapshot.sticky) == ([RunSaved("r3", {})], [])


def test_a_save_of_a_run_another_broker_owns_is_refused_to_its_waiter_and_dropped_unwaited(
        start_worker, db):
    worker = start_worker()
    worker.submit([(1, RunSaved("r1", {"v": 1}, "other"))])
    wait_reports(worker)
    worker.submit([(2, RunSaved("r1", {"v": 2}, "me")), (None, RunSaved("r1", {"v": 3}, "me")),
                   (3, RunSaved("r2", {}, "me"))])
    (report,) = wait_reports(worker)
    assert (report.done, report.refused, report.dropped) == ([3], [(2, "run_moving")], 1)
    worker.submit([(4, RunSaved("r3", {}, "me"))])     # nothing is retried with the next batch
    assert wait_reports(worker) == [WorkerReport(1, done=[4], failed=[])]
    assert worker.stop()
    assert {r.run_id: (r.owner, r.record) for r in reopen(db).load().runs}["r1"] == \
        ("other", {"v": 1})


def test_a_lease_renewal_reports_the_other_brokers_whose_lease_is_live(start_worker, db):
    neighbours = SqliteStore(db)
    neighbours.apply([lease("other", time.time() + 600), lease("expired", NOW - 1)])
    neighbours.close()
    worker = start_worker()
    worker.submit([(None, lease(ME, time.time() + 30))])
    (report,) = wait_reports(worker)
    assert [(row.broker_id, row.endpoint) for row in report.brokers] == \
        [("other", "ipc:///tmp/other.sock")]


def test_a_read_of_the_brokers_writes_nothing_and_reports_their_rows(start_worker, db):
    neighbours = SqliteStore(db)
    neighbours.apply([lease("other", time.time() + 600)])
    neighbours.close()
    worker = start_worker()
    worker.submit([(None, READ_BROKERS)])
    (report,) = wait_reports(worker)
    assert [row.broker_id for row in report.brokers] == ["other"]
    assert worker.records == 0


def test_stop_applies_the_release_after_every_batch_already_submitted(start_worker, db):
    worker = start_worker()
    worker.submit([(None, lease(ME, NOW + 600))])
    worker.submit([(1, RunSaved("r1", {}))])
    assert worker.stop(release=LeaseReleased(ME))
    store = reopen(db)
    assert (store.load().runs, store.live_brokers(NOW)) == ([RunSaved("r1", {})], 0)
    store.close()


def test_stop_is_safe_to_call_twice(start_worker):
    worker = start_worker()
    assert worker.stop()
    assert worker.stop()


def test_stop_before_start_applies_the_release_and_closes_the_store(start_worker, db):
    seed = SqliteStore(db)
    seed.apply([lease(ME, NOW + 600)])
    seed.close()
    worker = start_worker(started=False)
    assert worker.stop(release=LeaseReleased(ME))
    store = reopen(db)
    assert store.live_brokers(NOW) == 0
    store.close()


def test_submit_after_stop_is_refused(start_worker):
    worker = start_worker()
    worker.stop()
    with pytest.raises(RuntimeError, match="stopped"):
        worker.submit([(1, RunSaved("r1", {}))])


# -- the worker while another process holds the file's write lock ------------------------

@pytest.fixture
def lock(db):
    """Another connection that can hold the file's write lock (``hold``/``release``)."""
    class Lock:
        def __init__(self) -> None:
            SqliteStore(db).close()            # the file exists, in WAL mode
            self.conn = apsw.Connection(str(db))
            self.held = False

        def hold(self) -> None:
            self.conn.execute("BEGIN EXCLUSIVE")
            self.held = True

        def release(self) -> None:
            if self.held:
                self.conn.execute("ROLLBACK")
                self.held = False

    holder = Lock()
    yield holder
    holder.release()
    holder.conn.close()


def test_a_locked_store_fails_waited_tickets_fast_and_keeps_the_unwaited_records(start_worker, db,
                                                                                 lock):
    worker = start_worker()
    lock.hold()
    started = time.monotonic()
    worker.submit([(1, RunSaved("r1", {})), (None, lease(ME, NOW + 600)),
                   (None, StickyDelivery(7, "a", "t1", "sent", NOW))])
    (report,) = wait_reports(worker)
    elapsed = time.monotonic() - started
    assert (report.done, report.failed, report.code) == ([], [1], "store_unavailable")
    assert "BusyError" in report.error and (report.retained, report.lost) == (2, 0)
    assert elapsed < BUSY_TIMEOUT_MS / 1000 + 2, elapsed
    lock.release()
    worker.submit([(2, RunSaved("r2", {}))])
    assert [(r.done, r.retained) for r in wait_reports(worker)] == [([2], 0)]
    assert worker.stop()
    store = reopen(db)
    snapshot = store.load()
    assert snapshot.runs == [RunSaved("r2", {})]
    assert snapshot.deliveries == [StickyDelivery(7, "a", "t1", "sent", NOW)]
    assert store.live_brokers(NOW) == 1
    store.close()


def test_retained_records_are_written_without_a_new_batch_once_the_lock_goes(start_worker, db,
                                                                             lock):
    worker = start_worker()
    lock.hold()
    worker.submit([(None, RunSaved("r1", {}))])
    assert [r.retained for r in wait_reports(worker)] == [1]
    lock.release()
    watcher = reopen(db)
    deadline = time.monotonic() + RETRY_S + 10
    while not watcher.load().runs:   # the worker's own retry writes it; nothing is submitted
        assert time.monotonic() < deadline, "the retained run was never written"
        time.sleep(0.05)
    watcher.close()


def test_a_retained_renewal_is_replaced_by_the_next_one(start_worker, db, lock):
    worker = start_worker()
    lock.hold()
    worker.submit([(None, lease(ME, NOW + 60))])
    worker.submit([(None, lease(ME, NOW + 600))])
    reports = wait_reports(worker)
    assert reports[-1].retained == 1, reports
    lock.release()
    worker.submit([(1, RunSaved("r1", {}))])
    wait_reports(worker)
    assert worker.stop()
    store = reopen(db)
    counts = (store.live_brokers(NOW + 30), store.live_brokers(NOW + 300))
    store.close()
    assert counts == (1, 1)


def test_retained_records_are_bounded_and_the_oldest_counted_lost(start_worker, db, lock,
                                                                  monkeypatch):
    monkeypatch.setattr(persistence, "RETAIN_LIMIT", 3)
    worker = start_worker()
    lock.hold()
    worker.submit([(None, RunSaved(f"r{n}", {})) for n in range(5)])
    (report,) = wait_reports(worker)
    assert (report.retained, report.lost) == (3, 2)
    lock.release()
    worker.submit([(1, RunSaved("r9", {}))])
    assert [r.lost for r in wait_reports(worker)] == [0]
    assert worker.stop()
    assert [run.run_id for run in reopen(db).load().runs] == ["r2", "r3", "r4", "r9"]
