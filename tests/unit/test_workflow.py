"""Workflow addressing and sticky delivery, driven through the engine."""

from broker.core import Persist
from broker.core.kernel.records import StickySaved
from schemas.protocol import envelope

from .harness import Bus, result_for

STAGES = [
    {"name": "plan", "id": "s-plan"},
    {"name": "review", "group": "reviewers", "children": [{"name": "deep"}]},
    {"name": "audit", "group": "auditors"},
    {"name": "ask-user", "kind": "prompt"},
    {"name": "lint", "kind": "tool"},
    {"name": "ui", "kind": "ui", "id": "ui-1"},
]


def hosted(**limits):
    bus = Bus(liveness_s=1e9, **limits)
    bus.hello("host")
    assert bus.workflow(b"host", "register_run", runId="r1", stages=STAGES)["ok"]
    return bus


def send(bus, identity, to, message="m", msg_id=None):
    return bus.call(identity, "send", msg_id=msg_id, to=to, message=message)


def queue(bus, identity, to, message="m", msg_id=None):
    """Send to a path and let the store commit; returns the deferred answer."""
    msg_id = msg_id or f"q-{message}-{len(bus.engine.state.ids)}"
    out = bus.feed(identity, envelope("call", id=msg_id, action="send", to=to, message=message))
    answers = [c.env for c in out if getattr(c, "env", {}).get("re") == msg_id]
    if answers:
        return {k: v for k, v in answers[0].items() if k not in ("v", "k", "re")}
    return result_for(bus.commit(), identity, msg_id)


def stage(bus, name, path, **fields):
    return bus.hello(name, sessionKind="stage", stage=path, **fields)


def test_register_run_joins_the_invocation_group_and_lists_agent_stages():
    bus = Bus()
    bus.hello("host")
    result = bus.workflow(b"host", "register_run", runId="r1", stages=STAGES)
    assert result["group"] == "workflow:r1" and "workflow:r1" in result["groups"]
    assert result["stages"] == ["workflow:r1/plan", "workflow:r1/review",
                                "workflow:r1/review/deep", "workflow:r1/audit"]


def test_queued_answer_waits_for_the_commit():
    bus = hosted()
    out = bus.feed(b"host", envelope("call", id="q1", action="send", to="workflow:r1/plan", message="m"))
    assert [c for c in out if getattr(c, "env", {}).get("re") == "q1"] == []
    assert any(isinstance(c, Persist) and isinstance(c.record, StickySaved) and c.ticket for c in out)
    answer = result_for(bus.commit(), b"host", "q1")
    assert answer["queued"] is True and answer["position"] == 1


def test_queue_positions_are_fifo_per_target():
    bus = hosted()
    assert [queue(bus, b"host", "workflow:r1/plan", f"m{n}")["position"] for n in range(3)] == [1, 2, 3]
    assert queue(bus, b"host", "workflow:r1/review", "x")["position"] == 1


def test_valid_path_outside_the_known_set_is_queued_and_flagged():
    bus = hosted()
    answer = queue(bus, b"host", "workflow:r1/later/child")
    assert answer["queued"] and answer["notInKnownSet"] is True


def test_51st_queued_message_is_refused_and_none_evicted():
    bus = hosted()
    for n in range(50):
        queue(bus, b"host", "workflow:r1/plan", f"m{n}")
    answer = send(bus, b"host", "workflow:r1/plan", "m50")
    assert answer["code"] == "queue_full"
    assert answer["error"] == "Pending stage message queue is full (limit 50)"
    stage(bus, "plan", "workflow:r1/plan")
    assert [m["message"] for m in bus.sends(b"plan", "msg")] == [f"m{n}" for n in range(50)]


def test_limit_counts_writes_not_yet_committed():
    bus = hosted()
    for n in range(50):
        bus.feed(b"host", envelope("call", id=f"q{n}", action="send", to="workflow:r1/plan", message="m"))
    assert send(bus, b"host", "workflow:r1/plan")["code"] == "queue_full"


