"""Workflow stages end to end: a real broker process, real sessions, real SQLite.

Covers the reference sections "Targeting Sessions and Pending Workflow Stages",
"Deferred delivery to pending stages" and "Groups" through the public client API:
a host registers a run (``register_run`` joins ``workflow:<runId>``), stage sessions
connect with ``kind="stage"`` bound to their canonical path, and everything else is
the ``intercom`` tool.

Waiting rules: nothing sleeps. A session's own request round trip is the barrier for
everything it sent before on the same connection (``sync``), a live "marker" send is
the barrier for "nothing else was queued for this stage" (pre-start entries are
handed over right after the welcome, before anything sent later), and every wait on
a message or event has a deadline.
"""

from __future__ import annotations

import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest

from schemas.errors import ERRORS
from schemas.limits import CALL_TIMEOUT_S, QUEUED_PER_TARGET
from schemas.protocol import envelope

RECEIVE_S = 10.0
DIFFERENT_GROUP_TEXT = "Target workflow run is in a different intercom group"
QUEUE_FULL_TEXT = "Pending stage message queue is full (limit 50)"
BEFORE_START_HEADING = "Messages received before you started"


# -- helpers ---------------------------------------------------------------------------------

def new_run_id() -> str:
    return f"run-{uuid.uuid4().hex[:10]}"


def ok(result: dict) -> dict:
    assert isinstance(result, dict) and result.get("ok") is True, result
    return result


def assert_refused(result: dict, code: str, text: str | None = None) -> None:
    assert isinstance(result, dict) and result.get("ok") is False, result
    assert result.get("code") == code, result
    assert result.get("code") in ERRORS, result
    assert isinstance(result.get("error"), str) and result["error"], result
    if text is not None:
        assert result["error"] == text, result


def host_run(connect, stages: list[dict], name: str = "host") -> tuple:
    """A host session that registered a fresh run; returns (host, run id)."""
    host = connect(name)
    run = new_run_id()
    result = ok(host.register_run(run, stages))
    assert f"workflow:{run}" in result["groups"], result
    return host, run


def path(run: str, *segments: str) -> str:
    return "/".join((f"workflow:{run}", *segments))


def start_stage(connect, run: str, stage: str, transcript: str | None = None, **kwargs):
    """A stage session bound to ``workflow:<run>/<stage>`` (nested: "a/b")."""
    name = kwargs.pop("name", stage.rsplit("/", 1)[-1])
    return connect(name, kind="stage", stage=path(run, stage),
                   transcript=transcript or f"{name}-{uuid.uuid4().hex[:6]}", **kwargs)


def send(session, to: str, message: str) -> dict:
    return session.intercom(action="send", to=to, message=message)


def queue(session, to: str, message: str) -> dict:
    result = ok(send(session, to, message))
    assert result.get("queued") is True, result
    return result


def send_with_id(session, to: str, message: str) -> tuple[str, dict]:
    """A send whose message id the test chose (the id a sender correlates with).

    The public ``intercom`` call picks the id itself and a ``queued`` answer does not
    carry it (see test_queued_send_answer_carries_its_message_id), so this goes
    through the session's transport with the same ``call`` envelope ``send_nowait``
    builds, under an id of our choosing.
    """
    msg_id = str(uuid.uuid4())
    future = session._transport.request(
        envelope("call", id=msg_id, action="send", to=to, message=message))
    return msg_id, future.result(CALL_TIMEOUT_S)


def take(session, count: int, timeout: float = RECEIVE_S) -> list[dict]:
    """The next ``count`` inbound messages (each taken into context with receive())."""
    got = []
    for _ in range(count):
        msg = session.receive(timeout)
        assert msg is not None, f"only {len(got)} of {count} messages arrived: {[m['message'] for m in got]}"
        got.append(msg)
    return got


def sync(session) -> None:
    """A round trip: the broker has handled everything this session sent before."""
    ok(session.intercom(action="status"))


def assert_nothing_queued_for(stage_session, sender, target: str) -> None:
    """The stage's next message is a live marker sent now: nothing else was owed to it."""
    marker = f"marker-{uuid.uuid4().hex[:8]}"
    result = ok(send(sender, target, marker))
    assert result.get("delivered") is True, result
    msg = stage_session.receive(RECEIVE_S)
    assert msg is not None, "the live marker never arrived"
    assert msg["message"] == marker, f"expected only the marker, got {msg['message']!r} first"
    assert not msg.get("receivedBeforeStart"), msg


