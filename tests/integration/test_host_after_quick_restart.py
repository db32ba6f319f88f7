"""A host is never locked out of its run when its broker is killed and back on its
endpoint while the host fails over to another broker (issue 24, item 3).

Real broker processes on one SQLite file (tests/integration/multi_broker.py). The
race is made certain rather than left to timing: the host reaches the run's broker A
through a symlink to A's directory, removed at the kill, so its client cannot find
A's successor (restarted at once on A's endpoint, where it loads the run) and fails
over to broker B, as a host does that greets A's endpoint while the successor is
still starting. Before the fix every host operation on B was refused
``run_elsewhere`` from then on.
"""

from __future__ import annotations

import os

import pytest

from client import Client
from tests.integration.multi_broker import Cluster, wait_until
from tests.integration.workflow_helpers import new_run_id, ok, path

pytestmark = pytest.mark.timeout(120)


def broker_id(session) -> str:
    return session.intercom(action="status")["broker"]["id"]


@pytest.fixture
def two():
    cluster = Cluster(2)
    yield cluster
    cluster.close()


def test_host_operations_are_answered_after_its_brokers_quick_restart_behind_a_failover(two):
    first, second = two.brokers
    alias = two.root / "alias"
    os.symlink(first.data_dir, alias)
    host = Client.connect(name="host", endpoint=[f"ipc://{alias}/broker.sock", second.endpoint],
                          timeout=15)
    two.opened.append(host)
    run = new_run_id()
    ok(host.register_run(run, [{"name": "plan"}, {"name": "impl"}, {"name": "docs"}]))
    bob = two.connect(1, "bob", group=f"workflow:{run}")
    second_id = broker_id(bob)

    first.kill()
    alias.unlink()
    restarted = two.start(first.data_dir)           # back on its endpoint: loads the run
    wait_until(lambda: host.connected and broker_id(host) == second_id, 30,
               "the host fails over to the second broker")
    carol = two.connect(2, "carol", group=f"workflow:{run}")
    restarted_id = broker_id(carol)
    # The restarted broker holds the run: bob's send is forwarded there and queued.
    wait_until(lambda: bob.intercom(action="send", to=path(run, "plan"),
                                    message="probe").get("queued"),
               30, "the second broker knows the run's broker")
    assert restarted_id not in (second_id, broker_id(host))

    answers = {
        "set_stage_state": host.set_stage_state(run, "plan", "RUNNING"),
        "add_stages": host.add_stages(run, [{"name": "review"}]),
        "revoke_stage": host.revoke_stage(run, "docs"),
        "register_run": host.register_run(run, [{"name": "plan"}]),
    }
    for op, answer in answers.items():
        assert answer.get("ok") is True, (op, answer)
    assert answers["set_stage_state"]["state"] == "RUNNING"
    assert path(run, "review") in answers["add_stages"]["stages"]
    assert f"workflow:{run}" in answers["register_run"]["groups"]
    ended = host.end_run(run)
    assert ended.get("ok") is True and ended.get("ended") is True, ended
    assert broker_id(host) == second_id             # the host stayed where it was
