"""Several broker processes on one database: leases, links, sessions across brokers.

Every test starts real brokers (``python -m broker --db <one file>``, each with its
own data dir and ipc endpoints, a short ``--broker-lease-s``) and real clients, and
waits on replies with deadlines. The tests marked ``on_both_stores`` run on a
PostgreSQL schema too. Only what takes processes is tested here (a kill -9, failover,
sockets and PUBs, lease rows in a database, one send and one ask end to end); what the
engines decide across brokers is tested in memory in tests/unit/test_across_brokers.py.
"""

from __future__ import annotations

import threading
import time

import pytest

from tests.conftest import LIVENESS_S   # the window the test brokers run with
from tests.integration.conftest import drain_events, wait_for_event
from tests.integration.multi_broker import (Cluster, PubTail, database_for, on_both_stores, others_live, sees, shared_cluster, wait_until)

pytestmark = pytest.mark.timeout(90)

# Tests that leave every broker running share them, each in a group of its own;
# a test that stops, kills or restarts one starts its own (two_own, three_own).
_two_brokers, two = shared_cluster("two", 2)


@pytest.fixture
def two_own(request, store_kind):
    cluster = Cluster(2, db=database_for(store_kind, request))
    yield cluster
    cluster.close()


@pytest.fixture
def three_own():
    cluster = Cluster(3)
    yield cluster
    cluster.close()


def linked(cluster: Cluster, sessions: list, names: list[str], others: int) -> None:
    """Wait until each broker counts the others and each session lists the names."""
    for session in sessions:
        wait_until(lambda: others_live(session) == others, 15, "brokers count each other")
        for name in names:
            if name != session.name:
                wait_until(lambda: sees(session, name), 15, f"{session.name} lists {name}")


# -- leases and status ---------------------------------------------------------------

@on_both_stores
def test_two_brokers_on_one_file_report_multi_node_and_one_other(two_own):
    a = two_own.connect(0, "alice")
    wait_until(lambda: others_live(a) == 1, 15, "the second broker counted")
    broker = a.intercom(action="status")["broker"]
    assert (broker["routing"], broker["otherBrokersLive"]) == ("multi-node", 1)


def test_a_clean_stop_stops_counting_at_once(two_own):
    a = two_own.connect(0, "alice")
    wait_until(lambda: others_live(a) == 1, 15, "the second broker counted")
    two_own.brokers[1].stop()
    # Told over the link before it exits: no lease has to run out.
    assert others_live(a) == 0 or wait_until(lambda: others_live(a) == 0, 1.0, "bye seen")
    assert a.intercom(action="status")["broker"]["routing"] == "single-node"


def test_a_killed_brokers_lease_stops_counting_once_it_ends_and_a_restart_counts_no_ghost(two_own):
    a = two_own.connect(0, "alice")
    wait_until(lambda: others_live(a) == 1, 15, "the second broker counted")
    second_dir = two_own.brokers[1].data_dir
    two_own.brokers[1].kill()
    wait_until(lambda: others_live(a) == 0, 3 + LIVENESS_S + 2, "the dead broker no longer counted")
    restarted = two_own.start(second_dir)            # same endpoint, a new broker id
    b = two_own.connect(2, "bob")
    wait_until(lambda: others_live(a) == 1, 15, "the restarted broker counted")
    assert others_live(b) == 1                   # not 2: its predecessor's row is gone
    assert restarted.proc.poll() is None


# -- sessions across brokers ---------------------------------------------------------

def test_send_across_brokers_is_delivered_once_and_answered_by_the_targets_broker(two_own):
    a = two_own.connect(0, "alice", group=two_own.group)
    b = two_own.connect(1, "bob", group=two_own.group)
    linked(two_own, [a, b], ["alice", "bob"], 1)
    answer = a.intercom(action="send", to="bob", message="hello")
    assert (answer["ok"], answer["delivered"], answer["toName"]) == (True, True, "bob")
    got = b.receive(5)
    assert (got["message"], got["from"]) == ("hello", a.id)
    assert b.receive(0.2) is None


