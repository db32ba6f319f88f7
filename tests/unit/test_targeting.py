"""Live send and target resolution rules."""

from .harness import Bus, uuid_from
from broker.core.kernel import inputs

ALICE, BOB = uuid_from(0xA0000001), uuid_from(0xA0000002)


def two_sessions(**bob_fields):
    bus = Bus()
    bus.hello("alice")
    bus.hello("Bob", **bob_fields)
    return bus


def test_send_by_full_id_delivers_and_answers_delivered():
    bus = two_sessions()
    result = bus.call(b"alice", "send", msg_id="m1", to=BOB, message="hi")
    assert result == {"ok": True, "delivered": True, "to": BOB, "toName": "Bob", "messageId": "m1"}
    (msg,) = bus.sends(b"Bob", "msg")
    assert msg["id"] == "m1" and msg["from"] == ALICE and msg["fromName"] == "alice"
    assert msg["message"] == "hi" and msg["attachments"] == [] and msg["expectsReply"] is False
    assert msg["sentAt"] == bus.now


def test_send_by_case_insensitive_name():
    bus = two_sessions()
    assert bus.call(b"alice", "send", to="bOB", message="hi")["to"] == BOB


def test_send_by_unique_8_hex_prefix():
    bus = two_sessions()
    assert bus.call(b"alice", "send", to=BOB[:8], message="hi")["to"] == BOB
    assert bus.call(b"alice", "send", to=BOB[:8].upper(), message="hi")["to"] == BOB


def test_other_truncations_are_rejected():
    bus = two_sessions()
    for to in (BOB[:6], BOB[:12], BOB[:35]):
        assert bus.call(b"alice", "send", to=to, message="hi")["code"] == "invalid_target"


def test_send_by_atomic_session_id_when_exactly_one_visible_session_holds_it():
    bus = two_sessions(atomicSessionId="resume-42")
    assert bus.call(b"alice", "send", to="resume-42", message="hi")["to"] == BOB


def test_atomic_session_id_shared_by_two_visible_sessions_is_ambiguous():
    bus = two_sessions(atomicSessionId="resume-42")
    bus.hello("carol", atomicSessionId="resume-42")
    assert bus.call(b"alice", "send", to="resume-42", message="hi")["code"] == "ambiguous_target"


def test_exact_name_wins_over_atomic_session_id():
    bus = two_sessions(atomicSessionId="carol")
    bus.hello("carol")
    result = bus.call(b"alice", "send", to="carol", message="hi")
    assert result["toName"] == "carol"


def test_self_send_is_refused_by_id_name_and_prefix():
    bus = two_sessions()
    for to in (ALICE, "ALICE", ALICE[:8]):
        result = bus.call(b"alice", "send", to=to, message="hi")
        assert result["code"] == "self_target", to
        assert result["error"] == "Cannot message the current session"


def test_ambiguous_name_lists_only_visible_candidates():
    bus = two_sessions()
    bus.hello("bob", identity=b"bob-2")
    bus.hello("bob", identity=b"bob-hidden", group="secret")
    result = bus.call(b"alice", "send", to="bob", message="hi")
    assert result["code"] == "ambiguous_target"
    assert BOB in result["error"] and uuid_from(0xA0000003) in result["error"]
    assert uuid_from(0xA0000004) not in result["error"]


def test_full_id_in_a_non_intersecting_group_is_refused_with_the_spec_text():
    bus = two_sessions(group="other")
    result = bus.call(b"alice", "send", to=BOB, message="hi")
    assert result["code"] == "different_group"
    assert result["error"] == "Target session is in a different intercom group"
    assert bus.sends(b"Bob", "msg") == []


def test_names_and_prefixes_in_other_groups_are_not_found():
    bus = two_sessions(group="other")
    assert bus.call(b"alice", "send", to="bob", message="hi")["code"] == "target_not_found"
    assert bus.call(b"alice", "send", to=BOB[:8], message="hi")["code"] == "target_not_found"


def test_send_needs_to_and_message():
    bus = two_sessions()
    assert bus.call(b"alice", "send", message="hi")["code"] == "missing_param"
    assert bus.call(b"alice", "send", to="bob")["code"] == "missing_param"


def test_attachments_are_validated_and_kept_in_order_with_duplicates():
    bus = two_sessions()
    files = [{"type": "file", "name": "a.py", "content": "x"},
             {"type": "snippet", "name": "a.py", "content": "x", "language": "python"},
             {"type": "file", "name": "a.py", "content": "x"}]
    assert bus.call(b"alice", "send", to="bob", message="see", attachments=files)["ok"]
    assert bus.sends(b"Bob", "msg")[0]["attachments"] == files
    bad = [{"type": "image", "name": "a", "content": "x"}]
    assert bus.call(b"alice", "send", to="bob", message="m", attachments=bad)["code"] == "invalid_attachment"
    missing = [{"type": "file", "name": "a"}]
    assert bus.call(b"alice", "send", to="bob", message="m", attachments=missing)["code"] == "invalid_attachment"


