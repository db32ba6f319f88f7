"""Receipts in the core (broker.core.messaging.receipts), on the fake clock: a live
message is kept until its receiver's client reports it read (or seen), sent again on a
new connection or to a client that takes the id back, parked when the session ends and
reported undelivered once when nobody comes back; the sender reads its state."""

from __future__ import annotations

from broker.core import Send
from schemas.protocol import envelope

from tests.unit.brokers_in_memory import linked_pair
from tests.unit.harness import Bus, result_for
from tests.unit.test_workflow import hosted, queue, stage

WINDOW_S = 30.0


def bus(**limits) -> Bus:
    return Bus(reclaim_window_s=WINDOW_S, **limits)


def receipt(b: Bus, identity: bytes, msg_id: str) -> dict:
    return b.call(identity, "status", messageId=msg_id)


def delivered_ids(out: list, identity: bytes) -> list[str]:
    ids = []
    for command in out:
        if isinstance(command, Send) and command.identity == identity:
            env = command.env
            if env["k"] == "msg":
                ids.append(env["id"])
            elif env["k"] == "msgs":
                ids += env["ids"]
    return ids


def written_and_read(b: Bus, identity: bytes, size: int = 10_000, seen: str | None = None) -> None:
    """The shell wrote ``size`` bytes to ``identity``, and its client read them all."""
    b.wrote({identity: size})
    hb = {"read": size} if seen is None else {"read": size, "seenThrough": seen}
    b.feed(identity, envelope("hb", **hb))


def wait_out(b: Bus, seconds: float, *alive: bytes) -> list:
    """``seconds`` pass in steps of a second; the sessions ``alive`` heartbeat meanwhile.
    Returns everything the broker emitted."""
    out = []
    for _ in range(int(seconds)):
        out += b.advance(1.0)
        for identity in alive:
            out += b.feed(identity, envelope("hb"))
    return out


def undelivered(out: list, identity: bytes) -> list[tuple[str, str]]:
    return [(c.env["messageId"], c.env["reason"]) for c in out
            if isinstance(c, Send) and c.identity == identity and c.env["k"] == "event"
            and c.env["event"] == "undelivered"]


def test_a_receipt_reaches_read_when_the_bytes_are_read_and_seen_when_told():
    b = bus()
    b.hello("alice")
    bob = b.hello("bob")
    b.call(b"alice", "send", "m1", to="bob", message="hi")
    first = receipt(b, b"alice", "m1")
    assert (first["state"], first["to"], first["toName"]) == ("delivered", bob["sessionId"], "bob")
    assert first["deliveredAt"] == b.engine.state.wall and first["readAt"] is None
    b.wrote({b"bob": 100})
    b.feed(b"bob", envelope("hb", read=99))              # not all of its frame yet
    assert receipt(b, b"alice", "m1")["state"] == "delivered"
    b.feed(b"bob", envelope("hb", read=100))
    assert receipt(b, b"alice", "m1")["state"] == "read"
    b.feed(b"bob", envelope("hb", read=100, seenThrough="m1"))
    seen = receipt(b, b"alice", "m1")
    assert seen["state"] == "seen" and seen["seenAt"] is not None
    b.call(b"bob", "reply", "r1", message="yes", replyTo="m1", currentTurn="m1")
    assert receipt(b, b"alice", "m1")["state"] == "replied"


def test_seen_through_an_id_covers_every_message_delivered_before_it():
    b = bus()
    b.hello("alice")
    b.hello("bob")
    b.feed(b"alice", envelope("sends", to="bob", ids=["p1", "p2", "p3"],
                              messages=["a", "b", "c"]))
    b.call(b"alice", "send", "m4", to="bob", message="d")
    written_and_read(b, b"bob", seen="p2")
    assert [receipt(b, b"alice", i)["state"] for i in ("p1", "p2", "p3", "m4")] == \
        ["seen", "seen", "read", "read"]
    b.feed(b"bob", envelope("hb", read=10_000, seenThrough="m4"))
    assert {receipt(b, b"alice", i)["state"] for i in ("p1", "p2", "p3", "m4")} == {"seen"}


def test_only_the_sender_reads_a_receipt():
    b = bus()
    b.hello("alice")
    b.hello("bob")
    b.hello("carol")
    b.call(b"alice", "send", "m1", to="bob", message="hi")
    for asker, msg_id in ((b"carol", "m1"), (b"bob", "m1"), (b"alice", "nope")):
        answer = receipt(b, asker, msg_id)
        assert (answer["ok"], answer["code"]) == (False, "unknown_message")