def test_starting_stage_gets_its_entries_first_in_fifo_order_marked_pre_start():
    bus = hosted()
    bus.now = 2000.0
    queue(bus, b"host", "workflow:r1/plan", "first")
    queue(bus, b"host", "workflow:r1/**", "broadcast")
    queue(bus, b"host", "workflow:r1/review", "not for plan")
    bus.now = 2100.0
    welcome = stage(bus, "plan", "workflow:r1/plan")
    assert welcome["groups"] == ["workflow:r1"]
    msgs = bus.sends(b"plan", "msg")
    assert [m["message"] for m in msgs] == ["first", "broadcast"]
    assert all(m["receivedBeforeStart"] and m["sentAt"] == 2000.0 and m["fromName"] == "host" for m in msgs)
    kinds = [c.env["k"] for c in bus.last if getattr(c, "identity", None) == b"plan"]
    assert kinds[0] == "result" and kinds[1:] == ["msg", "msg"]


def test_send_to_running_stage_delivers_now_without_queueing():
    bus = hosted()
    stage(bus, "plan", "workflow:r1/plan")
    answer = send(bus, b"host", "workflow:r1/plan", "now")
    assert answer["delivered"] is True and answer["target"] == "workflow:r1/plan"
    assert [m["message"] for m in bus.sends(b"plan", "msg")] == ["now"]


def test_stage_id_spelling_reaches_the_same_stage():
    bus = hosted()
    stage(bus, "plan", "workflow:r1/plan")
    assert send(bus, b"host", "workflow:r1/s-plan", "by id")["delivered"] is True


def test_pattern_reaches_live_stages_now_and_stays_for_future_ones():
    bus = hosted()
    stage(bus, "plan", "workflow:r1/plan")
    answer = queue(bus, b"host", "workflow:r1/**", "everyone")
    assert answer["queued"] and len(answer["deliveredTo"]) == 1
    assert [m["message"] for m in bus.sends(b"plan", "msg")] == ["everyone"]
    stage(bus, "deep", "workflow:r1/review/deep")
    assert [m["message"] for m in bus.sends(b"deep", "msg")] == ["everyone"]


def test_same_transcript_reconnect_gets_no_acknowledged_duplicates():
    bus = hosted()
    queue(bus, b"host", "workflow:r1/plan", "once")
    stage(bus, "plan", "workflow:r1/plan", transcript="t1")
    (msg,) = bus.sends(b"plan", "msg")
    bus.feed(b"plan", envelope("received", ids=[msg["id"]]))
    bus.feed(b"plan", envelope("bye"))
    stage(bus, "plan", "workflow:r1/plan", identity=b"plan-again", transcript="t1")
    assert bus.sends(b"plan-again", "msg") == []


def test_replacement_session_gets_retained_entries_again():
    bus = hosted()
    queue(bus, b"host", "workflow:r1/plan", "retained")
    stage(bus, "plan", "workflow:r1/plan", transcript="t1")
    msg = bus.sends(b"plan", "msg")[0]
    bus.feed(b"plan", envelope("received", ids=[msg["id"]]))
    bus.feed(b"plan", envelope("bye"))
    stage(bus, "plan", "workflow:r1/plan", identity=b"plan-new", transcript="t2")
    assert [m["message"] for m in bus.sends(b"plan-new", "msg")] == ["retained"]


def test_non_agent_nodes_are_refused_by_path_name_and_id():
    bus = hosted()
    for to in ("workflow:r1/lint", "workflow:r1/ask-user", "workflow:r1/ui-1", "workflow:r1/lint/x",
               "lint", "ask-user", "ui-1"):
        assert send(bus, b"host", to)["code"] == "non_agent_target", to
    assert not bus.engine.state.sticky.by_message


def test_patterns_never_deliver_to_non_agent_nodes():
    bus = hosted()
    answer = queue(bus, b"host", "workflow:r1/*", "all")
    assert answer["queued"] and "notInKnownSet" not in answer
    rows = bus.call(b"host", "list")["workflows"][0]["stages"]
    assert {r["name"] for r in rows} == {"plan", "review", "deep", "audit"}


def test_ask_to_pending_future_or_pattern_targets_is_unsupported():
    bus = hosted()
    for to in ("workflow:r1/plan", "workflow:r1/nobody", "workflow:r1/*"):
        assert bus.call(b"host", "ask", to=to, message="?")["code"] == "pending_stage_ask_unsupported"