def test_ask_and_reply_across_brokers_with_pending_on_the_targets_side(two):
    a = two.connect(0, "alice", group=two.group)
    b = two.connect(1, "bob", group=two.group)
    linked(two, [a, b], ["alice", "bob"], 1)
    result = {}
    asker = threading.Thread(target=lambda: result.update(
        a.intercom(action="ask", to="bob", message="what time?")))
    asker.start()
    ask = b.receive(5)
    assert ask["expectsReply"] is True
    pending = b.intercom(action="pending")["pending"]
    assert [(p["messageId"], p["fromName"]) for p in pending] == [(ask["id"], "alice")]
    assert b.intercom(action="reply", message="noon")["ok"]
    asker.join(10)
    assert (result["ok"], result["message"], result["messageId"]) == (True, "noon", ask["id"])


def test_presence_across_brokers_in_band_and_on_every_pub(two):
    a = two.connect(0, "alice", group=two.group)
    two.connect(1, "early", group=two.group)
    linked(two, [a], ["early"], 1)
    tails = [PubTail(p.pub_endpoint, two.group) for p in two.brokers]
    try:
        for tail in tails:
            tail.warm_up(a)            # alice's status shows on both PUBs
        drain_events(a)
        b = two.connect(1, "bob", group=two.group)
        event, _ = wait_for_event(a, lambda e: e["session"]["name"] == "bob", 10)
        assert event["event"] == "session_joined"
        for tail in tails:
            got = tail.wait_for(lambda e: e.get("session", {}).get("name") == "bob", 10)
            assert (got["event"], got["group"]) == ("session_joined", two.group)
        b.close()
        event, _ = wait_for_event(a, lambda e: e["session"]["name"] == "bob", 10)
        assert event["event"] == "session_left"
    finally:
        for tail in tails:
            tail.close()


# -- a broker dies -------------------------------------------------------------------

def test_a_killed_brokers_sessions_leave_the_others_within_the_liveness_window(three_own):
    a = three_own.connect(0, "alice", group=three_own.group)
    c = three_own.connect(2, "carol", group=three_own.group)
    three_own.connect(1, "bob", group=three_own.group)
    linked(three_own, [a, c], ["alice", "bob", "carol"], 2)
    drain_events(a)
    drain_events(c)
    killed_at = time.monotonic()
    three_own.brokers[1].kill()
    for session in (a, c):
        event, _ = wait_for_event(session, lambda e: e["session"]["name"] == "bob", LIVENESS_S + 3)
        assert event["event"] == "session_left"
    assert time.monotonic() - killed_at < LIVENESS_S + 3
    assert not sees(a, "bob") and not sees(c, "bob")


def ask_across(two, message: str):
    """alice on broker 0 asks bob on broker 1; returns (bob, alice's answer, its thread)
    once bob has the ask."""
    a = two.connect(0, "alice", group=two.group)
    b = two.connect(1, "bob", group=two.group)
    linked(two, [a, b], ["alice", "bob"], 1)
    result = {}
    asker = threading.Thread(target=lambda: result.update(
        a.intercom(action="ask", to="bob", message=message)))
    asker.start()
    assert b.receive(5)["expectsReply"]
    return b, result, asker


def test_an_ask_waiting_on_a_killed_broker_fails_promptly(two_own):
    _, result, asker = ask_across(two_own, "still there?")
    started = time.monotonic()
    two_own.brokers[1].kill()
    asker.join(LIVENESS_S + 5)
    assert (result.get("ok"), result.get("code")) in {(False, "peer_disconnected"),
                                                      (False, "broker_unreachable")}
    assert time.monotonic() - started < LIVENESS_S + 3


def test_sends_in_flight_to_a_killed_broker_are_each_answered_within_the_liveness_window(two_own):
    a = two_own.connect(0, "alice", group=two_own.group)
    b = two_own.connect(1, "bob", group=two_own.group)
    linked(two_own, [a, b], ["alice", "bob"], 1)
    stop = threading.Event()
    futures: list = []

    def pump() -> None:
        while not stop.is_set() and len(futures) < 200_000:
            futures.append(a.send_nowait("bob", "x" * 64))
            if len(futures) % 256 == 0:
                futures[-1].result(10)        # a bounded window, as real senders keep

    sender = threading.Thread(target=pump)
    sender.start()
    # Answered, not only sent: on a loaded host the first sends may still be in flight.
    wait_until(lambda: sum(1 for f in futures[:2100] if f.done() and f.result()["ok"]) > 2000,
               10, "traffic flowing")
    two_own.brokers[1].kill()
    killed_at = time.monotonic()
    wait_until(lambda: not sees(a, "bob"), LIVENESS_S + 3, "bob gone on alice's broker")
    stop.set()
    sender.join(10)
    answers = [f.result(LIVENESS_S + 3) for f in futures]
    assert time.monotonic() - killed_at < 2 * LIVENESS_S + 6
    codes = {r.get("code") for r in answers if not r["ok"]}
    assert codes <= {"peer_disconnected", "target_not_found", "broker_unreachable"}, codes
    assert sum(r["ok"] for r in answers) > 2000


