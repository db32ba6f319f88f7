"""Authority is granted, never claimed: stage grants, child grants, reclaim secrets."""

import pytest

from broker.core.sessions.grants import UsedGrants, child_grant, read_child
from schemas.errors import BusError
from schemas.limits import CHILD_GRANT_S
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


# -- a child grant admits one child, for a while ----------------------------------------------

def launched():
    bus = Bus(liveness_s=1e9)
    launcher = bus.hello("launcher", group="private")
    grant = bus.grant_child(b"launcher")
    child = bus.hello("child", parent=launcher["sessionId"], grant=grant, group=None)
    assert child["ok"]
    return bus, launcher, grant, child


def test_a_second_child_with_the_same_grant_is_refused_grant_used():
    bus, launcher, grant, _ = launched()
    assert bus.hello("second", parent=launcher["sessionId"], grant=grant)["code"] == "grant_used"
    bus.feed(b"child", envelope("bye"))
    assert bus.hello("third", parent=launcher["sessionId"], grant=grant)["code"] == "grant_used"


def test_a_child_grant_unused_past_its_expiry_is_refused_grant_expired():
    bus = Bus(liveness_s=1e9)
    launcher = bus.hello("launcher", group="private")
    grant = bus.grant_child(b"launcher")
    bus.advance(CHILD_GRANT_S + 1)
    refused = bus.hello("late", parent=launcher["sessionId"], grant=grant)
    assert refused["code"] == "grant_expired"
    fresh = bus.grant_child(b"launcher")
    assert bus.hello("on-time", parent=launcher["sessionId"], grant=fresh)["ok"]


def test_the_admitted_child_takes_its_id_back_with_its_grant_after_a_restart_and_the_expiry():
    bus, launcher, grant, child = launched()
    bus.commit()
    bus.restart()
    bus.advance(CHILD_GRANT_S + 1)
    back = bus.hello("child", identity=b"child-2", parent=launcher["sessionId"], grant=grant,
                     sessionId=child["sessionId"], token=child["token"], group=None)
    assert back["ok"] and back["reclaimed"] is True
    assert back["sessionId"] == child["sessionId"] and back["parent"] == launcher["sessionId"]
    # ... and again, with the reclaim secret that welcome gave it.
    bus.feed(b"child-2", envelope("bye"))
    again = bus.hello("child", identity=b"child-3", parent=launcher["sessionId"], grant=grant,
                      sessionId=child["sessionId"], token=back["token"], group=None)
    assert again["ok"] and again["sessionId"] == child["sessionId"]


def test_a_spent_grant_does_not_admit_another_session_reclaiming_its_own_id():
    bus, launcher, grant, _ = launched()
    mallory = bus.hello("mallory")
    bus.feed(b"mallory", envelope("bye"))
    refused = bus.hello("mallory", identity=b"mallory-2", parent=launcher["sessionId"], grant=grant,
                        sessionId=mallory["sessionId"], token=mallory["token"])
    assert refused["code"] == "grant_used"
    bus.advance(CHILD_GRANT_S + 1)
    refused = bus.hello("mallory", identity=b"mallory-3", parent=launcher["sessionId"], grant=grant,
                        sessionId=mallory["sessionId"], token=mallory["token"])
    assert refused["code"] == "grant_expired"


def test_a_hello_refused_after_the_grant_check_leaves_the_grant_unspent():
    bus = Bus(liveness_s=1e9)
    launcher = bus.hello("launcher", group="private")
    grant = bus.grant_child(b"launcher")
    refused = bus.hello("child", parent=launcher["sessionId"], grant=grant, sessionKind="stage",
                        stage="workflow:nope/plan")
    assert not refused["ok"] and refused["code"] not in ("grant_used", "grant_expired")
    assert bus.hello("child", parent=launcher["sessionId"], grant=grant)["ok"]


def test_the_used_grant_table_forgets_early_only_by_refusing_every_grant_expiring_no_later():
    key, used = b"k" * 32, UsedGrants(limit=2)
    first, second, third = (read_child(key, "L", child_grant(key, "L", wall)) for wall in (0, 10, 20))
    for grant in (first, second, third):
        used.check(grant, 30)
        used.use(grant, 30)
    assert len(used) == 2
    with pytest.raises(BusError) as refused:
        used.check(first, 30)          # forgotten, not expired: still never admits twice
    assert refused.value.code == "grant_expired"
    with pytest.raises(BusError) as refused:
        used.check(third, 30)
    assert refused.value.code == "grant_used"
    used.check(read_child(key, "L", child_grant(key, "L", 30)), 30)   # a newer one still works
