"""Ask, reply, pending and contact_supervisor, with a fake clock."""

from schemas.protocol import envelope

from .harness import Bus, result_for, uuid_from

ALICE, BOB, CAROL = (uuid_from(0xA0000001), uuid_from(0xA0000002), uuid_from(0xA0000003))


def three(**limits):
    bus = Bus(**limits)
    bus.hello("alice")
    bus.hello("bob")
    bus.hello("carol")
    return bus


def ask(bus, identity, msg_id, to, message="q?", **params):
    out = bus.feed(identity, envelope("call", id=msg_id, action="ask", to=to, message=message, **params))
    return out


def answers(bus, identity, msg_id):
    return [c.env for c in bus.last if getattr(c, "identity", None) == identity
            and c.env.get("k") == "result" and c.env.get("re") == msg_id]


def test_ask_delivers_expecting_a_reply_and_waits():
    bus = three()
    ask(bus, b"alice", "a1", "bob")
    (msg,) = bus.sends(b"bob", "msg")
    assert msg["id"] == "a1" and msg["expectsReply"] is True and msg["from"] == ALICE
    assert answers(bus, b"alice", "a1") == []


def test_reply_in_the_current_turn_settles_the_exact_ask():
    bus = three()
    ask(bus, b"alice", "a1", "bob")
    result = bus.call(b"bob", "reply", msg_id="r1", message="yes", currentTurn="a1")
    assert result["ok"] and result["replyTo"] == "a1" and result["to"] == ALICE
    (answer,) = answers(bus, b"alice", "a1")
    assert answer["ok"] is True and answer["message"] == "yes" and answer["from"] == BOB


def test_ask_times_out_after_600_seconds_by_default():
    bus = three(liveness_s=10_000)
    ask(bus, b"alice", "a1", "bob")
    bus.advance(599.0)
    assert answers(bus, b"alice", "a1") == []
    bus.advance(1.0)
    (answer,) = answers(bus, b"alice", "a1")
    assert answer["code"] == "ask_timeout" and "600" in answer["error"]
    assert bus.call(b"bob", "pending")["pending"] == []


def test_per_call_timeout_is_honoured():
    bus = three(liveness_s=10_000)
    ask(bus, b"alice", "a1", "bob", timeout=5)
    bus.advance(5.0)
    assert answers(bus, b"alice", "a1")[0]["code"] == "ask_timeout"


def test_seventh_concurrent_ask_is_refused():
    bus = three()
    for n in range(6):
        ask(bus, b"alice", f"a{n}", "bob" if n % 2 else "carol")
    ask(bus, b"alice", "a6", "bob")
    (answer,) = answers(bus, b"alice", "a6")
    assert answer["code"] == "too_many_asks" and "6" in answer["error"]


def test_pending_ask_limit_is_configurable():
    bus = three(max_pending_asks=2)
    ask(bus, b"alice", "a1", "bob")
    ask(bus, b"alice", "a2", "bob")
    ask(bus, b"alice", "a3", "bob")
    assert answers(bus, b"alice", "a3")[0]["code"] == "too_many_asks"


def test_out_of_order_replies_settle_only_their_own_asks():
    bus = three()
    ask(bus, b"alice", "a1", "bob")
    ask(bus, b"alice", "a2", "bob")
    bus.call(b"bob", "reply", replyTo="a2", message="second")
    assert answers(bus, b"alice", "a2")[0]["message"] == "second"
    assert answers(bus, b"alice", "a1") == []
    bus.call(b"bob", "reply", replyTo="a1", message="first")
    assert answers(bus, b"alice", "a1")[0]["message"] == "first"


def test_target_disconnect_fails_only_asks_to_that_peer():
    bus = three()
    ask(bus, b"alice", "a1", "bob")
    ask(bus, b"alice", "a2", "carol")
    bus.feed(b"bob", envelope("bye"))
    (answer,) = answers(bus, b"alice", "a1")
    assert answer["code"] == "peer_disconnected" and "bob" in answer["error"]
    assert answers(bus, b"alice", "a2") == []


def test_silent_target_fails_its_asks_within_liveness():
    bus = three(liveness_s=3.0)
    ask(bus, b"alice", "a1", "bob")
    bus.advance(2.0)
    bus.feed(b"alice", envelope("hb"))
    bus.advance(1.5)
    assert answers(bus, b"alice", "a1")[0]["code"] == "peer_disconnected"


