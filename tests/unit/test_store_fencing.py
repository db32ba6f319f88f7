"""The Store contract for fencing (every store): the database alone says who is alive
and who owns a run. A run's writes apply only at its owner's epoch, an adoption waits
for the owner's lease to end by the store's clock and bumps the epoch, so a deposed
broker can never write to a run it lost."""

from __future__ import annotations

import time

from broker.core.kernel.records import (LeaseRenewed, RunEnded, RunSaved, StickyAnswered,
                                        StickyDelivery, StickyDropped)

from .store_helpers import entry, lease, open_store, store  # noqa: F401


def run(run_id: str, owner: str, epoch: int, **fields) -> RunSaved:
    return RunSaved(run_id, {"runId": run_id, **fields}, owner, epoch)


def fenced_entry(seq: int, owner: str, epoch: int):
    return entry(seq, run_id="r", target="workflow:r/a", owner=owner, epoch=epoch)


def epoch_of(store, run_id: str) -> tuple[str, int]:
    (saved,) = [r for r in store.load().runs if r.run_id == run_id]
    return saved.owner, saved.epoch


def test_an_adoption_bumps_the_epoch_and_the_deposed_owners_writes_are_refused(store):
    store.apply([run("r", "a", 1), fenced_entry(1, "a", 1)])
    adopted = store.adopt_runs("a", "b")               # "a" has no live lease
    assert [(r.run_id, r.owner, r.epoch) for r in adopted.runs] == [("r", "b", 2)]
    stale_entry, stale_run = fenced_entry(2, "a", 1), run("r", "a", 1, stale=True)
    refused = store.apply([stale_entry, stale_run,
                           StickyDelivery(1, "a", "t", "acked", time.time(), "r", "a", 1),
                           StickyAnswered(1, ["x"], "r", "a", 1),
                           StickyDropped(1, "r", "a", 1), RunEnded("r", "a", 1),
                           fenced_entry(3, "b", 2)])
    assert refused == [stale_entry, stale_run]          # the rest of the batch is kept
    snapshot = store.load()
    assert [row.entry.seq for row in snapshot.sticky] == [1, 3]
    assert [row.delivered_to for row in snapshot.sticky] == [[], []]
    assert snapshot.deliveries == []
    assert [(r.owner, r.epoch, r.record) for r in snapshot.runs] == [("b", 2, {"runId": "r"})]


def test_the_owners_writes_at_its_epoch_apply(store):
    store.apply([run("r", "a", 1), fenced_entry(1, "a", 1), fenced_entry(2, "a", 1)])
    assert store.apply([StickyDelivery(1, "a", "t", "acked", time.time(), "r", "a", 1),
                        StickyDropped(2, "r", "a", 1), run("r", "a", 1, v=2)]) == []
    snapshot = store.load()
    assert [row.entry.seq for row in snapshot.sticky] == [1]
    assert [(d.seq, d.state) for d in snapshot.deliveries] == [(1, "acked")]
    assert store.apply([RunEnded("r", "a", 1)]) == []
    assert store.load().runs == []


def test_an_adoption_waits_for_the_owners_lease_to_end_by_the_stores_clock(store):
    store.apply([lease("a", time.time() + 600), run("r", "a", 1)])
    assert store.adopt_runs("a", "b").runs == []        # its lease is live: it owns r
    assert epoch_of(store, "r") == ("a", 1)
    store.apply([lease("a", time.time() - 1)])
    assert [(r.owner, r.epoch) for r in store.adopt_runs("a", "b").runs] == [("b", 2)]


def test_a_broker_takes_back_its_own_runs_under_a_new_epoch(store):
    store.apply([lease("a", time.time() + 600), run("r", "a", 3), run("s", "b", 1)])
    taken = store.adopt_runs("a", "a")
    assert [(r.run_id, r.owner, r.epoch) for r in taken.runs] == [("r", "a", 4)]
    assert store.apply([fenced_entry(1, "a", 3)]) == [fenced_entry(1, "a", 3)]


def test_a_broker_starting_takes_runs_under_a_new_epoch(store):
    store.apply([lease("live", time.time() + 600), run("mine", "me", 2), run("theirs", "live", 1)])
    snapshot = store.load("me")
    assert [(r.run_id, r.epoch) for r in snapshot.runs] == [("mine", 3)]
    assert epoch_of(store, "theirs") == ("live", 1)


def test_a_lease_given_a_length_ends_that_long_after_the_stores_clock(store):
    # ``until`` in the past (a broker whose clock runs slow): the store's clock decides.
    store.apply([LeaseRenewed("a", 1, "ipc:///tmp/a.sock", time.time(), 0.0, "", 600.0)])
    (row,) = store.brokers(time.time())
    assert row.broker_id == "a" and row.until > time.time() + 500
