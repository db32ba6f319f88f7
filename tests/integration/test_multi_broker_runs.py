"""Runs belong to one broker; the others forward to it, send its stages there, and
take its runs over when it dies (broker.core.cluster.ownership).

Real broker processes on one SQLite file (tests/integration/multi_broker.py). What
the run's broker answers to the other broker's sessions while both live is tested in
memory too (tests/unit/test_run_ownership.py, test_runs_across_brokers.py,
test_remote_listing.py).
"""

from __future__ import annotations

import pytest

from client import Client
from tests.integration.multi_broker import (Cluster, database_for, on_both_stores, others_live, shared_cluster, wait_until)
from tests.integration.workflow_helpers import host_run, path, queue, run_row, send, start_stage, take

pytestmark = pytest.mark.timeout(120)

HOST_LEASE_S = "2"


# Tests that leave both brokers running share them (their runs and stage sessions are
# their own); a test that stops, kills or restarts one starts its own (two_own).
_two_brokers, two = shared_cluster("two", 2, "--host-lease-s", HOST_LEASE_S)


@pytest.fixture
def two_own(request, store_kind):
    cluster = Cluster(2, "--host-lease-s", HOST_LEASE_S, db=database_for(store_kind, request))
    yield cluster
    cluster.close()


def broker_id(session) -> str:
    return session.intercom(action="status")["broker"]["id"]


def along(cluster: Cluster, endpoints: list[str]):
    """A connect function for sessions that fail over along ``endpoints``."""
    def connect(name):
        session = Client.connect(name=name, endpoint=endpoints, timeout=15)
        cluster.opened.append(session)
        return session
    return connect


def linked_run(cluster: Cluster, endpoints=None):
    """A host on broker 0 (with ``endpoints`` to fail over along, if given) with a run
    whose stage ``plan`` is pending, and bob on broker 1 in the run's group, once the
    brokers are linked and broker 1 knows the run."""
    connect = along(cluster, endpoints) if endpoints else lambda name: cluster.connect(0, name)
    host, run = host_run(connect, [{"name": "plan"}])
    bob = cluster.connect(1, "bob", group=f"workflow:{run}")
    wait_until(lambda: others_live(bob) == 1, 15, "the brokers link")
    # Broker 1 forwards a path send only once it knows who owns the run.
    wait_until(lambda: send(bob, path(run, "plan"), "probe").get("queued"), 15,
               "broker 1 forwards to the run's broker")
    return host, bob, run


def test_a_stage_that_reaches_another_broker_is_sent_to_its_runs_broker(two):
    host, bob, run = linked_run(two)
    queue(bob, path(run, "plan"), "first")
    stage = start_stage(lambda name, **kw: two.connect(1, name, **kw), run, "plan")
    assert broker_id(stage) == broker_id(host)           # it followed the run
    assert [m["message"] for m in take(stage, 2)] == ["probe", "first"]
    live = send(bob, path(run, "plan"), "live")
    assert live.get("delivered") is True, live
    assert take(stage, 1)[0]["message"] == "live"
    assert stage.receive(0.3) is None


@on_both_stores
def test_a_dead_brokers_runs_follow_their_host_and_lose_nothing_queued(two_own):
    endpoints = [b.endpoint for b in two_own.brokers]
    host, bob, run = linked_run(two_own, endpoints)
    target = path(run, "plan")
    for text in ("one", "two"):
        queue(bob, target, text)
    two_own.brokers[0].kill()
    # The host fails over to broker 1, which takes the run over with everything queued.
    wait_until(lambda: host.connected and broker_id(host) == broker_id(bob), 30,
               "the host fails over to broker 1")

    def queued_again():
        answer = send(bob, target, "three")
        if answer.get("ok"):
            return answer
        # Until the dead broker's lease ends the database says it is alive: the run is
        # unreachable, then moving, and nothing is queued meanwhile.
        assert answer.get("code") in ("broker_unreachable", "run_moving",
                                      "peer_disconnected"), answer
        return None

    assert wait_until(queued_again, 30, "broker 1 owns the run")["position"] == 4
    row = run_row(host, run)                       # still the host of its run
    assert row["runId"] == run
    stage = start_stage(lambda name, **kw: two_own.connect(1, name, **kw), run, "plan")
    assert [m["message"] for m in take(stage, 4)] == ["probe", "one", "two", "three"]
    assert stage.receive(0.3) is None              # each once


def test_a_restarted_broker_does_not_take_a_live_brokers_run(two_own):
    host, bob, run = linked_run(two_own)
    second_dir = two_own.brokers[1].data_dir
    two_own.brokers[1].stop()
    two_own.start(second_dir)                          # loads the database again
    carol = two_own.connect(2, "carol", group=f"workflow:{run}")
    wait_until(lambda: others_live(carol) == 1, 15, "the restarted broker links")
    stage = start_stage(lambda name, **kw: two_own.connect(2, name, **kw), run, "plan")
    assert broker_id(stage) == broker_id(host)     # bound where the run is, not a copy
    assert [m["message"] for m in take(stage, 1)] == ["probe"]
    assert stage.receive(0.3) is None


