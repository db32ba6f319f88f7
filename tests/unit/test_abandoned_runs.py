"""A run whose host left, met again: register_run by another session says what the run
is and what can be done; the broker's operator (and nobody else) ends it; a send to a
run that does not exist gets no advice to join its group."""

from __future__ import annotations

from schemas.protocol import envelope

from tests.unit.harness import Bus, result_for

LEASE_S = 30.0
OPERATOR_PEER = "Peer-Address=/tmp/ic/broker.sock"     # over ipc: a process of this host


def abandoned() -> Bus:
    """Run r1 registered by ``host``, which left; past its lease the run is dormant."""
    bus = Bus(host_lease_s=LEASE_S, liveness_s=1e9)
    bus.hello("host")
    assert bus.workflow(b"host", "register_run", runId="r1", stages=[{"name": "plan"}])["ok"]
    bus.feed(b"host", envelope("bye"))
    bus.advance(1.0)
    bus.advance(LEASE_S + 1)
    assert bus.engine.state.runs["r1"].dormant
    return bus


def end_run(bus: Bus, identity: bytes, run_id: str = "r1") -> dict:
    return result_for(bus.feed(identity, envelope("end_run", id="e1", runId=run_id)),
                      identity, "e1")


def test_register_run_of_a_dormant_run_says_since_when_who_hosted_it_and_what_to_do():
    bus = abandoned()
    bus.hello("newcomer")
    refused = bus.workflow(b"newcomer", "register_run", runId="r1", stages=[])
    assert refused["code"] == "not_run_host"
    text = refused["error"]
    assert "dormant since" in text and " UTC" in text
    assert bus.engine.state.runs["r1"].last_host_id[:8] in text
    assert "end-run r1" in text and "take_over" in text and "another run id" in text


def test_register_run_of_a_run_with_a_live_host_says_so():
    bus = Bus()
    bus.hello("host")
    bus.workflow(b"host", "register_run", runId="r1", stages=[])
    bus.hello("other")
    refused = bus.workflow(b"other", "register_run", runId="r1", stages=[])
    assert refused["code"] == "not_run_host" and "live" in refused["error"]


def test_the_operator_ends_a_dormant_run_and_the_id_can_be_registered_again():
    bus = abandoned()
    bus.hello("ops", identity=b"ops", sessionKind="control", peer=OPERATOR_PEER)
    answer = end_run(bus, b"ops")
    assert answer == {"ok": True, "runId": "r1", "ended": True, "undeliverable": 0}
    assert "r1" not in bus.engine.state.runs
    bus.hello("newcomer")
    assert bus.workflow(b"newcomer", "register_run", runId="r1", stages=[])["ok"]


def test_only_the_operator_ends_a_run_and_never_one_with_a_live_host():
    bus = abandoned()
    bus.hello("remote", identity=b"remote", sessionKind="control")        # not its host's
    assert end_run(bus, b"remote")["code"] == "operator_only"
    bus.hello("someone")
    assert end_run(bus, b"someone")["code"] == "operator_only"
    live = Bus()
    live.hello("host")
    live.workflow(b"host", "register_run", runId="r2", stages=[])
    live.hello("ops", identity=b"ops", sessionKind="control", peer=OPERATOR_PEER)
    assert end_run(live, b"ops", "r2")["code"] == "run_has_host"
    assert end_run(live, b"ops", "nope")["code"] == "unknown_run"


def test_a_send_to_a_run_nobody_registered_gets_no_advice_to_join_it():
    bus = Bus()
    bus.hello("alice")
    refused = bus.call(b"alice", "send", to="workflow:ghost/plan", message="hi")
    assert refused["code"] == "workflow_different_group" and "join" not in refused["error"]


def test_a_send_to_a_dormant_run_of_another_group_says_its_host_left():
    bus = abandoned()
    bus.hello("alice")
    refused = bus.call(b"alice", "send", to="workflow:r1/plan", message="hi")
    assert refused["code"] == "workflow_different_group"
    assert "host left" in refused["error"] and "join" in refused["error"]