def run_row(session, run: str) -> dict:
    rows = ok(session.intercom(action="list")).get("workflows", [])
    matching = [r for r in rows if r["runId"] == run]
    assert len(matching) == 1, rows
    return matching[0]


def stage_row(row: dict, name: str) -> dict:
    matching = [s for s in row["stages"] if s["name"] == name]
    assert len(matching) == 1, row["stages"]
    return matching[0]


def states_by_id(row: dict) -> dict[str, str]:
    return {s["messageId"]: s["state"] for s in row["deliveryStates"]}


def events_now(session) -> list[dict]:
    """Every event the broker sent ``session`` before answering a round trip now."""
    sync(session)
    events = []
    while (event := session.next_event(0)) is not None:
        events.append(event)
    return events


def undeliverable(events: list[dict]) -> list[dict]:
    return [e for e in events if e.get("event") == "undeliverable"]


# -- 1. send: delivered now, queued with a FIFO position, notInKnownSet, ** -------------------

def test_send_to_running_stage_is_delivered_now(connect):
    host, run = host_run(connect, [{"name": "plan"}])
    plan = start_stage(connect, run, "plan")

    result = ok(send(host, path(run, "plan"), "do it now"))

    assert result.get("delivered") is True and "queued" not in result, result
    assert result["to"] == plan.id and result["toName"] == "plan", result
    assert result["target"] == path(run, "plan"), result
    msg = plan.receive(RECEIVE_S)
    assert msg is not None and msg["message"] == "do it now", msg
    assert msg["id"] == result["messageId"], (msg, result)
    assert not msg.get("receivedBeforeStart"), msg


def test_send_to_pending_stage_is_queued_with_fifo_positions(connect):
    host, run = host_run(connect, [{"name": "plan"}, {"name": "build"}])

    answers = [queue(host, path(run, "plan"), f"m{n}") for n in range(3)]
    other = queue(host, path(run, "build"), "b0")

    assert [a["position"] for a in answers] == [1, 2, 3], answers
    assert all(a["target"] == path(run, "plan") and a["runId"] == run for a in answers), answers
    assert all("delivered" not in a and not a.get("notInKnownSet") for a in answers), answers
    assert other["position"] == 1, other


def test_send_to_valid_path_outside_known_set_is_queued_not_in_known_set(connect):
    host, run = host_run(connect, [{"name": "plan"}])

    first = queue(host, path(run, "later"), "for a stage nobody declared yet")
    nested = queue(host, path(run, "later", "child"), "for its child")
    second = queue(host, path(run, "later"), "again")

    assert first["notInKnownSet"] is True and first["position"] == 1, first
    assert nested["notInKnownSet"] is True and nested["position"] == 1, nested
    assert second["notInKnownSet"] is True and second["position"] == 2, second


def test_known_stage_send_is_not_flagged_not_in_known_set(connect):
    host, run = host_run(connect, [{"name": "plan"}])

    answer = queue(host, path(run, "plan"), "known")

    assert "notInKnownSet" not in answer, answer


def test_globstar_send_reaches_live_stages_now_and_later_starters(connect):
    host, run = host_run(connect, [{"name": "a"}, {"name": "b"}, {"name": "c"}])
    a = start_stage(connect, run, "a")
    b = start_stage(connect, run, "b")

    answer = queue(host, path(run, "**"), "scope changed")

    assert sorted(answer["deliveredTo"]) == sorted([a.id, b.id]), answer
    assert answer["position"] == 1, answer
    for live in (a, b):
        msg = live.receive(RECEIVE_S)
        assert msg is not None and msg["message"] == "scope changed", msg
        assert not msg.get("receivedBeforeStart"), msg
    c = start_stage(connect, run, "c")
    later = c.receive(RECEIVE_S)
    assert later is not None and later["message"] == "scope changed", later
    assert later["receivedBeforeStart"] is True, later


def test_stage_id_spelling_reaches_the_same_stage(connect):
    host, run = host_run(connect, [{"name": "plan", "id": "s-plan"}])

    queue(host, path(run, "s-plan"), "by id")
    plan = start_stage(connect, run, "plan")

    (msg,) = take(plan, 1)
    assert msg["message"] == "by id" and msg["receivedBeforeStart"] is True, msg


def test_queued_send_answer_carries_its_message_id(connect):
    """A queued send must be correlatable: undeliverable notices name the message id,
    so the sender has to learn it from the answer (a live send's answer has it)."""
    host, run = host_run(connect, [{"name": "plan"}])

    answer = queue(host, path(run, "plan"), "correlate me")

    assert isinstance(answer.get("messageId"), str) and answer["messageId"], answer
    plan = start_stage(connect, run, "plan")
    (msg,) = take(plan, 1)
    assert msg["id"] == answer["messageId"], (msg, answer)