def test_ask_reaches_a_running_stage_in_an_owned_subgroup():
    bus = hosted()
    welcome = stage(bus, "reviewer", "workflow:r1/review")
    assert welcome["groups"] == ["workflow:r1/reviewers"]
    bus.feed(b"host", envelope("call", id="a1", action="ask", to="workflow:r1/review", message="ok?"))
    assert bus.sends(b"reviewer", "msg")[0]["expectsReply"] is True


def test_ask_by_a_name_shared_by_live_stages_is_ambiguous():
    bus = hosted()
    bus.workflow(b"host", "add_stages", runId="r1", parent="review",
                 stages=[{"name": "deep2", "id": "deep"}])
    stage(bus, "deep-a", "workflow:r1/review/deep")
    stage(bus, "deep-b", "workflow:r1/review/deep2")
    result = bus.call(b"host", "ask", to="workflow:r1/review/deep", message="?")
    assert result["code"] == "ambiguous_stage"


def test_subgroup_members_cannot_reach_sibling_subgroups_or_gain_control_by_joining():
    bus = hosted()
    stage(bus, "reviewer", "workflow:r1/review")
    stage(bus, "auditor", "workflow:r1/audit")
    assert bus.call(b"reviewer", "list")["sessions"] == []
    bus.call(b"reviewer", "join", group="workflow:r1")
    result = send(bus, b"reviewer", "workflow:r1/plan")
    assert result["code"] == "workflow_different_group"
    assert result["error"] == ("Target workflow run is in a different intercom group; a "
                               "workflow stage cannot steer another run, nor its own run's "
                               "parent or sibling groups")
    assert bus.call(b"reviewer", "join", group="workflow:r1/auditors")["code"] == "workflow_different_group"


def test_a_session_without_control_is_told_to_join_the_invocation_group():
    bus = hosted()
    bus.hello("main")
    result = send(bus, b"main", "workflow:r1/plan")
    assert result["code"] == "workflow_different_group"
    assert result["error"] == ("Target workflow run is in a different intercom group; to steer "
                               'it, join its invocation group first: intercom({action: "join", '
                               'group: "workflow:r1"})')
    assert bus.call(b"main", "join", group="workflow:r1")["ok"]
    assert queue(bus, b"main", "workflow:r1/plan")["queued"] is True


def test_another_run_and_non_members_are_refused():
    bus = hosted()
    bus.hello("other-host")
    bus.workflow(b"other-host", "register_run", runId="r2", stages=[{"name": "x"}])
    assert send(bus, b"other-host", "workflow:r1/plan")["code"] == "workflow_different_group"
    bus.hello("stranger")
    assert send(bus, b"stranger", "workflow:r1/**")["code"] == "workflow_different_group"


def test_main_chat_that_joins_the_invocation_group_may_queue():
    bus = hosted()
    bus.hello("chat")
    bus.call(b"chat", "join", group="workflow:r1")
    assert queue(bus, b"chat", "workflow:r1/review/deep", "steer")["queued"] is True


def test_list_shows_stages_targets_counts_states_and_future_rows():
    bus = hosted()
    queue(bus, b"host", "workflow:r1/plan", "p")
    queue(bus, b"host", "workflow:r1/rev*", "pattern")
    queue(bus, b"host", "workflow:r1/someday", "later")
    stage(bus, "deep", "workflow:r1/review/deep")
    (run,) = bus.call(b"host", "list")["workflows"]
    rows = {r["name"]: r for r in run["stages"]}
    assert rows["plan"]["label"] == "PENDING" and rows["plan"]["target"] == "workflow:r1/plan"
    assert rows["plan"]["queued"] == 1
    assert rows["deep"]["label"] == "RUNNING"
    assert [s["state"] for s in rows["review"]["deliveryStates"]] == ["queued"]
    assert {f["target"]: f["queued"] for f in run["future"]} == {"workflow:r1/rev*": 1, "workflow:r1/someday": 1}


def test_delivery_states_move_from_receipt_unverified_to_delivered():
    bus = hosted()
    queue(bus, b"host", "workflow:r1/plan", "p")
    stage(bus, "plan", "workflow:r1/plan")

    def state():
        (run,) = bus.call(b"host", "list")["workflows"]
        return next(r for r in run["stages"] if r["name"] == "plan")["deliveryStates"][0]["state"]

    (msg,) = bus.sends(b"plan", "msg")
    assert msg["ackRequired"] is True
    assert state() == "receipt-unverified"
    bus.feed(b"plan", envelope("received", ids=[msg["id"]]))
    assert state() == "delivered"


