"""Authority is granted, never claimed: stage grants, child grants, reclaim secrets."""

from schemas.protocol import envelope

from .harness import Bus, result_for

STAGES = [{"name": "plan"}, {"name": "review", "group": "reviewers"}]


def hosted():
    bus = Bus(liveness_s=1e9)
    bus.hello("host")
    result = bus.workflow(b"host", "register_run", runId="r1", stages=STAGES)
    return bus, result


def queue(bus, message):
    bus.feed(b"host", envelope("call", id=f"q-{message}", action="send", to="workflow:r1/plan",
                               message=message))
    bus.commit()


def test_register_run_returns_a_grant_for_every_agent_stage():
    _, result = hosted()
    assert set(result["grants"]) == {"workflow:r1/plan", "workflow:r1/review"}
    assert len(set(result["grants"].values())) == 2


def test_a_stage_without_a_grant_is_refused_and_gets_nothing_queued():
    bus, _ = hosted()
    queue(bus, "secret plan")
    refused = bus.hello("mallory", sessionKind="stage", stage="workflow:r1/plan", grant=None)
    assert refused["code"] == "grant_required"
    assert bus.sends(b"mallory", "msg") == []


def test_a_grant_for_another_stage_or_run_is_invalid():
    bus, result = hosted()
    other = bus.workflow(b"host", "register_run", runId="r2", stages=[{"name": "plan"}])
    for grant in (result["grants"]["workflow:r1/review"], other["grants"]["workflow:r2/plan"], "s1.x"):
        refused = bus.hello("mallory", sessionKind="stage", stage="workflow:r1/plan", grant=grant)
        assert refused["code"] == "invalid_grant"


def test_the_launched_stage_binds_with_its_grant_and_a_replacement_may_reuse_it():
    bus, result = hosted()
    queue(bus, "retained")
    grant = result["grants"]["workflow:r1/plan"]
    assert bus.hello("plan", sessionKind="stage", stage="workflow:r1/plan", grant=grant,
                     transcript="t1")["ok"]
    assert [m["message"] for m in bus.sends(b"plan", "msg")] == ["retained"]
    bus.feed(b"plan", envelope("bye"))
    assert bus.hello("plan-2", sessionKind="stage", stage="workflow:r1/plan", grant=grant,
                     transcript="t2")["ok"]
    assert [m["message"] for m in bus.sends(b"plan-2", "msg")] == ["retained"]


def test_a_revoked_or_terminal_stage_grant_stops_working():
    bus, result = hosted()
    assert bus.workflow(b"host", "revoke_stage", runId="r1", stage="plan")["revoked"] is True
    refused = bus.hello("plan", sessionKind="stage", stage="workflow:r1/plan",
                        grant=result["grants"]["workflow:r1/plan"])
    assert refused["code"] == "invalid_grant"
    bus.workflow(b"host", "stage_state", runId="r1", stage="review", state="completed")
    refused = bus.hello("review", sessionKind="stage", stage="workflow:r1/review",
                        grant=result["grants"]["workflow:r1/review"])
    assert refused["code"] == "invalid_grant"


def test_only_the_host_revokes_a_stage_grant():
    bus, _ = hosted()
    bus.hello("mallory")
    assert bus.workflow(b"mallory", "revoke_stage", runId="r1", stage="plan")["code"] == "not_run_host"


def test_stage_grants_survive_a_broker_restart():
    bus, result = hosted()
    bus.commit()
    bus.restart()
    assert bus.hello("plan", sessionKind="stage", stage="workflow:r1/plan",
                     grant=result["grants"]["workflow:r1/plan"])["ok"]


def test_a_run_registered_again_after_it_ended_gets_new_grants():
    bus, first = hosted()
    bus.workflow(b"host", "end_run", runId="r1")
    again = bus.workflow(b"host", "register_run", runId="r1", stages=STAGES)
    assert again["grants"]["workflow:r1/plan"] != first["grants"]["workflow:r1/plan"]
    refused = bus.hello("plan", sessionKind="stage", stage="workflow:r1/plan",
                        grant=first["grants"]["workflow:r1/plan"])
    assert refused["code"] == "invalid_grant"


def test_claiming_a_parent_without_its_grant_is_refused():
    bus = Bus()
    victim = bus.hello("victim", group="private")
    assert bus.hello("impostor", parent=victim["sessionId"], grant=None)["code"] == "grant_required"
    assert bus.hello("impostor", parent=victim["sessionId"], grant="c1.00.ff")["code"] == "invalid_grant"


def test_a_grant_from_one_launcher_does_not_make_another_the_parent():
    bus = Bus()
    bus.hello("mine")
    victim = bus.hello("victim", group="private")
    grant = bus.grant_child(b"mine")
    assert bus.hello("child", parent=victim["sessionId"], grant=grant)["code"] == "invalid_grant"


def test_a_granted_child_inherits_the_group_and_reaches_its_supervisor():
    bus = Bus()
    launcher = bus.hello("launcher", group="private")
    grant = bus.grant_child(b"launcher")
    child = bus.hello("child", parent=launcher["sessionId"], grant=grant, group=None)
    assert child["ok"] and child["homeGroup"] == "private" and child["parent"] == launcher["sessionId"]
    bus.feed(b"child", envelope("supervisor", id="s1", message="which way?"))
    assert [m["message"] for m in bus.sends(b"launcher", "msg")] == ["which way?"]


def test_joining_a_group_never_makes_a_supervisor():
    bus = Bus()
    bus.hello("victim", group="private")
    bus.hello("other")
    bus.call(b"other", "join", group="private")
    bus.feed(b"other", envelope("supervisor", id="s1", message="hi"))
    assert result_for(bus.last, b"other", "s1")["code"] == "not_supervisor"


def test_a_dormant_run_goes_back_only_to_its_host_not_to_its_atomic_session_id():
    bus = Bus(liveness_s=1e9)
    bus.hello("host", atomicSessionId="atomic-1")
    bus.workflow(b"host", "register_run", runId="r1", stages=STAGES)
    bus.feed(b"host", envelope("bye"))
    bus.hello("mallory", atomicSessionId="atomic-1")
    assert bus.workflow(b"mallory", "register_run", runId="r1", stages=[])["code"] == "not_run_host"
    assert bus.workflow(b"mallory", "stage_state", runId="r1", stage="plan",
                        state="failed")["code"] == "not_run_host"


def test_a_child_grant_survives_a_broker_restart():
    bus = Bus()
    launcher = bus.hello("launcher", group="private")
    grant = bus.grant_child(b"launcher")
    bus.commit()
    bus.restart()
    bus.hello("launcher", identity=b"launcher-2", sessionId=launcher["sessionId"],
              token=launcher["token"], homeGroup="private", groups=["private"])
    child = bus.hello("child", parent=launcher["sessionId"], grant=grant, group=None)
    assert child["ok"] and child["parent"] == launcher["sessionId"] and child["homeGroup"] == "private"