# -- 2. a starting stage gets its queued entries first ------------------------------------------

def test_starting_stage_receives_queued_entries_first_in_fifo_order(connect):
    host, run = host_run(connect, [{"name": "plan"}, {"name": "other"}])
    lead = connect("lead")
    ok(lead.intercom(action="join", group=f"workflow:{run}"))
    queue(host, path(run, "plan"), "one")
    queue(lead, path(run, "*"), "two")          # a pattern, between exact entries
    queue(host, path(run, "other"), "not mine")
    queue(lead, path(run, "plan"), "three")
    queue(host, path(run, "**"), "four")

    plan = start_stage(connect, run, "plan")
    live = ok(send(host, path(run, "plan"), "live after start"))
    assert live.get("delivered") is True, live

    got = take(plan, 5)
    assert [m["message"] for m in got] == ["one", "two", "three", "four", "live after start"]
    assert all(m["receivedBeforeStart"] is True for m in got[:4]), got
    assert not got[4].get("receivedBeforeStart"), got[4]


def test_pre_start_message_shows_sender_and_sent_time_under_the_heading(connect):
    host, run = host_run(connect, [{"name": "plan"}])
    before = time.time()
    queue(host, path(run, "plan"), "the criteria changed")
    after = time.time()

    plan = start_stage(connect, run, "plan")
    (msg,) = take(plan, 1)

    assert msg["receivedBeforeStart"] is True, msg
    assert msg["from"] == host.id and msg["fromName"] == "host", msg
    assert isinstance(msg["sentAt"], (int, float)) and before - 1 <= msg["sentAt"] <= after + 1, msg
    body = msg["body"]
    assert BEFORE_START_HEADING in body, body
    assert "Sent:" in body and "the criteria changed" in body, body
    assert "host" in body and host.id in body, body
    assert body.index(BEFORE_START_HEADING) < body.index("Sent:") < body.index("the criteria changed"), body


# -- 3. transcripts: no duplicates on reuse, everything again for a replacement ------------

def test_same_transcript_reconnect_after_taking_messages_gets_no_duplicates(connect):
    host, run = host_run(connect, [{"name": "plan"}])
    for n in range(3):
        queue(host, path(run, "plan"), f"m{n}")
    queue(host, path(run, "**"), "everyone")
    first = start_stage(connect, run, "plan", transcript="plan-transcript")
    assert [m["message"] for m in take(first, 4)] == ["m0", "m1", "m2", "everyone"]
    sync(first)           # its receipts are handled before it leaves
    first.close()

    again = start_stage(connect, run, "plan", transcript="plan-transcript")

    assert_nothing_queued_for(again, host, path(run, "plan"))


def test_same_transcript_reconnect_before_taking_messages_gets_them_again(connect):
    host, run = host_run(connect, [{"name": "plan"}])
    queue(host, path(run, "plan"), "unread")
    first = start_stage(connect, run, "plan", transcript="plan-transcript")
    first.close()          # never took the message into its context

    again = start_stage(connect, run, "plan", transcript="plan-transcript")

    (msg,) = take(again, 1)
    assert msg["message"] == "unread" and msg["receivedBeforeStart"] is True, msg


def test_replacement_session_with_new_transcript_gets_retained_entries_again(connect):
    host, run = host_run(connect, [{"name": "plan"}])
    queue(host, path(run, "plan"), "exact")
    queue(host, path(run, "**"), "broadcast")
    first = start_stage(connect, run, "plan", transcript="t-old")
    assert [m["message"] for m in take(first, 2)] == ["exact", "broadcast"]
    sync(first)
    first.close()

    replacement = start_stage(connect, run, "plan", transcript="t-new")

    got = take(replacement, 2)
    assert [m["message"] for m in got] == ["exact", "broadcast"]
    assert all(m["receivedBeforeStart"] is True for m in got), got


# -- 4. at most 50 queued per target, nothing evicted -------------------------------------------

def test_51st_queued_message_is_refused_with_queue_full(connect):
    host, run = host_run(connect, [{"name": "plan"}])
    positions = [queue(host, path(run, "plan"), f"m{n}")["position"] for n in range(QUEUED_PER_TARGET)]
    assert positions == list(range(1, QUEUED_PER_TARGET + 1))

    refused = send(host, path(run, "plan"), "one too many")

    assert_refused(refused, "queue_full", QUEUE_FULL_TEXT)
    assert stage_row(run_row(host, run), "plan")["queued"] == QUEUED_PER_TARGET
    # the limit is per target: another target still queues
    assert queue(host, path(run, "*"), "pattern")["position"] == 1