def test_unknown_target_is_not_found():
    bus = two_sessions()
    assert bus.call(b"alice", "send", to="nobody", message="hi")["code"] == "target_not_found"


def test_quiet_sends_are_acknowledged_together_and_failures_answered_in_full():
    bus = two_sessions()
    batch = [{"v": 1, "k": "call", "id": f"q{n}", "action": "send", "to": "bob", "message": "m",
              "quiet": True} for n in range(3)]
    batch.append({"v": 1, "k": "call", "id": "bad", "action": "send", "to": "nobody",
                  "message": "m", "quiet": True})
    bus.last = bus.engine.handle(inputs.Frame(b"alice", batch, bus.now))
    assert [e["ids"] for e in bus.sends(b"alice", "acks")] == [["q0", "q1", "q2"]]
    (failure,) = bus.sends(b"alice", "result")
    assert failure["re"] == "bad" and failure["code"] == "target_not_found"
    assert len(bus.sends(b"Bob", "msg")) == 3


def test_a_prefix_shared_with_the_caller_is_ambiguous_not_the_other_session():
    bus = Bus()
    bus.engine.state.new_id = iter([uuid_from(0xA0000001), "a0000001-0000-4000-8000-00000000beef"]).__next__
    bus.hello("alice")
    bus.hello("bob")
    result = bus.call(b"alice", "send", to="a0000001", message="hi")
    assert result["code"] == "ambiguous_target"
    assert "alice" in result["error"] and "bob" in result["error"]


def supervised(**child_fields):
    """A parent in "team", a bystander there too, and the parent's child isolated in
    "isolated" (launched with the parent's child grant)."""
    bus = Bus()
    parent = bus.hello("parent", group="team")["sessionId"]
    bus.hello("bystander", group="team")
    bus.hello("child", group="isolated", parent=parent, **child_fields)
    return bus, parent


def test_an_isolated_child_sends_to_its_supervisor_by_8_hex_prefix_and_by_full_id():
    bus, parent = supervised()
    for to in (parent[:8], parent[:8].upper(), parent):
        sent = bus.call(b"child", "send", to=to, message=f"to {to}")
        assert (sent["delivered"], sent["to"]) == (True, parent), sent
        assert [m["message"] for m in bus.sends(b"parent", "msg")] == [f"to {to}"]


def test_an_isolated_child_asks_its_supervisor_by_prefix_and_gets_the_reply():
    bus, parent = supervised()
    bus.feed(b"child", {"v": 1, "k": "call", "id": "q1", "action": "ask", "to": parent[:8],
                        "message": "which branch?"})
    (msg,) = bus.sends(b"parent", "msg")
    assert (msg["id"], msg["expectsReply"]) == ("q1", True)
    bus.feed(b"parent", {"v": 1, "k": "call", "id": "r1", "action": "reply", "replyTo": "q1",
                         "message": "main"})
    answer = [c.env for c in bus.last if getattr(c, "identity", None) == b"child"
              and c.env.get("re") == "q1"]
    assert [(a["ok"], a["message"]) for a in answer] == [(True, "main")]


def test_selecting_its_supervisor_opens_no_other_session_to_an_isolated_child():
    bus, parent = supervised()
    bystander = bus.engine.registry.by_identity[b"bystander"].id
    assert bus.call(b"child", "send", to=bystander, message="x")["code"] == "different_group"
    assert bus.call(b"child", "send", to=bystander[:8], message="x")["code"] == "target_not_found"
    assert bus.call(b"child", "send", to="parent", message="x")["code"] == "target_not_found"
    assert bus.call(b"child", "list")["sessions"] == []
    child = bus.engine.registry.by_identity[b"child"].id
    # Not the reverse either: the parent reaches its child only through a shared group.
    assert bus.call(b"parent", "send", to=child[:8], message="x")["code"] == "target_not_found"
    assert bus.call(b"parent", "send", to=child, message="x")["code"] == "different_group"


def test_a_prefix_the_supervisor_shares_with_a_visible_session_is_ambiguous():
    bus = Bus()
    bus.engine.state.new_id = iter([uuid_from(0xA0000001), uuid_from(0xA0000002),
                                    "a0000001-0000-4000-8000-00000000beef"]).__next__
    parent = bus.hello("parent", group="team")["sessionId"]
    bus.hello("child", group="isolated", parent=parent)
    bus.hello("twin", group="isolated")
    result = bus.call(b"child", "send", to=parent[:8], message="x")
    assert result["code"] == "ambiguous_target"
    assert "parent" in result["error"] and "twin" in result["error"]