# -- clients fail over -----------------------------------------------------------------

def test_a_client_fails_over_to_the_next_broker_with_its_id_and_memberships(two_own):
    endpoints = [p.endpoint for p in two_own.brokers]
    a = two_own.connect(0, "alice", group=two_own.group)
    a.close()
    from client import Client   # noqa: PLC0415
    alice = Client.connect(name="alice", endpoint=endpoints, group=two_own.group, timeout=15)
    two_own.opened.append(alice)
    assert alice.intercom(action="join", group="extra")["ok"]
    b = two_own.connect(1, "bob", group=two_own.group)
    linked(two_own, [alice, b], ["alice", "bob"], 1)
    first_broker = alice.intercom(action="status")["broker"]["id"]
    old_id = alice.id
    two_own.brokers[0].kill()
    started = time.monotonic()
    # A call made meanwhile waits for the new broker's welcome and is answered there.
    wait_until(lambda: alice.intercom(action="status").get("broker", {}).get("id")
               not in (None, first_broker), LIVENESS_S + 10, "alice welcomed by the other broker")
    failover_s = time.monotonic() - started
    status = alice.intercom(action="status")
    assert (alice.id, sorted(status["groups"])) == (old_id, sorted(["extra", two_own.group]))
    assert failover_s < LIVENESS_S + 5
    assert b.intercom(action="send", to="alice", message="you moved")["ok"]
    assert alice.receive(5)["message"] == "you moved"


def test_endpoint_lists_come_from_the_environment_as_comma_separated_text(two, monkeypatch):
    from client import Client   # noqa: PLC0415
    monkeypatch.setenv("INTERCOM_ENDPOINT", ",".join(p.endpoint for p in reversed(two.brokers)))
    session = Client.connect(name="envy", timeout=15)
    two.opened.append(session)
    assert session.intercom(action="status")["ok"]
    assert session.endpoint == two.brokers[1].endpoint


# -- one id, one live session, store-wide ------------------------------------------------

@on_both_stores
def test_simultaneous_reclaims_of_one_id_on_two_brokers_grant_it_to_exactly_one(two_own):
    from client import Client   # noqa: PLC0415
    watcher = two_own.connect(1, "watcher", group=two_own.group)
    first = two_own.connect(0, "twin", group=two_own.group)
    identity = {"sessionId": first.id, "reclaimSecret": first.token}
    wait_until(lambda: sees(watcher, "twin"), 15, "the id's holder mirrored on broker 1")
    for round_ in range(5):
        first.close()
        wait_until(lambda: not sees(watcher, "twin"), 10, "the id released")
        barrier = threading.Barrier(2)
        opened: list = [None, None]

        def connect(index: int) -> None:
            barrier.wait()
            opened[index] = Client.connect(name="twin", endpoint=two_own.brokers[index].endpoint,
                                           group=two_own.group, identity=identity, timeout=15)

        threads = [threading.Thread(target=connect, args=(i,)) for i in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(20)
        two_own.opened.extend(opened)
        reclaimed = [s.welcome.get("reclaimed") for s in opened]
        assert sorted(reclaimed) == [False, True], (round_, [s.welcome for s in opened])
        winner, loser = opened if reclaimed[0] else opened[::-1]
        assert winner.id == identity["sessionId"] != loser.id
        assert "another broker" in loser.welcome["reason"] or \
            "a live session holds that id" in loser.welcome["reason"]
        loser.close()
        first = winner
        identity = {"sessionId": first.id, "reclaimSecret": first.token}