def test_first_50_queued_messages_are_all_delivered_after_a_refusal(connect):
    host, run = host_run(connect, [{"name": "plan"}])
    for n in range(QUEUED_PER_TARGET):
        queue(host, path(run, "plan"), f"m{n}")
    assert_refused(send(host, path(run, "plan"), "m50"), "queue_full", QUEUE_FULL_TEXT)

    plan = start_stage(connect, run, "plan")

    got = take(plan, QUEUED_PER_TARGET)
    assert [m["message"] for m in got] == [f"m{n}" for n in range(QUEUED_PER_TARGET)]
    assert_nothing_queued_for(plan, host, path(run, "plan"))


def test_pipelined_burst_past_the_limit_queues_exactly_50(connect):
    host, run = host_run(connect, [{"name": "plan"}])

    futures = [host.send_nowait(path(run, "plan"), f"m{n}") for n in range(QUEUED_PER_TARGET + 5)]
    answers = [f.result(CALL_TIMEOUT_S) for f in futures]

    queued = [a for a in answers if a.get("ok")]
    refused = [a for a in answers if not a.get("ok")]
    assert [a["position"] for a in queued] == list(range(1, QUEUED_PER_TARGET + 1)), answers
    assert answers[:QUEUED_PER_TARGET] == queued, "the first 50 sent are the 50 queued"
    assert len(refused) == 5 and all(a["code"] == "queue_full" for a in refused), refused


# -- 5. refusals ---------------------------------------------------------------------------------

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
        assert_refused(send(outsider, target, "let me in"), "workflow_different_group", DIFFERENT_GROUP_TEXT)
    assert_refused(outsider.intercom(action="ask", to=path(run, "plan"), message="?", timeout=5),
                   "workflow_different_group", DIFFERENT_GROUP_TEXT)
    assert "workflows" not in ok(outsider.intercom(action="list"))


def test_host_of_another_run_is_refused_as_different_group(connect):
    _host, run = host_run(connect, [{"name": "plan"}])
    other_host, _other = host_run(connect, [{"name": "plan"}], name="other-host")

    assert_refused(send(other_host, path(run, "plan"), "cross-run"),
                   "workflow_different_group", DIFFERENT_GROUP_TEXT)


def test_stage_of_another_run_joining_the_invocation_group_is_refused(connect):
    _host, run = host_run(connect, [{"name": "plan"}])
    _other_host, other = host_run(connect, [{"name": "worker"}], name="other-host")
    worker = start_stage(connect, other, "worker")
    ok(worker.intercom(action="join", group=f"workflow:{run}"))

    assert_refused(send(worker, path(run, "plan"), "cross-run"),
                   "workflow_different_group", DIFFERENT_GROUP_TEXT)
    assert_refused(send(worker, path(run, "**"), "cross-run"),
                   "workflow_different_group", DIFFERENT_GROUP_TEXT)


def test_subgroup_stage_joining_the_invocation_group_cannot_queue_to_the_run(connect):
    host, run = host_run(connect, [{"name": "rev", "group": "reviewers"}, {"name": "plan"}])
    rev = start_stage(connect, run, "rev")
    assert rev.groups == [f"workflow:{run}/reviewers"], rev.groups
    joined = ok(rev.intercom(action="join", group=f"workflow:{run}"))
    assert f"workflow:{run}" in joined["groups"], joined

    for target in (path(run, "plan"), path(run, "**"), path(run, "later")):
        assert_refused(send(rev, target, "parent control?"), "workflow_different_group", DIFFERENT_GROUP_TEXT)
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


# -- 6. invocation control over owned subgroups ------------------------------------------------

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


def test_subgroup_member_cannot_reach_sibling_subgroup(connect):
    _host, run = host_run(connect, [{"name": "rev", "group": "reviewers"}, {"name": "wri", "group": "writers"}])
    rev = start_stage(connect, run, "rev")
    wri = start_stage(connect, run, "wri")

    assert_refused(send(rev, path(run, "wri"), "sibling"), "workflow_different_group", DIFFERENT_GROUP_TEXT)
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
    queue(host, path(run, "esc"), "queued for an escaped stage")
    queue(host, path(run, "**"), "broadcast")

    esc = start_stage(connect, run, "esc")

    assert esc.home_group == "default" and esc.groups == ["default"], esc.groups
    sync(esc)
    assert esc.receive(0) is None
    row = stage_row(run_row(host, run), "esc")
    assert row["label"] == "delivery-unavailable" and "target" not in row, row


