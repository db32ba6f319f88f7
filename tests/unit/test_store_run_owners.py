"""The Store contract for run ownership (both stores): a broker loads only the runs no
live broker owns, and a dead broker's runs go to exactly one adopter."""

from __future__ import annotations

import time

from broker.core.kernel.records import RunSaved

from .store_helpers import entry, lease, open_store, store  # noqa: F401


# Lease ends from the clock now, not the suite's start (NOW): the suite takes minutes.
def run(run_id: str, owner: str) -> RunSaved:
    return RunSaved(run_id, {"runId": run_id}, owner)


def test_a_broker_loads_its_own_unowned_and_dead_brokers_runs_and_names_the_others(store):
    store.apply([lease("live", time.time() + 600), lease("dead", time.time() - 1),
                 run("mine", "me"), run("theirs", "live"), run("orphan", "dead"), run("old", ""),
                 entry(1, run_id="theirs", target="workflow:theirs/a"),
                 entry(2, run_id="orphan", target="workflow:orphan/a")])
    snapshot = store.load("me")
    assert sorted(r.run_id for r in snapshot.runs) == ["mine", "old", "orphan"]
    assert {r.owner for r in snapshot.runs} == {"me"}
    assert [row.entry.run_id for row in snapshot.sticky] == ["orphan"]
    assert snapshot.owners == {"theirs": "live"}
    # Taken for good: once "me" holds a lease, another broker loading sees them as its.
    store.apply([lease("me", time.time() + 600)])
    assert store.load("live").owners == {"mine": "me", "old": "me", "orphan": "me"}


def test_a_live_lease_named_gone_does_not_keep_its_runs(store):
    store.apply([lease("killed", time.time() + 600), run("r", "killed")])
    assert store.load("me").owners == {"r": "killed"}
    assert [r.run_id for r in store.load("me", gone=["killed"]).runs] == ["r"]


def test_a_dead_brokers_runs_go_to_exactly_one_adopter_with_their_entries(store):
    store.apply([run("r1", "dead"), run("r2", "dead"), run("r3", "other"),
                 entry(1, run_id="r1", target="workflow:r1/a"),
                 entry(2, run_id="r3", target="workflow:r3/a")])
    first = store.adopt_runs("dead", "b1")
    second = store.adopt_runs("dead", "b2")
    assert sorted(r.run_id for r in first.runs) == ["r1", "r2"]
    assert {r.owner for r in first.runs} == {"b1"}
    assert [row.entry.seq for row in first.sticky] == [1]
    assert (second.runs, second.sticky) == ([], [])
    assert sorted(r.run_id for r in store.load().runs) == ["r1", "r2", "r3"]   # nothing lost


def test_loading_without_an_owner_reads_every_run_and_entry(store):
    store.apply([run("a", "x"), entry(1, run_id="b", target="workflow:b/s")])
    snapshot = store.load()
    assert ([r.run_id for r in snapshot.runs], [row.entry.seq for row in snapshot.sticky]) == (["a"], [1])


def test_a_broker_that_lost_a_run_writes_nothing_to_it(store):
    store.apply([run("r", "stalled")])
    store.adopt_runs("stalled", "adopter")
    store.apply([RunSaved("r", {"runId": "r", "stale": True}, "stalled")])
    (kept,) = store.load().runs
    assert (kept.owner, kept.record) == ("adopter", {"runId": "r"})
    store.apply([RunSaved("r", {"runId": "r", "v": 2}, "adopter")])
    assert store.load().runs[0].record == {"runId": "r", "v": 2}


def test_a_save_of_a_run_another_broker_owns_is_refused_and_the_rest_of_the_batch_kept(store):
    store.apply([run("theirs", "other"), run("old", "")])
    stale = RunSaved("theirs", {"runId": "theirs", "mine": True}, "me")
    refused = store.apply([stale, run("mine", "me"), run("old", "me"),
                           RunSaved("theirs", {"runId": "theirs", "v": 2}, "other")])
    assert refused == [stale]          # its owner's save and an unowned row's are written
    assert {r.run_id: (r.owner, r.record) for r in store.load().runs} == {
        "theirs": ("other", {"runId": "theirs", "v": 2}), "old": ("me", {"runId": "old"}),
        "mine": ("me", {"runId": "mine"})}


def test_a_job_another_live_broker_started_is_not_loaded_to_be_failed(store):
    from broker.core.kernel.records import InvocationState

    from .store_helpers import job

    store.apply([lease("live", time.time() + 600), lease("dead", time.time() - 1),
                 job("j1"), job("j2"), job("j3"),
                 InvocationState("j1", "started", time.time(), broker_id="live"),
                 InvocationState("j2", "started", time.time(), broker_id="dead")])
    assert sorted((j.id, j.state) for j in store.load("me").invocations) == \
        [("j2", "started"), ("j3", "queued")]
    assert len(store.load().invocations) == 3           # without an owner: every one