def test_terminal_child_refuses_new_asks_with_the_spec_text():
    bus = three()
    bus.hello("child", sessionKind="noninteractive")
    bus.feed(b"child", envelope("status", replyCapability="terminal"))
    ask(bus, b"alice", "a1", "child")
    (answer,) = answers(bus, b"alice", "a1")
    assert answer["code"] == "terminal_child"
    assert answer["error"] == "Target noninteractive child is terminal and cannot reply"


def test_child_turning_terminal_fails_its_pending_asks():
    bus = three()
    bus.hello("child", sessionKind="noninteractive")
    ask(bus, b"alice", "a1", "child")
    bus.feed(b"child", envelope("status", replyCapability="terminal"))
    assert answers(bus, b"alice", "a1")[0]["code"] == "terminal_child"


def test_ask_refusals_unknown_other_group_and_self():
    bus = three()
    bus.hello("dave", group="elsewhere")
    ask(bus, b"alice", "a1", "nobody")
    assert answers(bus, b"alice", "a1")[0]["code"] == "target_not_found"
    ask(bus, b"alice", "a2", uuid_from(0xA0000004))
    assert answers(bus, b"alice", "a2")[0]["code"] == "different_group"
    ask(bus, b"alice", "a3", "alice")
    assert answers(bus, b"alice", "a3")[0]["code"] == "self_target"


def test_an_ask_back_is_refused_as_a_cycle_and_the_first_ask_still_completes():
    bus = three()
    ask(bus, b"alice", "a1", "bob")
    ask(bus, b"bob", "b1", "alice")         # each would wait for the other (test_ask_cycles)
    assert answers(bus, b"bob", "b1")[0]["code"] == "ask_cycle"
    bus.call(b"bob", "reply", message="from bob", currentTurn="a1")
    assert answers(bus, b"alice", "a1")[0]["message"] == "from bob"


def test_reply_falls_back_to_the_single_pending_ask():
    bus = three()
    ask(bus, b"alice", "a1", "bob")
    assert bus.call(b"bob", "reply", message="ok")["replyTo"] == "a1"


def test_reply_with_several_pending_asks_needs_a_selector():
    bus = three()
    ask(bus, b"alice", "a1", "bob")
    ask(bus, b"carol", "c1", "bob")
    assert bus.call(b"bob", "reply", message="?")["code"] == "reply_ambiguous"
    assert bus.call(b"bob", "reply", to="carol", message="ok")["replyTo"] == "c1"


def test_several_asks_from_one_sender_need_reply_to():
    bus = three()
    ask(bus, b"alice", "a1", "bob")
    ask(bus, b"alice", "a2", "bob")
    assert bus.call(b"bob", "reply", to="alice", message="?")["code"] == "reply_ambiguous"


def test_reply_to_accepts_a_unique_8_hex_prefix():
    bus = three()
    ask_id = uuid_from(0x12345678)
    ask(bus, b"alice", ask_id, "bob")
    assert bus.call(b"bob", "reply", replyTo=ask_id[:8], message="ok")["replyTo"] == ask_id


def test_stale_unknown_empty_and_fabricated_reply_to_fail_without_fallback():
    bus = three()
    ask(bus, b"alice", "a1", "bob")
    bus.call(b"bob", "reply", replyTo="a1", message="done")
    ask(bus, b"carol", "c1", "bob")
    for selector in ("a1", "", "made-up", "deadbeef"):
        result = bus.call(b"bob", "reply", replyTo=selector, message="x")
        assert result["code"] == "unknown_thread", selector
    assert answers(bus, b"carol", "c1") == []


def test_both_selectors_must_agree_on_the_sender():
    bus = three()
    ask(bus, b"alice", "a1", "bob")
    result = bus.call(b"bob", "reply", replyTo="a1", to="carol", message="x")
    assert result["code"] == "thread_sender_mismatch"
    assert bus.call(b"bob", "reply", replyTo="a1", to="alice", message="x")["ok"]


def test_only_the_asked_session_can_settle_an_ask():
    bus = three()
    ask(bus, b"alice", "a1", "bob")
    assert bus.call(b"carol", "reply", replyTo="a1", message="x")["code"] == "unknown_thread"
    assert answers(bus, b"alice", "a1") == []


def test_reply_to_the_ordinary_message_of_the_current_turn_is_a_send_with_reply_to():
    bus = three()
    bus.call(b"alice", "send", msg_id="m1", to="bob", message="fyi")
    result = bus.call(b"bob", "reply", message="thanks", currentTurn="m1")
    assert result["replyTo"] == "m1" and result["to"] == ALICE
    (msg,) = bus.sends(b"alice", "msg")
    assert msg["replyTo"] == "m1" and msg["message"] == "thanks"