def test_what_a_client_did_not_read_goes_again_on_its_new_connection_and_only_that():
    b = bus()
    b.hello("alice")
    bob = b.hello("bob")
    b.call(b"alice", "send", "m1", to="bob", message="one")
    written_and_read(b, b"bob", 500)
    b.call(b"alice", "send", "m2", to="bob", message="two")
    b.call(b"alice", "send", "m3", to="bob", message="three")
    b.wrote({b"bob": 200})                               # written, never read: the link died
    out = b.hello("bob", identity=b"bob-again", sessionId=bob["sessionId"], token=bob["token"])
    assert out["sessionId"] == bob["sessionId"]
    assert delivered_ids(b.last, b"bob-again") == ["m2", "m3"]
    assert b.engine.stats["receipts.sent_again"] == 2


def test_a_session_keeping_until_seen_gets_again_what_it_read_and_never_showed():
    b = bus()
    b.hello("alice")
    bob = b.hello("bob", keepUntil="seen")
    for n in (1, 2, 3):
        b.call(b"alice", "send", f"m{n}", to="bob", message=f"text {n}")
    written_and_read(b, b"bob", seen="m1")
    assert [receipt(b, b"alice", f"m{n}")["state"] for n in (1, 2, 3)] == ["seen", "read", "read"]
    b.hello("bob", identity=b"bob-2", sessionId=bob["sessionId"], token=bob["token"])
    assert delivered_ids(b.last, b"bob-2") == ["m2", "m3"]


def test_a_partly_seen_batch_goes_again_without_its_seen_messages():
    b = bus()
    b.hello("alice")
    bob = b.hello("bob", keepUntil="seen")
    b.feed(b"alice", envelope("sends", to="bob", ids=["p1", "p2", "p3"], messages=["a", "b", "c"]))
    written_and_read(b, b"bob", seen="p1")
    b.hello("bob", identity=b"bob-2", sessionId=bob["sessionId"], token=bob["token"])
    (again,) = [c.env for c in b.last if isinstance(c, Send) and c.env["k"] == "msgs"]
    assert (again["ids"], again["messages"]) == (["p2", "p3"], ["b", "c"])


def test_an_ended_session_gets_its_messages_back_when_its_id_is_taken_back_in_time():
    b = bus()
    b.hello("alice")
    bob = b.hello("bob")
    b.call(b"alice", "send", "m1", to="bob", message="one")
    b.feed(b"bob", envelope("bye"))
    assert undelivered(wait_out(b, WINDOW_S / 2, b"alice"), b"alice") == []
    b.hello("bob", identity=b"bob-2", sessionId=bob["sessionId"], token=bob["token"])
    out = b.last + b.commit()
    assert delivered_ids(out, b"bob-2") == ["m1"]
    assert undelivered(wait_out(b, WINDOW_S + 1, b"alice", b"bob-2"), b"alice") == []
    assert b.engine.state.receipts.parked == {}


def test_messages_nobody_came_back_for_are_reported_undelivered_once():
    b = bus()
    b.hello("alice")
    b.hello("bob", keepUntil="seen")
    for n in (1, 2):
        b.call(b"alice", "send", f"m{n}", to="bob", message=f"text {n}")
    b.wrote({b"bob": 100})
    b.feed(b"bob", envelope("hb", read=100))       # m1 and m2 read, never seen
    b.call(b"alice", "send", "m3", to="bob", message="text 3")     # never read
    b.feed(b"bob", envelope("bye"))
    out = wait_out(b, WINDOW_S + 1, b"alice")
    assert undelivered(out, b"alice") == [("m1", "never_seen"), ("m2", "never_seen"),
                                          ("m3", "session_ended")]
    assert undelivered(wait_out(b, WINDOW_S + 1, b"alice"), b"alice") == []
    gone = receipt(b, b"alice", "m3")
    assert (gone["state"], gone["reason"]) == ("undelivered", "session_ended")
    assert gone["undeliveredAt"] >= gone["deliveredAt"]


