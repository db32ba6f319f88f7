"""Workflow queues and views, driven through the engine: one queue per stage whatever
its spelling, the evidence a stage that ended unstarted keeps, and group peeks that
never cross workflow isolation."""

from schemas.protocol import envelope

from .harness import result_for
from .test_workflow import hosted, queue, send, stage


# -- a stage's name and id are one target ---------------------------------------------------

def test_name_and_id_spellings_share_one_fifo_positions_and_cap():
    bus = hosted()
    by_name = [queue(bus, b"host", "workflow:r1/plan", f"n{n}")["position"] for n in range(25)]
    by_id = [queue(bus, b"host", "workflow:r1/s-plan", f"i{n}")["position"] for n in range(25)]
    assert by_name + by_id == list(range(1, 51))
    assert send(bus, b"host", "workflow:r1/s-plan", "one more")["code"] == "queue_full"
    assert send(bus, b"host", "workflow:r1/plan", "one more")["code"] == "queue_full"


def test_mixed_spellings_of_a_nested_stage_share_its_queue():
    bus = hosted()
    bus.workflow(b"host", "add_stages", runId="r1", parent="plan", stages=[{"name": "step", "id": "s-step"}])
    spellings = ("workflow:r1/plan/step", "workflow:r1/s-plan/step", "workflow:r1/s-plan/s-step")
    assert [queue(bus, b"host", to, to)["position"] for to in spellings] == [1, 2, 3]
    (run,) = bus.call(b"host", "list")["workflows"]
    row = next(r for r in run["stages"] if r["name"] == "step")
    assert row["queued"] == 3 and run["future"] == []


def test_queued_answer_names_the_spelling_sent_with_the_stage_position():
    bus = hosted()
    queue(bus, b"host", "workflow:r1/plan", "first")
    answer = queue(bus, b"host", "workflow:r1/s-plan", "second")
    assert answer["target"] == "workflow:r1/s-plan" and answer["position"] == 2
    assert "notInKnownSet" not in answer


def test_list_does_not_show_a_stage_id_as_a_future_target():
    bus = hosted()
    queue(bus, b"host", "workflow:r1/s-plan", "by id")
    (run,) = bus.call(b"host", "list")["workflows"]
    assert run["future"] == []
    plan = next(r for r in run["stages"] if r["name"] == "plan")
    assert plan["queued"] == 1 and [s["target"] for s in plan["deliveryStates"]] == ["workflow:r1/s-plan"]


def test_a_stage_declared_later_joins_the_queue_of_its_other_spelling():
    bus = hosted()
    assert [queue(bus, b"host", "workflow:r1/s-later", f"i{n}")["position"] for n in range(30)] \
        == list(range(1, 31))
    bus.workflow(b"host", "add_stages", runId="r1", stages=[{"name": "later", "id": "s-later"}])
    assert queue(bus, b"host", "workflow:r1/later", "by name")["position"] == 31
    (run,) = bus.call(b"host", "list")["workflows"]
    assert run["future"] == []
    for n in range(19):
        queue(bus, b"host", "workflow:r1/later", f"n{n}")
    assert send(bus, b"host", "workflow:r1/s-later", "51st")["code"] == "queue_full"


def test_one_queue_per_stage_holds_across_a_restart():
    bus = hosted()
    for n in range(30):
        queue(bus, b"host", "workflow:r1/plan", f"n{n}")
    for n in range(10):
        queue(bus, b"host", "workflow:r1/s-plan", f"i{n}")
    host = bus.engine.registry.by_identity[b"host"]
    host_id, token = host.id, host.token
    bus.restart()
    bus.hello("host", identity=b"host2", sessionId=host_id, token=token, groups=["default", "workflow:r1"],
              homeGroup="default")
    assert queue(bus, b"host2", "workflow:r1/s-plan", "after")["position"] == 41
    for n in range(9):
        queue(bus, b"host2", "workflow:r1/plan", f"m{n}")
    assert send(bus, b"host2", "workflow:r1/plan", "51st")["code"] == "queue_full"
    stage(bus, "plan", "workflow:r1/plan")
    assert len(bus.sends(b"plan", "msg")) == 50


def test_places_held_for_commits_count_in_the_shared_queue():
    bus = hosted()
    for n in range(25):
        bus.feed(b"host", envelope("call", id=f"n{n}", action="send", to="workflow:r1/plan", message="m"))
    for n in range(25):
        bus.feed(b"host", envelope("call", id=f"i{n}", action="send", to="workflow:r1/s-plan", message="m"))
    assert send(bus, b"host", "workflow:r1/plan")["code"] == "queue_full"
    assert result_for(bus.commit(), b"host", "i24")["position"] == 50


# -- a stage that ended unstarted keeps its evidence ----------------------------------------

