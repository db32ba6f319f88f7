"""Sends to the background subagents of a dormant run's stages are held, then
delivered once when the subagent is back and its stage restored."""

from schemas.protocol import envelope

from .harness import Bus, result_for
from .test_workflow import stage

LEASE = 10.0


def dormant_run_with_subagent():
    bus = Bus(liveness_s=1e9, host_lease_s=LEASE)
    host = bus.hello("host")
    registered = bus.workflow(b"host", "register_run", runId="r1", stages=[{"name": "plan"}])
    planner = stage(bus, "plan", "workflow:r1/plan", atomicSessionId="atomic-plan")
    helper = bus.hello("helper", parent=planner["sessionId"], atomicSessionId="atomic-helper")
    bus.hello("peer")
    bus.call(b"peer", "join", group="workflow:r1")
    bus.commit()
    for who in (b"helper", b"plan", b"host"):
        bus.feed(who, envelope("bye"))
    bus.advance(LEASE + 1)
    return bus, host, planner, helper, registered


def send(bus, to, msg_id, message="hello"):
    bus.feed(b"peer", envelope("call", id=msg_id, action="send", to=to, message=message))
    return result_for(bus.commit(), b"peer", msg_id)


def test_sends_by_name_atomic_id_or_old_id_are_held_and_answered_queued():
    bus, _, _, helper, _ = dormant_run_with_subagent()
    for n, to in enumerate(["helper", "atomic-helper", helper["sessionId"]]):
        answer = send(bus, to, f"m{n}")
        assert answer["queued"] is True and answer["held"] is True, answer
        assert answer["position"] == n + 1
    asked = bus.call(b"peer", "ask", to="helper", message="?")
    assert asked["code"] == "run_dormant"


def test_held_messages_are_delivered_once_after_the_stage_and_subagent_are_back():
    bus, _, planner, helper, _ = dormant_run_with_subagent()
    send(bus, "helper", "m1", "first")
    send(bus, "helper", "m2", "second")
    # the subagent comes back first: its stage is not restored yet, nothing is delivered
    bus.hello("helper", identity=b"helper2", sessionId=helper["sessionId"], token=helper["token"],
              atomicSessionId="atomic-helper")
    assert bus.sends(b"helper2", "msg") == []
    stage(bus, "plan", "workflow:r1/plan", identity=b"plan2", atomicSessionId="atomic-plan")
    got = [m for m in bus.last if getattr(m, "identity", None) == b"helper2"
           and m.env.get("k") == "msg"]
    assert [m.env["message"] for m in got] == ["first", "second"]
    assert all(m.env["held"] is True for m in got)
    bus.commit()
    bus.feed(b"helper2", envelope("bye"))
    again = bus.hello("helper", identity=b"helper3", sessionId=helper["sessionId"],
                      token=helper["token"])
    assert again["ok"] and bus.sends(b"helper3", "msg") == []      # once only


def test_holds_survive_a_restart():
    bus, _, _, helper, _ = dormant_run_with_subagent()
    send(bus, "helper", "m1", "kept")
    bus.restart()
    stage(bus, "plan", "workflow:r1/plan", identity=b"plan2")
    bus.hello("helper", identity=b"helper2", sessionId=helper["sessionId"], token=helper["token"])
    assert [m["message"] for m in bus.sends(b"helper2", "msg")] == ["kept"]


def test_a_session_that_shares_no_group_cannot_reach_a_held_subagent():
    bus, _, _, _, _ = dormant_run_with_subagent()
    bus.hello("stranger", group="elsewhere")
    answer = bus.call(b"stranger", "send", to="helper", message="x")
    assert answer["ok"] is False and answer["code"] == "target_not_found"


def test_a_live_run_does_not_hold():
    bus = Bus(liveness_s=1e9, host_lease_s=LEASE)
    bus.hello("host")
    bus.workflow(b"host", "register_run", runId="r1", stages=[{"name": "plan"}])
    planner = stage(bus, "plan", "workflow:r1/plan")
    bus.hello("helper", parent=planner["sessionId"])
    bus.feed(b"helper", envelope("bye"))
    assert bus.call(b"host", "send", to="helper", message="x")["code"] == "target_not_found"


def test_a_stage_whose_saved_session_cannot_be_read_has_no_held_subagents():
    bus, host, _, helper, _ = dormant_run_with_subagent()
    assert send(bus, "helper", "m1", "first")["held"] is True
    # Its host comes back and cannot read the stage's saved session: the subagent will
    # not be restored, so what waits for it is reported, and nothing more is held.
    bus.hello("host", identity=b"host2", sessionId=host["sessionId"], token=host["token"])
    bus.commit()
    answer = bus.workflow(b"host2", "stage_state", runId="r1", stage="plan", state="RUNNING",
                          savedSession="unreadable")
    assert answer["ok"], answer
    (notice,) = [e for e in bus.sends(b"peer", "event") if e["event"] == "undeliverable"]
    assert (notice["messageId"], notice["target"]) == ("m1", "helper")
    assert bus.engine.state.runs["r1"].held == {}
    assert bus.engine.state.runs["r1"].node_by_key("plan").unreadable
    refused = bus.workflow(b"host2", "stage_state", runId="r1", stage="plan", state="RUNNING",
                           savedSession="lost")
    assert refused["code"] == "invalid_params"
    assert send(bus, "workflow:r1/plan", "m2", "to the stage itself")["ok"]   # its own route
