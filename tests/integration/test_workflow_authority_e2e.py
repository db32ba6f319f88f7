"""Workflow authority end to end: a real broker process, real sessions, real SQLite.

Covers the reference sections "Targeting Sessions and Pending Workflow Stages" and
"Groups" through the public client API: who may not reach a run or a node and with
which refusal, how a host (or a main chat that joins the invocation group) controls
stages in owned subgroups while siblings stay apart, and what ``intercom list``
shows of a run. Helpers and waiting rules: workflow_helpers.py.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.integration.conftest import module_connect_broker
from tests.integration.workflow_helpers import (
    RECEIVE_S,
    assert_refused,
    granted,
    host_run,
    ok,
    path,
    queue,
    run_row,
    send,
    send_for_id,
    stage_row,
    start_stage,
    states_by_id,
    sync,
    take,
)

# One broker for the module: each test's sessions are closed after it, its runs are its own.
broker = module_connect_broker()

DIFFERENT_GROUP_TEXT = "Target workflow run is in a different intercom group"


# -- 1. refusals ---------------------------------------------------------------------------------

NON_AGENT_STAGES = [
    {"name": "plan"},
    {"name": "ask-user", "id": "p-1", "kind": "prompt"},
    {"name": "lint", "id": "t-1", "kind": "tool", "children": [{"name": "inner", "kind": "prompt"}]},
    {"name": "confirm", "id": "u-1", "kind": "ui"},
]


@pytest.mark.parametrize("segment", ["ask-user", "p-1", "lint", "t-1", "confirm", "u-1"])
def test_send_to_non_agent_node_by_path_is_refused_and_never_queued(connect, segment):
    host, run = host_run(connect, NON_AGENT_STAGES)

    result = send(host, path(run, segment), "hello tool")

    assert_refused(result, "non_agent_target")
    row = run_row(host, run)
    assert row["future"] == [], row
    assert all(s["queued"] == 0 and s["deliveryStates"] == [] for s in row["stages"]), row


def test_send_through_non_agent_node_path_is_refused(connect):
    host, run = host_run(connect, NON_AGENT_STAGES)

    for target in (path(run, "lint", "inner"), path(run, "t-1", "inner"), path(run, "t-1", "new-child")):
        assert_refused(send(host, target, "nested"), "non_agent_target")
    assert run_row(host, run)["future"] == []


def test_send_by_plain_name_of_non_agent_node_is_refused(connect):
    host, run = host_run(connect, NON_AGENT_STAGES)

    for target in ("ask-user", "lint", "u-1"):
        assert_refused(send(host, target, "by name"), "non_agent_target")


def test_send_to_non_agent_connection_by_id_is_refused(connect):
    host, run = host_run(connect, NON_AGENT_STAGES)
    tool = start_stage(connect, run, "lint", name="lint-connection")

    for target in (tool.id, tool.id[:8]):
        assert_refused(send(host, target, "knowing the id"), "non_agent_target")


def test_non_agent_connection_gets_no_child_grant(connect):
    host, run = host_run(connect, NON_AGENT_STAGES)
    tool = start_stage(connect, run, "lint", name="lint-connection")

    assert_refused(tool.grant_child(), "non_agent_launcher")
    assert ok(host.grant_child())["grant"]


def test_child_of_a_tool_connection_gets_the_non_agent_refusal_from_its_supervisor(connect):
    # A session that took a child grant as a plain session and then its id back as a
    # tool node's connection: its child's supervisor ask must not reach it.
    host, run = host_run(connect, NON_AGENT_STAGES)
    launcher = connect("launcher")
    grant = ok(launcher.grant_child())["grant"]
    identity = {"sessionId": launcher.id, "reclaimSecret": launcher.token}
    launcher.close()
    tool = start_stage(connect, run, "lint", name="lint-connection", identity=identity)
    assert tool.id == identity["sessionId"] and tool.welcome["reclaimed"] is True, tool.welcome
    child = connect("child", parent=tool.id, grant=grant)

    assert_refused(child.contact_supervisor("which way?", timeout=5), "non_agent_target")
    sync(tool)
    assert tool.receive(0) is None


def test_patterns_never_deliver_to_non_agent_nodes(connect):
    host, run = host_run(connect, NON_AGENT_STAGES)
    queue(host, path(run, "**"), "to agents only")

    tool = start_stage(connect, run, "lint", name="lint-connection")
    sync(tool)                                   # anything handed over has arrived
    assert tool.receive(0) is None
    plan = start_stage(connect, run, "plan")
    (msg,) = take(plan, 1)
    assert msg["message"] == "to agents only"
    row = run_row(host, run)
    assert [s["name"] for s in row["stages"]] == ["plan"], row


def test_ask_to_pending_stage_is_unsupported(connect):
    host, run = host_run(connect, [{"name": "plan"}])

    assert_refused(host.intercom(action="ask", to=path(run, "plan"), message="?", timeout=5),
                   "pending_stage_ask_unsupported")
    assert run_row(host, run)["future"] == []
    assert stage_row(run_row(host, run), "plan")["queued"] == 0


def test_ask_to_pattern_is_unsupported_even_with_a_live_match(connect):
    host, run = host_run(connect, [{"name": "plan"}])
    start_stage(connect, run, "plan")

    for target in (path(run, "*"), path(run, "**"), path(run, "pl*")):
        assert_refused(host.intercom(action="ask", to=target, message="?", timeout=5),
                       "pending_stage_ask_unsupported")


def test_ask_to_future_path_is_unsupported(connect):
    host, run = host_run(connect, [{"name": "plan"}])

    assert_refused(host.intercom(action="ask", to=path(run, "later"), message="?", timeout=5),
                   "pending_stage_ask_unsupported")


def test_non_member_send_to_run_is_refused_as_different_group(connect):
    host, run = host_run(connect, [{"name": "plan"}])
    start_stage(connect, run, "plan")
    outsider = connect("outsider")

    for target in (path(run, "plan"), path(run, "**"), path(run, "later")):
        assert_refused(send(outsider, target, "let me in"), "workflow_different_group", DIFFERENT_GROUP_TEXT, starts=True)
    assert_refused(outsider.intercom(action="ask", to=path(run, "plan"), message="?", timeout=5),
                   "workflow_different_group", DIFFERENT_GROUP_TEXT, starts=True)
    assert "workflows" not in ok(outsider.intercom(action="list"))


def test_host_of_another_run_is_refused_as_different_group(connect):
    _host, run = host_run(connect, [{"name": "plan"}])
    other_host, _other = host_run(connect, [{"name": "plan"}], name="other-host")

    assert_refused(send(other_host, path(run, "plan"), "cross-run"),
                   "workflow_different_group", DIFFERENT_GROUP_TEXT, starts=True)


def test_stage_of_another_run_joining_the_invocation_group_is_refused(connect):
    _host, run = host_run(connect, [{"name": "plan"}])
    _other_host, other = host_run(connect, [{"name": "worker"}], name="other-host")
    worker = start_stage(connect, other, "worker")
    ok(worker.intercom(action="join", group=f"workflow:{run}"))

    assert_refused(send(worker, path(run, "plan"), "cross-run"),
                   "workflow_different_group", DIFFERENT_GROUP_TEXT, starts=True)
    assert_refused(send(worker, path(run, "**"), "cross-run"),
                   "workflow_different_group", DIFFERENT_GROUP_TEXT, starts=True)


def test_subgroup_stage_joining_the_invocation_group_cannot_queue_to_the_run(connect):
    host, run = host_run(connect, [{"name": "rev", "group": "reviewers"}, {"name": "plan"}])
    rev = start_stage(connect, run, "rev")
    assert rev.groups == [f"workflow:{run}/reviewers"], rev.groups
    joined = ok(rev.intercom(action="join", group=f"workflow:{run}"))
    assert f"workflow:{run}" in joined["groups"], joined

    for target in (path(run, "plan"), path(run, "**"), path(run, "later")):
        assert_refused(send(rev, target, "parent control?"), "workflow_different_group", DIFFERENT_GROUP_TEXT, starts=True)
    assert stage_row(run_row(host, run), "plan")["queued"] == 0


def test_stage_send_to_its_own_path_is_refused_as_self_target(connect):
    _host, run = host_run(connect, [{"name": "plan"}])
    plan = start_stage(connect, run, "plan")

    assert_refused(send(plan, path(run, "plan"), "note to self"), "self_target")
    sync(plan)
    assert plan.receive(0) is None


def test_stage_globstar_broadcast_is_not_echoed_to_the_sender(connect):
    _host, run = host_run(connect, [{"name": "plan"}, {"name": "impl"}])
    plan = start_stage(connect, run, "plan")
    impl = start_stage(connect, run, "impl")

    answer = queue(plan, path(run, "**"), "scope update from plan")

    assert answer["deliveredTo"] == [impl.id], answer
    (msg,) = take(impl, 1)
    assert msg["message"] == "scope update from plan" and msg["from"] == plan.id
    sync(plan)
    echoed = plan.receive(0)
    assert echoed is None, f"the sender received its own broadcast: {echoed}"


# -- 2. invocation control over owned subgroups ------------------------------------------------

def test_host_lists_and_sends_to_stage_in_owned_subgroup(connect):
    host, run = host_run(connect, [{"name": "rev", "group": "reviewers"}, {"name": "rev2", "group": "reviewers"}])
    rev = start_stage(connect, run, "rev")
    assert rev.home_group == f"workflow:{run}/reviewers"

    listing = ok(host.intercom(action="list"))
    assert rev.id in {s["id"] for s in listing["sessions"]}, listing
    row = run_row(host, run)
    assert stage_row(row, "rev")["target"] == path(run, "rev")
    live = ok(send(host, path(run, "rev"), "review now"))
    assert live.get("delivered") is True and live["to"] == rev.id, live
    queued = queue(host, path(run, "rev2"), "review later")
    assert queued["position"] == 1, queued

    (msg,) = take(rev, 1)
    assert msg["message"] == "review now"
    rev2 = start_stage(connect, run, "rev2")
    (later,) = take(rev2, 1)
    assert later["message"] == "review later" and later["receivedBeforeStart"] is True


def test_host_asks_stage_in_owned_subgroup_and_gets_the_reply(connect):
    host, run = host_run(connect, [{"name": "rev", "group": "reviewers"}])
    rev = start_stage(connect, run, "rev")

    with ThreadPoolExecutor(max_workers=1) as pool:
        pending = pool.submit(host.intercom, action="ask", to=path(run, "rev"),
                              message="verdict?", timeout=20)
        msg = rev.receive(RECEIVE_S)
        assert msg is not None and msg["expectsReply"] is True, msg
        ok(rev.intercom(action="reply", message="approve"))
        answer = pending.result(30)

    assert answer["ok"] is True and answer["message"] == "approve", answer
    assert answer["from"] == rev.id, answer


def test_main_chat_that_joins_invocation_group_controls_owned_subgroups(connect):
    _host, run = host_run(connect, [{"name": "rev", "group": "reviewers"}, {"name": "rev2", "group": "reviewers"}])
    lead = connect("lead")
    assert_refused(send(lead, path(run, "rev2"), "before joining"), "workflow_different_group")
    ok(lead.intercom(action="join", group=f"workflow:{run}"))
    rev = start_stage(connect, run, "rev")

    assert rev.id in {s["id"] for s in ok(lead.intercom(action="list"))["sessions"]}
    assert stage_row(run_row(lead, run), "rev")["target"] == path(run, "rev")
    assert queue(lead, path(run, "rev2"), "later")["position"] == 1
    assert ok(send(lead, path(run, "rev"), "now")).get("delivered") is True
    with ThreadPoolExecutor(max_workers=1) as pool:
        pending = pool.submit(lead.intercom, action="ask", to=path(run, "rev"), message="ok?", timeout=20)
        assert [m["message"] for m in take(rev, 2)] == ["now", "ok?"]
        ok(rev.intercom(action="reply", message="yes"))
        answer = pending.result(30)
    assert answer["ok"] is True and answer["message"] == "yes", answer


def test_subgroup_member_cannot_see_sibling_subgroup_in_list(connect):
    host, run = host_run(connect, [{"name": "rev", "group": "reviewers"}, {"name": "wri", "group": "writers"},
                                   {"name": "rev-b", "group": "reviewers"}])
    rev = start_stage(connect, run, "rev")
    wri = start_stage(connect, run, "wri")
    rev_b = start_stage(connect, run, "rev-b")

    rev_list = ok(rev.intercom(action="list"))
    seen = {s["id"] for s in rev_list["sessions"]}
    assert wri.id not in seen, rev_list
    assert rev_b.id in seen, rev_list              # its own subgroup stays visible
    assert "workflows" not in rev_list, rev_list   # no view of the run's stages
    host_seen = {s["id"] for s in ok(host.intercom(action="list"))["sessions"]}
    assert {rev.id, wri.id, rev_b.id} <= host_seen


def test_subgroup_member_group_peek_shows_its_own_subgroup_only(connect):
    host, run = host_run(connect, [{"name": "plan"}, {"name": "rev", "group": "reviewers"},
                                   {"name": "rev-b", "group": "reviewers"}, {"name": "wri", "group": "writers"}])
    plan = start_stage(connect, run, "plan")
    rev = start_stage(connect, run, "rev")
    rev_b = start_stage(connect, run, "rev-b")
    wri = start_stage(connect, run, "wri")

    def peek(session, group):
        ids = [s["id"] for s in ok(session.intercom(action="list", group=group))["sessions"]]
        assert ok(session.intercom(action="status", group=group))["visibleSessions"] == len(ids)
        return ids

    assert peek(rev, f"workflow:{run}/reviewers") == [rev_b.id]
    assert peek(rev, f"workflow:{run}/writers") == []       # a sibling subgroup: as if empty
    assert peek(rev, f"workflow:{run}") == []               # nor the run's own group
    assert set(peek(host, f"workflow:{run}/writers")) == {wri.id}
    assert set(peek(host, f"workflow:{run}")) == {plan.id}


def test_subgroup_member_cannot_reach_sibling_subgroup(connect):
    _host, run = host_run(connect, [{"name": "rev", "group": "reviewers"}, {"name": "wri", "group": "writers"}])
    rev = start_stage(connect, run, "rev")
    wri = start_stage(connect, run, "wri")

    assert_refused(send(rev, path(run, "wri"), "sibling"), "workflow_different_group", DIFFERENT_GROUP_TEXT, starts=True)
    assert_refused(send(rev, wri.id, "sibling by id"), "different_group")
    assert_refused(rev.intercom(action="join", group=f"workflow:{run}/writers"), "workflow_different_group")


def test_stage_group_true_is_namespaced_under_the_run(connect):
    host, run = host_run(connect, [{"name": "solo", "group": True}, {"name": "rev", "group": "reviewers"}])
    solo = start_stage(connect, run, "solo")
    rev = start_stage(connect, run, "rev")

    assert solo.groups == [f"workflow:{run}/solo"], solo.groups
    assert rev.groups == [f"workflow:{run}/reviewers"], rev.groups
    assert solo.id not in {s["id"] for s in ok(rev.intercom(action="list"))["sessions"]}
    assert ok(send(host, path(run, "solo"), "owned")).get("delivered") is True


def test_default_group_stage_escapes_pending_invocation_delivery(connect):
    host, run = host_run(connect, [{"name": "plan"}, {"name": "esc", "group": "default"}])
    # Not workflow-owned: an exact send before it starts is refused, nothing is queued.
    refused = send(host, path(run, "esc"), "for an escaped stage")
    assert refused["ok"] is False and refused["code"] == "stage_not_deliverable", refused
    queue(host, path(run, "**"), "broadcast")

    esc = start_stage(connect, run, "esc")

    assert esc.home_group == "default" and esc.groups == ["default"], esc.groups
    sync(esc)
    assert esc.receive(0) is None
    row = stage_row(run_row(host, run), "esc")
    assert row["label"] == "delivery-unavailable" and "target" not in row, row


# -- 3. intercom list --------------------------------------------------------------------------

def test_host_list_shows_pending_and_running_stages_with_canonical_targets(connect):
    host, run = host_run(connect, [{"name": "plan", "id": "s-plan"}, {"name": "impl"},
                                   {"name": "rev", "group": "reviewers"}])
    granted(ok(host.add_stages(run, [{"name": "part-1"}], parent="impl")))
    start_stage(connect, run, "plan")

    row = run_row(host, run)

    assert row["group"] == f"workflow:{run}" and row["host"] == host.id, row
    labels = {s["name"]: (s["label"], s["target"]) for s in row["stages"]}
    assert labels == {
        "plan": ("RUNNING", path(run, "plan")),
        "impl": ("PENDING", path(run, "impl")),
        "part-1": ("PENDING", path(run, "impl", "part-1")),
        "rev": ("PENDING", path(run, "rev")),
    }, row["stages"]


def test_host_list_shows_queued_counts_and_delivery_states(connect):
    host, run = host_run(connect, [{"name": "waiting"}, {"name": "taker"}, {"name": "holder"}])
    waiting_id, _ = send_for_id(host, path(run, "waiting"), "w")
    taker_id, _ = send_for_id(host, path(run, "taker"), "t")
    holder_id, _ = send_for_id(host, path(run, "holder"), "h")
    all_id, _ = send_for_id(host, path(run, "**"), "all")
    taker = start_stage(connect, run, "taker")
    take(taker, 2)
    sync(taker)                                   # receipts handled
    start_stage(connect, run, "holder")           # gets its entries, never takes them

    row = run_row(host, run)

    waiting, took, holding = (stage_row(row, n) for n in ("waiting", "taker", "holder"))
    assert (waiting["label"], waiting["queued"]) == ("PENDING", 2), waiting
    assert states_by_id(waiting) == {waiting_id: "queued", all_id: "queued"}, waiting
    assert (took["label"], took["queued"]) == ("RUNNING", 0), took
    assert states_by_id(took) == {taker_id: "delivered", all_id: "delivered"}, took
    assert (holding["label"], holding["queued"]) == ("RUNNING", 0), holding
    assert states_by_id(holding) == {holder_id: "receipt-unverified", all_id: "receipt-unverified"}, holding
    assert {s["target"] for s in waiting["deliveryStates"]} == {path(run, "waiting"), path(run, "**")}


def test_host_list_shows_future_rows_for_patterns_and_unknown_paths(connect):
    host, run = host_run(connect, [{"name": "plan"}])
    queue(host, path(run, "**"), "a")
    queue(host, path(run, "**"), "b")
    queue(host, path(run, "rev*"), "c")
    queue(host, path(run, "ghost"), "d")
    queue(host, path(run, "plan"), "exact known")

    row = run_row(host, run)

    future = {f["target"]: f["queued"] for f in row["future"]}
    assert future == {path(run, "**"): 2, path(run, "rev*"): 1, path(run, "ghost"): 1}, row["future"]
    assert stage_row(row, "plan")["queued"] == 3     # its exact entry and the two ** entries


def test_future_count_is_retained_after_a_stage_receives_the_pattern_entry(connect):
    host, run = host_run(connect, [{"name": "plan"}])
    queue(host, path(run, "**"), "shared")
    plan = start_stage(connect, run, "plan")
    take(plan, 1)
    sync(plan)

    row = run_row(host, run)

    assert {f["target"]: f["queued"] for f in row["future"]} == {path(run, "**"): 1}, row
    assert [s["state"] for s in stage_row(row, "plan")["deliveryStates"]] == ["delivered"]


def test_ended_stage_without_context_admission_shows_stage_terminal(connect):
    host, run = host_run(connect, [{"name": "plan"}])
    msg_id, _ = send_for_id(host, path(run, "plan"), "never taken")
    plan = start_stage(connect, run, "plan")     # transport delivery happens here
    plan.close()                                 # ... but it never took the message
    ok(host.set_stage_state(run, "plan", "completed"))

    row = stage_row(run_row(host, run), "plan")

    assert row["state"] == "completed", row
    assert states_by_id(row) == {msg_id: "stage-terminal"}, row


def test_stage_without_pre_start_delivery_is_listed_unavailable_without_target(connect):
    host, run = host_run(connect, [{"name": "plan"}, {"name": "quiet", "intercom": False}])
    queue(host, path(run, "**"), "all")

    row = stage_row(run_row(host, run), "quiet")

    assert row["label"] == "delivery-unavailable", row
    assert "target" not in row, row
    assert [s["state"] for s in row["deliveryStates"]] == ["delivery-unavailable"], row


def test_ended_run_is_no_longer_listed(connect):
    host, run = host_run(connect, [{"name": "plan"}])
    queue(host, path(run, "plan"), "x")

    ok(host.end_run(run))

    rows = ok(host.intercom(action="list")).get("workflows", [])
    assert all(r["runId"] != run for r in rows), rows