def test_failed_unstarted_stage_lists_its_never_delivered_entries_stage_terminal():
    bus = hosted()
    queue(bus, b"host", "workflow:r1/plan", "by name", msg_id="m-name")
    queue(bus, b"host", "workflow:r1/s-plan", "by id", msg_id="m-id")
    bus.workflow(b"host", "stage_state", runId="r1", stage="plan", state="failed")
    assert sorted(e["messageId"] for e in bus.sends(b"host", "event")) == ["m-id", "m-name"]
    (run,) = bus.call(b"host", "list")["workflows"]
    plan = next(r for r in run["stages"] if r["name"] == "plan")
    assert {s["messageId"]: s["state"] for s in plan["deliveryStates"]} == \
        {"m-name": "stage-terminal", "m-id": "stage-terminal"}
    assert plan["queued"] == 0 and run["future"] == []


def test_settled_entries_are_not_reported_again_when_the_run_ends_even_after_a_restart():
    bus = hosted()
    queue(bus, b"host", "workflow:r1/plan", "stranded", msg_id="m1")
    bus.workflow(b"host", "stage_state", runId="r1", stage="plan", state="failed")
    bus.commit()
    host = bus.engine.registry.by_identity[b"host"]
    host_id, token = host.id, host.token
    bus.restart()
    bus.hello("host", identity=b"host2", sessionId=host_id, token=token, groups=["default", "workflow:r1"],
              homeGroup="default")
    (run,) = bus.call(b"host2", "list")["workflows"]
    plan = next(r for r in run["stages"] if r["name"] == "plan")
    assert [s["state"] for s in plan["deliveryStates"]] == ["stage-terminal"]
    result = bus.workflow(b"host2", "end_run", runId="r1")
    assert result["undeliverable"] == 0 and bus.sends(b"host2", "event") == []


# -- a group peek does not cross workflow isolation -----------------------------------------

def peeked(bus, identity, group):
    """Who a read-only group filter shows, by name, and the count status gives."""
    names = [s["name"] for s in bus.call(identity, "list", group=group)["sessions"]]
    assert bus.call(identity, "status", group=group)["visibleSessions"] == len(names)
    return names


def test_subgroup_member_peeks_at_its_own_subgroup_but_not_a_sibling_or_the_run():
    bus = hosted()
    bus.workflow(b"host", "add_stages", runId="r1", stages=[{"name": "second", "group": "reviewers"}])
    stage(bus, "plan", "workflow:r1/plan")
    stage(bus, "reviewer", "workflow:r1/review")
    stage(bus, "second", "workflow:r1/second")
    stage(bus, "auditor", "workflow:r1/audit")
    assert peeked(bus, b"reviewer", "workflow:r1/reviewers") == ["second"]
    assert peeked(bus, b"reviewer", "workflow:r1/auditors") == []
    assert peeked(bus, b"reviewer", "workflow:r1") == []
    # a refused peek reads exactly like a group nobody is in
    assert bus.call(b"reviewer", "list", group="workflow:r1/auditors") == \
        {**bus.call(b"reviewer", "list", group="workflow:r1/nobody"), "group": "workflow:r1/auditors"}


def test_controller_peeks_into_every_subgroup_of_its_run():
    bus = hosted()
    stage(bus, "reviewer", "workflow:r1/review")
    stage(bus, "auditor", "workflow:r1/audit")
    assert peeked(bus, b"host", "workflow:r1/auditors") == ["auditor"]
    bus.hello("chat")
    assert peeked(bus, b"chat", "workflow:r1/auditors") == []
    bus.call(b"chat", "join", group="workflow:r1")
    assert peeked(bus, b"chat", "workflow:r1/auditors") == ["auditor"]


def test_subgroup_member_that_joins_the_invocation_group_sees_its_members_not_siblings():
    bus = hosted()
    stage(bus, "plan", "workflow:r1/plan")
    stage(bus, "reviewer", "workflow:r1/review")
    stage(bus, "auditor", "workflow:r1/audit")
    bus.call(b"reviewer", "join", group="workflow:r1")
    assert peeked(bus, b"reviewer", "workflow:r1") == ["host", "plan"]
    assert peeked(bus, b"reviewer", "workflow:r1/auditors") == []


def test_another_runs_stage_cannot_peek_into_a_run_a_plain_session_may():
    bus = hosted()
    stage(bus, "plan", "workflow:r1/plan")
    bus.hello("other-host")
    bus.workflow(b"other-host", "register_run", runId="r2", stages=[{"name": "x"}])
    stage(bus, "x", "workflow:r2/x")
    assert peeked(bus, b"x", "workflow:r1") == []
    bus.hello("chat")
    assert peeked(bus, b"chat", "workflow:r1") == ["host", "plan"]
    assert peeked(bus, b"x", "default") == ["host", "other-host", "chat"]
