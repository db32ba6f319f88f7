"""A run whose host left: it stays as it was for the host's lease, then is dormant."""

from .harness import Bus
from .test_workflow import STAGES, queue, stage

LEASE = 30.0


def leased_run():
    bus = Bus(liveness_s=1e9, host_lease_s=LEASE)
    host = bus.hello("host")
    registered = bus.workflow(b"host", "register_run", runId="r1", stages=STAGES)
    stage(bus, "plan", "workflow:r1/plan")
    bus.hello("peer")
    bus.call(b"peer", "join", group="workflow:r1")
    return bus, host, registered


def row(bus, identity=b"peer"):
    (run,) = bus.call(identity, "list")["workflows"]
    return run


def test_a_run_stays_as_it_was_while_the_host_lease_holds():
    bus, _, _ = leased_run()
    bus.feed(b"host", {"v": 1, "k": "bye"})
    bus.advance(LEASE - 1)
    run = row(bus)
    assert run["dormant"] is False and run["host"] is None
    bus.feed(b"peer", {"v": 1, "k": "call", "id": "a1", "action": "ask",
                       "to": "workflow:r1/plan", "message": "?"})
    assert [m["id"] for m in bus.sends(b"plan", "msg")] == ["a1"]     # still reachable
    assert [s["label"] for s in run["stages"] if s["name"] == "plan"] == ["RUNNING"]


def test_past_the_lease_the_run_is_dormant_asks_refused_sends_queued():
    bus, _, _ = leased_run()
    bus.feed(b"host", {"v": 1, "k": "bye"})
    bus.feed(b"plan", {"v": 1, "k": "bye"})
    bus.advance(LEASE + 1)
    run = row(bus)
    assert run["dormant"] is True
    assert [s["label"] for s in run["stages"] if s["name"] == "plan"] == ["PENDING"]
    asked = bus.call(b"peer", "ask", to="workflow:r1/plan", message="?")
    assert asked["code"] == "run_dormant"
    assert queue(bus, b"peer", "workflow:r1/plan", "later")["queued"] is True


def test_only_the_launching_session_resumes_it_and_it_is_not_dormant_again():
    bus, host, _ = leased_run()
    bus.feed(b"host", {"v": 1, "k": "bye"})
    bus.advance(LEASE + 1)
    assert bus.workflow(b"peer", "register_run", runId="r1", stages=[])["code"] == "not_run_host"
    back = bus.hello("host", identity=b"host2", sessionId=host["sessionId"], token=host["token"])
    assert back["reclaimed"] is True
    assert row(bus)["dormant"] is False and row(bus)["host"] == host["sessionId"]


def test_another_session_takes_it_over_with_the_run_grant_only():
    bus, host, registered = leased_run()
    bus.feed(b"host", {"v": 1, "k": "bye"})
    bus.advance(LEASE + 1)
    refused = bus.workflow(b"peer", "take_over", runId="r1", grant="r1.forged")
    assert refused["code"] == "invalid_grant"
    taken = bus.workflow(b"peer", "take_over", runId="r1", grant=registered["runGrant"])
    assert taken["ok"] and taken["tookOverFrom"] == host["sessionId"]
    assert row(bus)["host"] == bus.call(b"peer", "status")["sessionId"]
    assert row(bus)["dormant"] is False


def test_the_lease_and_dormancy_survive_a_restart():
    bus, _, _ = leased_run()
    bus.feed(b"host", {"v": 1, "k": "bye"})
    bus.advance(LEASE - 10)
    bus.commit()
    bus.restart()
    bus.hello("peer2")
    bus.call(b"peer2", "join", group="workflow:r1")
    bus.advance(5)
    assert row(bus, b"peer2")["dormant"] is False
    bus.advance(10)
    assert row(bus, b"peer2")["dormant"] is True
    bus.commit()
    bus.restart()
    bus.hello("peer3")
    bus.call(b"peer3", "join", group="workflow:r1")
    assert row(bus, b"peer3")["dormant"] is True


def test_a_run_restored_with_its_host_live_at_the_crash_gets_a_fresh_lease():
    bus, _, _ = leased_run()
    bus.commit()
    bus.restart()
    bus.hello("peer2")
    bus.call(b"peer2", "join", group="workflow:r1")
    bus.advance(LEASE - 1)
    assert row(bus, b"peer2")["dormant"] is False
    bus.advance(2)
    assert row(bus, b"peer2")["dormant"] is True