def test_a_bye_with_its_last_reports_leaves_nothing_to_report():
    b = bus()
    b.hello("alice")
    b.hello("bob")
    b.call(b"alice", "send", "m1", to="bob", message="one")
    b.wrote({b"bob": 100})
    b.feed(b"bob", envelope("bye", read=100, seenThrough="m1"))
    assert undelivered(wait_out(b, WINDOW_S + 1, b"alice"), b"alice") == []
    assert receipt(b, b"alice", "m1")["state"] == "seen"


def test_parked_messages_past_the_backlog_bound_are_reported_bound_reached_oldest_first():
    b = bus(max_backlog_bytes=200)
    b.hello("alice")
    b.hello("bob")
    for n in range(3):
        b.call(b"alice", "send", f"m{n}", to="bob", message="x" * 60)
        b.wrote({b"bob": 100})
        b.feed(b"bob", envelope("hb", read=0))
    b.feed(b"bob", envelope("bye"))
    assert undelivered(b.last, b"alice") == [("m0", "bound_reached")]


def test_a_queued_entry_gets_a_receipt_but_its_queue_keeps_it():
    b = hosted(reclaim_window_s=WINDOW_S)
    assert queue(b, b"host", "workflow:r1/plan", "do it", msg_id="q1")["queued"]
    stage(b, "plan", "workflow:r1/plan")
    assert delivered_ids(b.last, b"plan") == ["q1"]
    assert receipt(b, b"host", "q1")["state"] == "delivered"
    b.feed(b"plan", envelope("bye"))
    assert b.engine.state.receipts.parked == {}        # not parked: its queue has it


def test_what_a_broker_kept_follows_its_session_to_the_broker_it_moved_to():
    pair = linked_pair(reclaim_window_s=WINDOW_S)
    alice = pair.hello(pair.a, "alice")
    pair.hello(pair.b, "bob")
    for n in (1, 2):
        pair.call(pair.b, b"bob", "send", f"m{n}", to=alice["sessionId"], message=f"text {n}")
    assert [e["id"] for e in pair.sent(pair.a, b"alice", "msg")] == ["m2"]    # the last feed's
    pair.b.now += 2.5                     # alice's link to A died; her client moves to B
    moved = pair.hello(pair.b, "alice", sessionId=alice["sessionId"], token=alice["token"])
    assert moved["sessionId"] == alice["sessionId"]
    again = [e["id"] for e in pair.sent(pair.b, b"alice", "msg")]
    assert again == ["m1", "m2"]
    answer = result_for(pair.call(pair.b, b"bob", "status", "q", messageId="m1"), b"bob", "q")
    assert answer["state"] == "delivered" and answer["to"] == alice["sessionId"]


def test_each_message_of_one_delivery_has_the_time_it_was_seen():
    b = bus()
    b.hello("alice")
    b.hello("bob")
    b.feed(b"alice", envelope("sends", to="bob", ids=["p1", "p2", "p3"], messages=["a", "b", "c"]))
    written_and_read(b, b"bob", seen="p1")
    b.advance(1.5)
    b.feed(b"bob", envelope("hb", read=10_000, seenThrough="p3"))
    first, third = receipt(b, b"alice", "p1"), receipt(b, b"alice", "p3")
    assert third["seenAt"] - first["seenAt"] == 1.5


def test_a_message_from_a_control_connection_says_it_cannot_be_answered():
    b = bus()
    b.hello("bob")
    b.hello("cli", identity=b"cli", sessionKind="control")
    b.call(b"cli", "send", "c1", to="bob", message="hello from the shell")
    (msg,) = b.sends(b"bob", "msg")
    assert msg["replyable"] is False
    b.hello("alice")
    b.call(b"alice", "send", "a1", to="bob", message="from a session")
    (msg,) = b.sends(b"bob", "msg")
    assert "replyable" not in msg


def test_a_live_send_to_a_stage_path_is_kept_as_any_live_message():
    b = hosted(reclaim_window_s=WINDOW_S)
    welcome = stage(b, "plan", "workflow:r1/plan", instance="i-plan")
    b.call(b"host", "send", "s1", to="workflow:r1/plan", message="now")
    assert delivered_ids(b.last, b"plan") == ["s1"]
    b.wrote({b"plan": 300})                          # written, never read: the link died
    stage(b, "plan", "workflow:r1/plan", identity=b"plan-2", instance="i-plan",
          sessionId=welcome["sessionId"], token=welcome["token"])
    assert delivered_ids(b.last, b"plan-2") == ["s1"]
