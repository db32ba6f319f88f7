"""The SQLite store on a real file: group commit, reads after reopen, pruning."""

import time

from broker.store import Store


def test_a_batch_commits_as_one_and_survives_reopen(tmp_path):
    path = tmp_path / "bus.db"
    store = Store(path)
    store.apply([("run", "r1", {"runId": "r1", "stages": []}),
                 ("sticky", 1, "r1", "workflow:r1/a", "s", "sender", "m1", "hello", [], 1.0, True),
                 ("sticky_delivery", 1, "a", "t1", "sent", 2.0)])
    store.close()
    again = Store(path)
    assert again.runs() == [{"runId": "r1", "stages": []}]
    assert again.sticky_entries() == [(1, "r1", "workflow:r1/a", "s", "sender", "m1", "hello", [], 1.0, 1)]
    assert again.sticky_deliveries() == [(1, "a", "t1", "sent")]
    again.close()


def test_a_failing_op_rolls_back_the_whole_batch(tmp_path):
    store = Store(tmp_path / "bus.db")
    row = ("sticky", 1, "r1", "workflow:r1/a", "s", "sender", "m1", "hello", [], 1.0, True)
    store.apply([row])
    try:
        store.apply([("run", "r2", {"runId": "r2"}), row])   # duplicate seq: the batch fails
    except Exception:
        pass
    assert store.runs() == []
    store.close()


def test_identity_records_older_than_the_keep_window_are_pruned(tmp_path):
    store = Store(tmp_path / "bus.db")
    now = time.time()
    store.apply([("identity", "old", None, "h1", "a", now - 40 * 86400),
                 ("identity", "new", "atomic", "h2", "b", now)])
    assert store.identities() == [("new", "atomic", "h2")]
    store.close()


def test_run_end_removes_its_entries_and_deliveries(tmp_path):
    store = Store(tmp_path / "bus.db")
    store.apply([("run", "r1", {"runId": "r1"}),
                 ("sticky", 1, "r1", "workflow:r1/a", "s", "sender", "m1", "x", [], 1.0, False),
                 ("sticky_delivery", 1, "a", "t", "acked", 2.0),
                 ("run_end", "r1")])
    assert (store.runs(), store.sticky_entries(), store.sticky_deliveries()) == ([], [], [])
    store.close()