def test_end_run_notifies_senders_of_never_delivered_entries_only():
    bus = hosted()
    queue(bus, b"host", "workflow:r1/plan", "delivered", msg_id="m-delivered")
    queue(bus, b"host", "workflow:r1/audit", "stranded", msg_id="m-stranded")
    stage(bus, "plan", "workflow:r1/plan")
    result = bus.workflow(b"host", "end_run", runId="r1")
    assert result["undeliverable"] == 1
    events = bus.sends(b"host", "event")
    assert [(e["event"], e["messageId"]) for e in events] == [("undeliverable", "m-stranded")]
    assert bus.call(b"host", "list").get("workflows") is None


def test_stage_skipped_before_start_settles_its_exact_entries():
    bus = hosted()
    queue(bus, b"host", "workflow:r1/audit", "stranded", msg_id="m1")
    queue(bus, b"host", "workflow:r1/*", "pattern", msg_id="m2")
    result = bus.workflow(b"host", "stage_state", runId="r1", stage="audit", state="skipped")
    assert result["state"] == "skipped"
    assert [e["messageId"] for e in bus.sends(b"host", "event")] == ["m1"]


def test_terminal_stage_state_never_changes_and_only_the_host_may_change_it():
    bus = hosted()
    bus.workflow(b"host", "stage_state", runId="r1", stage="plan", state="completed")
    assert bus.workflow(b"host", "stage_state", runId="r1", stage="plan", state="RUNNING")["code"] == "invalid_transition"
    bus.hello("intruder")
    assert bus.workflow(b"intruder", "end_run", runId="r1")["code"] == "not_run_host"


def test_entries_survive_a_restart_from_the_persisted_rows():
    bus = hosted()
    bus.feed(b"host", envelope("call", id="k1", action="send", to="workflow:r1/plan", message="kept"))
    bus.commit()
    bus.restart()
    stage(bus, "plan", "workflow:r1/plan")     # the grant the host got before the restart
    assert [m["message"] for m in bus.sends(b"plan", "msg")] == ["kept"]


def test_invocation_controller_hears_about_stages_joining_owned_subgroups_one_way():
    bus = hosted()
    stage(bus, "reviewer", "workflow:r1/review")
    assert bus.events(b"host") == [("session_joined", "reviewer")]
    assert bus.events(b"reviewer") == []
    bus.feed(b"reviewer", envelope("bye"))
    assert bus.events(b"host") == [("session_left", "reviewer")]


def test_queued_answer_names_its_message_id():
    bus = hosted()
    assert queue(bus, b"host", "workflow:r1/plan", "m", msg_id="mine")["messageId"] == "mine"


def test_stage_cannot_send_to_its_own_path_or_hear_its_own_broadcast():
    bus = hosted()
    stage(bus, "plan", "workflow:r1/plan")
    stage(bus, "deep", "workflow:r1/review/deep")
    assert send(bus, b"plan", "workflow:r1/plan")["code"] == "self_target"
    answer = queue(bus, b"plan", "workflow:r1/**", "hello all")
    assert answer["deliveredTo"] == [bus.engine.registry.by_identity[b"deep"].id]


def test_ended_stage_without_admission_shows_stage_terminal():
    bus = hosted()
    queue(bus, b"host", "workflow:r1/plan", "p")
    stage(bus, "plan", "workflow:r1/plan")
    bus.feed(b"plan", envelope("bye"))
    bus.workflow(b"host", "stage_state", runId="r1", stage="plan", state="completed")
    (run,) = bus.call(b"host", "list")["workflows"]
    row = next(r for r in run["stages"] if r["name"] == "plan")
    assert [s["state"] for s in row["deliveryStates"]] == ["stage-terminal"]


def test_queued_send_retried_after_a_restart_is_not_queued_twice():
    bus = hosted()
    bus.feed(b"host", envelope("call", id="k1", action="send", to="workflow:r1/plan", message="once"))
    first = result_for(bus.commit(), b"host", "k1")
    host = bus.engine.registry.by_identity[b"host"]
    host_id, token = host.id, host.token
    bus.restart()
    bus.hello("host", identity=b"host2", sessionId=host_id, token=token, groups=["default", "workflow:r1"],
              homeGroup="default")
    out = bus.feed(b"host2", envelope("call", id="k1", action="send", to="workflow:r1/plan",
                                      message="once"))
    assert result_for(out, b"host2", "k1") == first
    assert not any(isinstance(c, Persist) and isinstance(c.record, StickySaved) for c in out)
    assert len(list(bus.engine.state.sticky.entries("r1"))) == 1