def dormant_with_held_send(cluster: Cluster):
    """A run on broker 0 whose host, stage and the stage's subagent left; past the host
    lease a peer's send to the subagent is held. Returns (peer, run, helper id, secret)."""
    connect = lambda name, **kw: cluster.connect(0, name, **kw)    # noqa: E731
    host, run = host_run(connect, [{"name": "plan"}])
    planner = start_stage(connect, run, "plan", transcript="t-plan")
    helper = connect("helper", parent=planner.id, grant=planner.grant_child()["grant"])
    helper_id, secret = helper.id, helper.welcome["token"]
    peer = connect("peer", group=f"workflow:{run}")
    for session in (helper, planner, host):
        session.close()
    wait_until(lambda: peer.intercom(action="ask", to="helper", message="?",
                                     timeout=5).get("code") == "run_dormant", 20,
               "the run goes dormant")
    answer = peer.intercom(action="send", to="helper", message="while you were away")
    assert (answer.get("queued"), answer.get("held")) == (True, True), answer
    return peer, run, helper_id, secret


def test_a_held_send_reaches_a_subagent_that_comes_back_on_another_broker(two):
    peer, run, helper_id, secret = dormant_with_held_send(two)
    start_stage(lambda name, **kw: two.connect(1, name, **kw), run, "plan", transcript="t-plan")
    helper = two.connect(1, "helper", session_id=helper_id,
                         identity={"sessionId": helper_id, "reclaimSecret": secret})
    assert helper.id == helper_id, helper.welcome
    msg = helper.receive(timeout=10)
    assert msg is not None and (msg["message"], msg.get("held")) == ("while you were away", True)
    assert helper.receive(timeout=1) is None                   # once only


def test_holds_and_dormancy_move_with_a_dead_brokers_run(two_own):
    peer, run, helper_id, secret = dormant_with_held_send(two_own)
    two_own.brokers[0].kill()
    # A stage hello on the survivor takes the run over (it waits for the adoption).
    stage = start_stage(lambda name, **kw: two_own.connect(1, name, **kw), run, "plan",
                        transcript="t-plan")
    assert broker_id(stage) == broker_id(two_own.connect(1, "watcher"))
    helper = two_own.connect(1, "helper", session_id=helper_id,
                         identity={"sessionId": helper_id, "reclaimSecret": secret})
    msg = helper.receive(timeout=10)
    assert msg is not None and msg["message"] == "while you were away"
    assert helper.receive(timeout=1) is None


def test_three_brokers_a_dead_brokers_run_moves_to_its_hosts_broker_and_the_third_follows():
    cluster = Cluster(3, "--host-lease-s", HOST_LEASE_S)
    try:
        host, run = host_run(along(cluster, [b.endpoint for b in cluster.brokers]),
                             [{"name": "plan"}])
        carol = cluster.connect(2, "carol", group=f"workflow:{run}")
        wait_until(lambda: others_live(carol) == 2, 15, "three brokers link")
        target = path(run, "plan")
        wait_until(lambda: send(carol, target, "before").get("queued"), 15,
                   "broker 2 forwards to the run's broker")
        second = broker_id(cluster.connect(1, "probe"))
        cluster.brokers[0].kill()
        wait_until(lambda: host.connected and host.welcome["brokerId"] == second, 30,
                   "the host fails over to broker 1")

        def queued_after():
            answer = send(carol, target, "after")
            return answer if answer.get("queued") else None

        assert wait_until(queued_after, 30, "broker 2 sends to the adopter")["position"] == 2
        stage = start_stage(lambda name, **kw: cluster.connect(2, name, **kw), run, "plan")
        assert broker_id(stage) == second                          # sent to broker 1
        assert [m["message"] for m in take(stage, 2)] == ["before", "after"]
        assert stage.receive(0.3) is None
    finally:
        cluster.close()


def test_a_send_from_another_broker_to_a_dormant_runs_subagent_is_held_by_the_runs_broker(two):
    peer, run, helper_id, secret = dormant_with_held_send(two)
    far = two.connect(1, "far", group=f"workflow:{run}")

    def held_from_far():
        answer = far.intercom(action="send", to="helper", message="from the other broker")
        return answer if answer.get("held") else None

    answer = wait_until(held_from_far, 15, "broker 1 forwards to the subagent's holder")
    assert (answer["queued"], answer["position"]) == (True, 2), answer
    assert far.intercom(action="ask", to="helper", message="?", timeout=5)["code"] == "run_dormant"
    start_stage(lambda name, **kw: two.connect(0, name, **kw), run, "plan", transcript="t-plan")
    helper = two.connect(0, "helper", session_id=helper_id,
                         identity={"sessionId": helper_id, "reclaimSecret": secret})
    got = [m["message"] for m in take(helper, 2)]
    assert got == ["while you were away", "from the other broker"]
    assert helper.receive(timeout=1) is None


def test_a_member_on_another_broker_lists_the_run_as_its_own_broker_does(two):
    host, bob, run = linked_run(two)
    carol = two.connect(0, "carol", group=f"workflow:{run}")   # the same kind of session, on A
    queue(bob, path(run, "plan"), "sticky")
    queue(bob, path(run, "later"), "not declared yet")

    here, there = run_row(bob, run), run_row(carol, run)

    assert here == there
    plan = [s for s in here["stages"] if s["name"] == "plan"]
    assert [(s["label"], s["queued"]) for s in plan] == [("PENDING", 2)], here  # probe + sticky
    assert here["future"] == [{"target": path(run, "later"), "queued": 1}], here
    assert [s["state"] for s in here["delivery"][0]["deliveryStates"]] == ["queued", "queued"]


def test_a_list_on_another_broker_is_answered_with_a_marker_when_the_runs_broker_dies(two_own):
    host, bob, run = linked_run(two_own)
    owner = broker_id(host)
    two_own.brokers[0].kill()

    row = run_row(bob, run)          # answered, not waiting for the dead broker

    assert row["state"] == "root-unresolved", row
    assert row["diagnostic"].startswith(f"run {run}: broker {owner} "), row
    assert row["owner"] == owner, row
