"""The MCP server's hand-over bookkeeping (client.mcp_inbox): exactly once, in order."""

from __future__ import annotations

from hypothesis import given, strategies as st

from client.inbox import MESSAGE_OVERHEAD_BYTES
from client.mcp_inbox import PUSH_PREVIEW_CHARS, RECENT_IDS, Handover, push_for


def msg(i: int, **extra) -> dict:
    return {"id": f"m{i}", "from": "s-1", "fromName": "alice", "message": f"text {i}",
            "attachments": [], "sentAt": 1.0, "expectsReply": False, **extra}


def test_take_returns_messages_in_arrival_order_then_nothing():
    handover = Handover()
    for i in range(3):
        assert handover.arrived(msg(i))
    assert [m["id"] for m in handover.take()] == ["m0", "m1", "m2"]
    assert handover.take() == []


def test_a_message_arriving_after_a_take_goes_to_the_next_take_only():
    handover = Handover()
    handover.arrived(msg(0))
    first = handover.take()
    handover.arrived(msg(1))
    assert [m["id"] for m in first] == ["m0"]
    assert [m["id"] for m in handover.take()] == ["m1"]


def test_a_copy_of_a_held_or_handed_over_id_is_refused():
    handover = Handover()
    assert handover.arrived(msg(0))
    assert not handover.arrived(msg(0))
    handover.take()
    assert not handover.arrived(msg(0))
    assert handover.take() == []
    assert handover.statistics().copies_refused == 2


def test_ids_are_forgotten_only_past_two_generations():
    handover = Handover()
    for i in range(RECENT_IDS // 2):
        handover.arrived(msg(i))
    handover.take()
    assert not handover.arrived(msg(0))        # in the old generation still


# A take is whole (None) or bounded in chars, as a host hook's is (0: the oldest alone).
@given(st.lists(st.one_of(st.integers(0, 40).map(lambda i: ("arrive", i)),
                          st.sampled_from([None, 0, 150, 600]).map(lambda n: ("take", n))),
                max_size=200))
def test_every_accepted_message_is_handed_over_exactly_once_in_order(steps):
    handover = Handover()
    accepted, handed = [], []
    for op, i in steps:
        if op == "arrive":
            if handover.arrived(msg(i)):
                accepted.append(f"m{i}")
        else:
            handed += [m["id"] for m in handover.take(i)]
    handed += [m["id"] for m in handover.take()]
    assert handed == accepted
    assert len(set(handed)) == len(handed)
    stats = handover.statistics()
    assert (stats.arrived, stats.handed_over, stats.held) == (len(accepted), len(accepted), 0)


def test_a_push_names_the_sender_and_carries_string_meta():
    push = push_for(msg(7, expectsReply=True))
    assert push["content"].startswith("alice (s-1) asks")
    assert "text 7" in push["content"]
    assert push["meta"] == {"message_id": "m7", "from": "s-1", "from_name": "alice",
                            "expects_reply": "true", "sent_at": "1.0"}


def test_a_push_cuts_a_long_text():
    push = push_for(msg(1, message="x" * (PUSH_PREVIEW_CHARS + 10)))
    assert "x" * PUSH_PREVIEW_CHARS + " [...]" in push["content"]
    assert "x" * (PUSH_PREVIEW_CHARS + 1) not in push["content"]


def test_the_current_turn_is_the_newest_message_handed_over_not_one_held():
    handover = Handover()
    assert handover.current is None
    handover.arrived(msg(0))
    handover.arrived(msg(1))
    assert handover.current is None
    handover.take()
    handover.arrived(msg(2))
    assert handover.current["id"] == "m1"
    handover.take()
    assert handover.current["id"] == "m2"


def test_the_handover_is_full_at_its_limit_until_a_take():
    handover = Handover(limit_bytes=MESSAGE_OVERHEAD_BYTES * 3)
    for i in range(2):
        handover.arrived(msg(i, message=""))
    assert not handover.full
    handover.arrived(msg(2, message=""))
    assert handover.full and handover.size == MESSAGE_OVERHEAD_BYTES * 3
    handover.take()
    assert not handover.full and handover.size == 0


def test_a_take_bounded_in_chars_takes_the_oldest_that_fit_and_leaves_the_rest():
    handover = Handover()
    for i in range(3):
        handover.arrived(msg(i, message="x" * 100))
    size_before = handover.size
    first = handover.take(max_chars=300)            # one message's JSON is about 200 chars
    assert [m["id"] for m in first] == ["m0"]
    assert handover.size == size_before - (MESSAGE_OVERHEAD_BYTES + 100)
    assert handover.current["id"] == "m0"
    assert [m["id"] for m in handover.take()] == ["m1", "m2"]


def test_a_bounded_take_always_takes_the_oldest_message_however_long():
    handover = Handover()
    handover.arrived(msg(0, message="x" * 5000))
    handover.arrived(msg(1))
    assert [m["id"] for m in handover.take(max_chars=10)] == ["m0"]
    assert [m["id"] for m in handover.take(max_chars=10)] == ["m1"]
    assert handover.take(max_chars=10) == [] and handover.size == 0