def test_pending_lists_sender_id_elapsed_and_preview():
    bus = three()
    ask(bus, b"alice", "a1", "bob", message="x" * 500)
    bus.now += 4.0
    (row,) = bus.call(b"bob", "pending")["pending"]
    assert row["from"] == ALICE and row["fromName"] == "alice" and row["messageId"] == "a1"
    assert row["elapsedS"] == 4.0 and len(row["preview"]) <= 80


def supervised():
    bus = Bus()
    parent = bus.hello("parent", group="team")
    bus.hello("child", parent=parent["sessionId"], group="isolated")
    return bus


def test_child_contacts_its_supervisor_across_groups():
    bus = supervised()
    bus.feed(b"child", envelope("supervisor", id="s1", message="which way?"))
    (msg,) = bus.sends(b"parent", "msg")
    assert msg["expectsReply"] and msg["supervisor"] is True
    bus.call(b"parent", "reply", to="child", message="left")
    assert answers(bus, b"child", "s1")[0]["message"] == "left"


def test_second_supervisor_wait_is_refused_but_ordinary_asks_coexist():
    bus = supervised()
    bus.hello("peer", group="isolated")
    bus.feed(b"child", envelope("supervisor", id="s1", message="one"))
    out = bus.feed(b"child", envelope("supervisor", id="s2", message="two"))
    assert result_for(out, b"child", "s2")["error"] == "Already waiting for a supervisor reply"
    ask(bus, b"child", "a1", "peer")
    assert answers(bus, b"child", "a1") == [] and bus.sends(b"peer", "msg")


def test_session_without_parent_has_no_supervisor():
    bus = Bus()
    bus.hello("alice")
    out = bus.feed(b"alice", envelope("supervisor", id="s1", message="?"))
    assert result_for(out, b"alice", "s1")["code"] == "not_supervisor"


def test_retry_with_same_id_and_payload_is_answered_again_without_second_delivery():
    bus = three()
    first = bus.call(b"alice", "send", msg_id="m1", to="bob", message="hi")
    again = bus.call(b"alice", "send", msg_id="m1", to="bob", message="hi")
    assert first == again and bus.sends(b"bob", "msg") == []


def test_reusing_an_id_for_another_message_is_refused():
    bus = three()
    bus.call(b"alice", "send", msg_id="m1", to="bob", message="hi")
    assert bus.call(b"alice", "send", msg_id="m1", to="carol", message="hi")["code"] == "message_id_conflict"
    assert bus.call(b"alice", "send", msg_id="m1", to="bob", message="bye")["code"] == "message_id_conflict"
    assert bus.call(b"carol", "send", msg_id="m1", to="bob", message="hi")["code"] == "message_id_conflict"


def test_retried_ask_is_delivered_once_and_answered_once_settled():
    bus = three()
    ask(bus, b"alice", "a1", "bob")
    ask(bus, b"alice", "a1", "bob")
    assert bus.sends(b"bob", "msg") == [] and answers(bus, b"alice", "a1") == []
    bus.call(b"bob", "reply", message="yes")
    ask(bus, b"alice", "a1", "bob")
    assert answers(bus, b"alice", "a1")[0]["message"] == "yes"


def test_noninteractive_child_reporting_completed_becomes_terminal():
    bus = three()
    bus.hello("child", sessionKind="noninteractive")
    ask(bus, b"alice", "a1", "child")
    bus.feed(b"child", envelope("status", status="completed"))
    assert answers(bus, b"alice", "a1")[0]["code"] == "terminal_child"
    ask(bus, b"alice", "a2", "child")
    assert answers(bus, b"alice", "a2")[0]["error"] == "Target noninteractive child is terminal and cannot reply"


def test_interactive_sessions_cannot_report_a_terminal_status():
    bus = three()
    out = bus.feed(b"bob", envelope("status", id="s1", status="completed"))
    assert out[0].env["code"] == "invalid_status"


def test_supervisor_ask_needs_a_message():
    bus = supervised()
    out = bus.feed(b"child", envelope("supervisor", id="s1", message=""))
    assert result_for(out, b"child", "s1")["code"] == "missing_param"


def test_a_send_with_reply_to_answers_the_ask_like_reply():
    bus = three()
    ask(bus, b"alice", "a1", "bob")
    result = bus.call(b"bob", "send", msg_id="s1", to="alice", message="yes", replyTo="a1")
    assert result["ok"] and result["replyTo"] == "a1" and result["to"] == ALICE
    (answer,) = answers(bus, b"alice", "a1")
    assert answer["ok"] is True and answer["message"] == "yes"
    assert bus.call(b"bob", "pending")["pending"] == []


