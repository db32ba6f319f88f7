"""Workflow stage delivery end to end: a real broker process, real sessions, real SQLite.

Covers the reference sections "Targeting Sessions and Pending Workflow Stages" and
"Deferred delivery to pending stages" through the public client API: a send is
delivered now or queued with a FIFO position, a starting stage gets its queued
entries first (under the pre-start heading), transcripts decide what is handed over
again, at most 50 entries are queued per target, and what was never delivered is
settled with undeliverable notices. Helpers and waiting rules: workflow_helpers.py.
"""

from __future__ import annotations

import time

import pytest

from schemas.limits import CALL_TIMEOUT_S, QUEUED_PER_TARGET
from tests.integration.conftest import module_connect_broker
from tests.integration.workflow_helpers import (
    RECEIVE_S,
    assert_nothing_queued_for,
    assert_refused,
    events_now,
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
    undeliverable,
)

# One broker for the module: each test's sessions are closed after it, its runs are its own.
broker = module_connect_broker()

QUEUE_FULL_TEXT = "Pending stage message queue is full (limit 50)"
BEFORE_START_HEADING = "Messages received before you started"


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


def test_an_exact_target_materialized_later_keeps_its_evidence_in_a_delivery_row(connect):
    host, run = host_run(connect, [{"name": "review"}])
    early, _ = send_for_id(host, path(run, "review", "deep"), "before deep existed")
    row = run_row(host, run)
    assert row["future"] == [{"target": path(run, "review", "deep"), "queued": 1}], row
    assert row["delivery"] == [], row

    granted(ok(host.add_stages(run, [{"name": "deep"}], parent="review")))
    row = run_row(host, run)
    assert row["future"] == [], row                  # materialized: no longer a future target
    assert row["delivery"] == [{"target": path(run, "review", "deep"), "deliveryStates": [
        {"stage": path(run, "review", "deep"), "messageId": early, "state": "queued"}]}], row

    deep = start_stage(connect, run, "review/deep")
    assert [m["message"] for m in take(deep, 1)] == ["before deep existed"]
    sync(deep)                                       # its receipt is handled
    (evidence,) = run_row(host, run)["delivery"]
    assert [(s["messageId"], s["state"]) for s in evidence["deliveryStates"]] == [(early, "delivered")]


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


def test_name_and_id_spellings_of_a_stage_share_one_queue_and_cap(connect):
    host, run = host_run(connect, [{"name": "plan", "id": "s-plan"}])
    half = QUEUED_PER_TARGET // 2

    by_name = [queue(host, path(run, "plan"), f"n{n}")["position"] for n in range(half)]
    by_id = [queue(host, path(run, "s-plan"), f"i{n}")["position"] for n in range(QUEUED_PER_TARGET - half)]

    assert by_name + by_id == list(range(1, QUEUED_PER_TARGET + 1))
    assert_refused(send(host, path(run, "s-plan"), "51st"), "queue_full", QUEUE_FULL_TEXT)
    assert_refused(send(host, path(run, "plan"), "51st"), "queue_full", QUEUE_FULL_TEXT)
    row = run_row(host, run)
    assert row["future"] == [], row                     # the id is the stage, not a future target
    assert stage_row(row, "plan")["queued"] == QUEUED_PER_TARGET, row
    plan = start_stage(connect, run, "plan")
    expected = [f"n{n}" for n in range(half)] + [f"i{n}" for n in range(QUEUED_PER_TARGET - half)]
    assert [m["message"] for m in take(plan, QUEUED_PER_TARGET)] == expected


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


# -- 5. settlement: undeliverable notices ---------------------------------------------------------

def test_end_run_notifies_senders_of_never_delivered_entries(connect):
    host, run = host_run(connect, [{"name": "plan"}, {"name": "never"}])
    lead = connect("lead")
    ok(lead.intercom(action="join", group=f"workflow:{run}"))
    exact_id, _ = send_for_id(host, path(run, "never"), "exact, never started")
    future_id, answer = send_for_id(host, path(run, "ghost"), "outside the known set")
    assert answer.get("notInKnownSet") is True, answer
    pattern_id, _ = send_for_id(host, path(run, "nomatch*"), "pattern nobody matched")
    lead_id, _ = send_for_id(lead, path(run, "never"), "from the lead")
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
    queue(host, path(run, "taker"), "taken")
    queue(host, path(run, "holder"), "transport only")
    queue(host, path(run, "**"), "broadcast")
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
    by_name, _ = send_for_id(host, path(run, "plan"), "by name")
    by_id, _ = send_for_id(host, path(run, "s-plan"), "by id")
    pattern_id, _ = send_for_id(host, path(run, "*"), "pattern stays")
    other_id, _ = send_for_id(host, path(run, "impl"), "other stage")
    events_now(host)

    ok(host.set_stage_state(run, "plan", state))

    notices = {e["messageId"]: e for e in undeliverable(events_now(host))}
    assert set(notices) == {by_name, by_id}, notices
    row = run_row(host, run)
    # the settled entries stay as evidence, as does the pattern entry that matched it
    assert states_by_id(stage_row(row, "plan")) == {by_name: "stage-terminal", by_id: "stage-terminal",
                                                    pattern_id: "stage-terminal"}, row
    assert row["future"] == [{"target": path(run, "*"), "queued": 1}], row
    assert states_by_id(stage_row(row, "impl")) == {pattern_id: "queued", other_id: "queued"}, row
    # the pattern entry is not settled: it still reaches the next matching stage
    impl = start_stage(connect, run, "impl")
    assert [m["message"] for m in take(impl, 2)] == ["pattern stays", "other stage"]
    # they were reported once: ending the run reports nothing again
    ok(host.end_run(run))
    assert undeliverable(events_now(host)) == []


def test_no_undeliverable_notice_when_the_sender_did_not_ask_for_one(connect):
    host, run = host_run(connect, [{"name": "plan"}])
    quiet = connect("quiet", notify_undeliverable=False)
    ok(quiet.intercom(action="join", group=f"workflow:{run}"))
    queue(quiet, path(run, "plan"), "fire and forget")
    events_now(quiet)

    ok(host.end_run(run))

    assert undeliverable(events_now(quiet)) == []