# -- 7. intercom list --------------------------------------------------------------------------

def test_host_list_shows_pending_and_running_stages_with_canonical_targets(connect):
    host, run = host_run(connect, [{"name": "plan", "id": "s-plan"}, {"name": "impl"},
                                   {"name": "rev", "group": "reviewers"}])
    ok(host.add_stages(run, [{"name": "part-1"}], parent="impl"))
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
    waiting_id, _ = send_with_id(host, path(run, "waiting"), "w")
    taker_id, _ = send_with_id(host, path(run, "taker"), "t")
    holder_id, _ = send_with_id(host, path(run, "holder"), "h")
    all_id, _ = send_with_id(host, path(run, "**"), "all")
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
    msg_id, _ = send_with_id(host, path(run, "plan"), "never taken")
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


# -- 8. settlement: undeliverable notices ---------------------------------------------------------

def test_end_run_notifies_senders_of_never_delivered_entries(connect):
    host, run = host_run(connect, [{"name": "plan"}, {"name": "never"}])
    lead = connect("lead")
    ok(lead.intercom(action="join", group=f"workflow:{run}"))
    exact_id, _ = send_with_id(host, path(run, "never"), "exact, never started")
    future_id, answer = send_with_id(host, path(run, "ghost"), "outside the known set")
    assert answer.get("notInKnownSet") is True, answer
    pattern_id, _ = send_with_id(host, path(run, "nomatch*"), "pattern nobody matched")
    lead_id, _ = send_with_id(lead, path(run, "never"), "from the lead")
    events_now(host)
    events_now(lead)   # presence noise out of the way

    result = ok(host.end_run(run))

    assert result["undeliverable"] == 4, result
    host_events = {e["messageId"]: e for e in undeliverable(events_now(host))}
    assert set(host_events) == {exact_id, future_id, pattern_id}, host_events
    assert host_events[exact_id]["runId"] == run and host_events[exact_id]["target"] == path(run, "never")
    assert host_events[future_id]["target"] == path(run, "ghost")
    assert host_events[pattern_id]["target"] == path(run, "nomatch*")
    assert [e["messageId"] for e in undeliverable(events_now(lead))] == [lead_id]


def test_end_run_sends_no_notice_for_entries_delivered_at_least_once(connect):
    host, run = host_run(connect, [{"name": "taker"}, {"name": "holder"}, {"name": "later"}])
    send_with_id(host, path(run, "taker"), "taken")
    send_with_id(host, path(run, "holder"), "transport only")
    send_with_id(host, path(run, "**"), "broadcast")
    taker = start_stage(connect, run, "taker")
    take(taker, 2)
    sync(taker)
    start_stage(connect, run, "holder")          # delivered, never taken
    events_now(host)

    result = ok(host.end_run(run))

    assert result["undeliverable"] == 0, result
    assert undeliverable(events_now(host)) == []


@pytest.mark.parametrize("state", ["skipped", "failed"])
def test_stage_ended_before_start_settles_its_exact_entries(connect, state):
    host, run = host_run(connect, [{"name": "plan", "id": "s-plan"}, {"name": "impl"}])
    by_name, _ = send_with_id(host, path(run, "plan"), "by name")
    by_id, _ = send_with_id(host, path(run, "s-plan"), "by id")
    pattern_id, _ = send_with_id(host, path(run, "*"), "pattern stays")
    other_id, _ = send_with_id(host, path(run, "impl"), "other stage")
    events_now(host)

    ok(host.set_stage_state(run, "plan", state))

    notices = {e["messageId"]: e for e in undeliverable(events_now(host))}
    assert set(notices) == {by_name, by_id}, notices
    row = run_row(host, run)
    assert states_by_id(stage_row(row, "plan")) == {pattern_id: "stage-terminal"}, row
    assert states_by_id(stage_row(row, "impl")) == {pattern_id: "queued", other_id: "queued"}, row
    # the pattern entry is not settled: it still reaches the next matching stage
    impl = start_stage(connect, run, "impl")
    assert [m["message"] for m in take(impl, 2)] == ["pattern stays", "other stage"]


def test_no_undeliverable_notice_when_the_sender_did_not_ask_for_one(connect):
    host, run = host_run(connect, [{"name": "plan"}])
    quiet = connect("quiet", notify_undeliverable=False)
    ok(quiet.intercom(action="join", group=f"workflow:{run}"))
    queue(quiet, path(run, "plan"), "fire and forget")
    events_now(quiet)

    ok(host.end_run(run))

    assert undeliverable(events_now(quiet)) == []