def test_a_connecting_session_cannot_claim_a_run_subgroup():
    bus = hosted()
    stage(bus, "reviewer", "workflow:r1/review")
    assert bus.hello("mallory", group="workflow:r1/reviewers")["code"] == "workflow_different_group"
    assert bus.hello("mallory", identity=b"m2", homeGroup="default",
                     groups=["default", "workflow:r1/reviewers"])["code"] == "workflow_different_group"
    assert bus.hello("steerer", groups=["workflow:r1", "workflow:r1/reviewers"],
                     homeGroup="default")["ok"] is True


def test_pipelined_queued_send_retried_after_a_restart_is_answered_queued_with_its_position():
    bus = hosted()
    queue(bus, b"host", "workflow:r1/plan", "first")
    pipelined = envelope("sends", to="workflow:r1/plan", ids=["p1"], messages=["second"])
    assert [c for c in bus.feed(b"host", pipelined) if getattr(c, "env", {}).get("k") == "acks"] == []
    first = result_for(bus.commit(), b"host", "p1")
    assert first["queued"] is True and first["position"] == 2
    host = bus.engine.registry.by_identity[b"host"]
    host_id, token = host.id, host.token
    bus.restart()
    bus.hello("host", identity=b"host2", sessionId=host_id, token=token, groups=["default", "workflow:r1"],
              homeGroup="default")
    out = bus.feed(b"host2", pipelined)
    assert result_for(out, b"host2", "p1") == first
    assert not [c for c in out if getattr(c, "env", {}).get("k") == "acks"]
    assert len(list(bus.engine.state.sticky.entries("r1"))) == 2


def test_a_send_to_an_unstarted_default_group_stage_is_refused_and_nothing_queued():
    bus = hosted()
    bus.workflow(b"host", "add_stages", runId="r1", stages=[{"name": "escape", "group": "default"}])
    result = send(bus, b"host", "workflow:r1/escape")
    assert result["code"] == "stage_not_deliverable" and "before it starts" in result["error"]
    assert bus.persisted() == [] and not bus.engine.state.sticky.by_message


def test_register_run_is_answered_only_once_the_run_is_committed():
    bus = Bus(liveness_s=1e9)
    bus.hello("host")
    out = bus.feed(b"host", envelope("workflow", id="reg", op="register_run", runId="r9",
                                     stages=[{"name": "plan"}]))
    assert [c for c in out if isinstance(c, Persist) and c.ticket]          # its write waits
    assert not [c for c in out if getattr(c, "identity", None) == b"host"
                and c.env.get("re") == "reg"]
    answer = result_for(bus.commit(), b"host", "reg")
    assert (answer["ok"], answer["runId"]) == (True, "r9")
    bus.restart()                                   # a kill -9 right after the answer
    assert "r9" in bus.engine.state.runs


def test_register_run_whose_commit_failed_is_refused():
    bus = Bus(liveness_s=1e9)
    bus.hello("host")
    bus.feed(b"host", envelope("workflow", id="reg", op="register_run", runId="r9",
                               stages=[{"name": "plan"}]))
    answer = result_for(bus.fail("store_unavailable"), b"host", "reg")
    assert (answer["ok"], answer["code"]) == (False, "store_unavailable")


def test_stage_rows_start_with_the_canonical_path_or_the_id_when_there_is_none():
    bus = Bus(liveness_s=1e9)
    bus.hello("host")
    stages = [{"name": "plan"}, {"name": "quiet", "id": "s-quiet", "intercom": False}]
    assert bus.workflow(b"host", "register_run", runId="r1", stages=stages)["ok"]
    (run,) = bus.call(b"host", "list")["workflows"]
    firsts = {r["name"]: next(iter(r.items())) for r in run["stages"]}
    assert firsts == {"plan": ("target", "workflow:r1/plan"), "quiet": ("id", "s-quiet")}