def test_a_send_with_a_fabricated_reply_to_is_refused_and_not_delivered():
    bus = three()
    result = bus.call(b"bob", "send", msg_id="s1", to="alice", message="hi",
                      replyTo="11111111-2222-4333-8444-555555555555")
    assert result["code"] == "unknown_thread"
    assert bus.sends(b"alice", "msg") == []


def test_a_send_with_reply_to_from_another_sender_is_refused():
    bus = three()
    ask(bus, b"alice", "a1", "bob")
    result = bus.call(b"bob", "send", msg_id="s1", to="carol", message="yes", replyTo="a1")
    assert result["code"] == "thread_sender_mismatch"
    assert answers(bus, b"alice", "a1") == []


def test_reply_to_an_ordinary_message_that_is_not_the_current_turn_is_refused():
    bus = three()
    bus.call(b"alice", "send", msg_id="m1", to="bob", message="first")
    bus.call(b"alice", "send", msg_id="m2", to="bob", message="second")
    stale = bus.call(b"bob", "reply", msg_id="r1", message="re", replyTo="m1", currentTurn="m2")
    assert stale["code"] == "unknown_thread"
    fresh = bus.call(b"bob", "reply", msg_id="r2", message="re", replyTo="m2", currentTurn="m2")
    assert fresh["ok"] and fresh["replyTo"] == "m2"


def test_reply_in_a_turn_whose_sender_left_fails_instead_of_answering_another_ask():
    bus = three()
    bus.call(b"carol", "send", msg_id="m1", to="bob", message="fyi")
    ask(bus, b"alice", "a1", "bob")
    bus.feed(b"carol", envelope("bye", id="bye1"))
    result = bus.call(b"bob", "reply", msg_id="r1", message="meant for carol", currentTurn="m1")
    assert result["code"] == "stale_turn" and "m1" in result["error"]
    assert answers(bus, b"alice", "a1") == []


def test_reply_in_a_turn_whose_ask_timed_out_fails_instead_of_answering_another():
    bus = three(liveness_s=10_000)
    ask(bus, b"alice", "a1", "bob", timeout=5)
    bus.advance(6.0)
    ask(bus, b"carol", "c1", "bob")
    result = bus.call(b"bob", "reply", msg_id="r1", message="late", currentTurn="a1")
    assert result["code"] == "stale_turn"
    assert answers(bus, b"carol", "c1") == []


def test_once_the_turn_is_answered_reply_falls_back_to_the_single_pending_ask():
    bus = three()
    ask(bus, b"alice", "a1", "bob")
    assert bus.call(b"bob", "reply", msg_id="r1", message="one", currentTurn="a1")["ok"]
    ask(bus, b"carol", "c1", "bob")
    result = bus.call(b"bob", "reply", msg_id="r2", message="two", currentTurn="a1")
    assert result["ok"] and result["replyTo"] == "c1"


def test_a_per_call_timeout_may_exceed_the_configured_default():
    bus = three(liveness_s=10_000, ask_timeout_s=2.0)
    ask(bus, b"alice", "a1", "bob", timeout=5)
    bus.advance(3.0)
    assert answers(bus, b"alice", "a1") == []
    bus.advance(2.0)
    assert answers(bus, b"alice", "a1")[0]["code"] == "ask_timeout"


def test_once_an_ordinary_turn_is_answered_a_bare_reply_goes_to_the_single_waiting_ask():
    bus = three()
    bus.call(b"alice", "send", msg_id="m1", to="bob", message="fyi")
    assert bus.call(b"bob", "reply", msg_id="r1", message="thanks", currentTurn="m1")["replyTo"] == "m1"
    ask(bus, b"carol", "c1", "bob")
    result = bus.call(b"bob", "reply", msg_id="r2", message="answer", currentTurn="m1")
    assert result["ok"] and result["replyTo"] == "c1"
    assert answers(bus, b"carol", "c1")[0]["message"] == "answer"


def test_an_answered_ordinary_turn_with_no_ask_waiting_is_answered_again():
    bus = three()
    bus.call(b"alice", "send", msg_id="m1", to="bob", message="fyi")
    bus.call(b"bob", "reply", msg_id="r1", message="one", currentTurn="m1")
    assert bus.call(b"bob", "reply", msg_id="r2", message="two", currentTurn="m1")["replyTo"] == "m1"
