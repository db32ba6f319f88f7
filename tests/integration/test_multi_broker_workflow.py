"""Workflow runs across brokers on one database: the broker of the run's host owns it.

Real broker processes on one SQLite file (see tests/integration/multi_broker.py): a
session on broker B addressing ``workflow:<run>/...`` of a run hosted on broker A is
handled by A, and what A answered ``queued`` is in the shared database, so a kill -9
of A loses none of it. Queueing, positions, the cap and delivery across brokers are
tested without processes in tests/unit/test_links.py.
"""

from __future__ import annotations

import pytest

from tests.integration.multi_broker import Cluster, database_for, on_both_stores, others_live, wait_until
from tests.integration.workflow_helpers import host_run, path, queue, start_stage, take

pytestmark = pytest.mark.timeout(90)


@pytest.fixture
def two_own(request, store_kind):
    cluster = Cluster(2, db=database_for(store_kind, request))
    yield cluster
    cluster.close()


def hosted_on_first(cluster: Cluster):
    """A host on broker 0 with a fresh run (stage plan pending), bob on broker 1 in the
    run's invocation group, once broker 1 knows who hosts the run."""
    host, run = host_run(lambda name: cluster.connect(0, name), [{"name": "plan"}])
    bob = cluster.connect(1, "bob", group=f"workflow:{run}")
    wait_until(lambda: others_live(bob) == 1, 15, "the brokers link")

    def host_known() -> bool:
        rows = bob.intercom(action="list")["sessions"]
        return any(r["name"] == "host" and f"workflow:{run}" in r["groups"] for r in rows)

    wait_until(host_known, 15, "broker 1 mirrors the host with its run")
    return host, bob, run


@on_both_stores
def test_a_kill_9_of_the_runs_broker_loses_nothing_queued_from_the_other(two_own):
    host, bob, run = hosted_on_first(two_own)
    target = path(run, "plan")
    for text in ("one", "two", "three"):
        queue(bob, target, text)
    first_dir = two_own.brokers[0].data_dir
    two_own.brokers[0].kill()
    two_own.start(first_dir)                       # the same endpoint, a new broker id
    stage = start_stage(lambda name, **kw: two_own.connect(2, name, **kw), run, "plan")
    assert [m["message"] for m in take(stage, 3)] == ["one", "two", "three"]
    assert stage.receive(0.3) is None
