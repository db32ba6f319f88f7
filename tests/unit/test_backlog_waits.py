"""Pipelined sends past a target's backlog bound wait (broker.core.sessions.backlog).

The bound is 1,000 bytes here; a 100-character text costs 140 bytes of it (its
text and ``ITEM_BYTES``), so seven fit.
"""

from broker.core.sessions.backlog import ITEM_BYTES, LATCH_S
from schemas.protocol import envelope

from .harness import Bus

TEXT = "x" * 100
COST = len(TEXT) + ITEM_BYTES


def pair():
    bus = Bus(liveness_s=1e9, max_backlog_bytes=1000)
    bus.hello("alice")
    bus.hello("bob")
    return bus


def sends(bus, *ids, to="bob"):
    return bus.feed(b"alice", envelope("sends", to=to, ids=list(ids), messages=[TEXT] * len(ids)))


def delivered(bus):
    return [i for env in bus.sends(b"bob", "msgs") for i in env["ids"]]


def refused(bus):
    return [env["re"] for env in bus.sends(b"alice", "result")
            if env.get("code") == "target_backlogged"]


def read_all(bus, written: int):
    """The shell wrote ``written`` bytes to bob, and bob reports reading them."""
    bus.wrote({b"bob": written})
    bus.feed(b"bob", envelope("hb", read=written))


def test_a_pipelined_run_is_admitted_while_it_fits_and_the_rest_is_refused():
    bus = pair()
    ids = [f"m{n}" for n in range(10)]
    sends(bus, *ids)
    fit = 1000 // COST
    assert delivered(bus) == ids[:fit]
    assert refused(bus) == ids[fit:]


def test_a_run_of_non_ascii_texts_is_counted_in_bytes():
    bus = pair()
    wide = "é" * 100                          # 200 bytes in UTF-8
    bus.feed(b"alice", envelope("sends", to="bob", ids=[f"m{n}" for n in range(10)],
                                messages=[wide] * 10))
    assert delivered(bus) == [f"m{n}" for n in range(1000 // (200 + ITEM_BYTES))]


def test_what_was_handed_earlier_in_the_round_counts_before_it_is_written():
    bus = pair()
    sends(bus, "a1", "a2", "a3", "a4")
    sends(bus, "b1", "b2", "b3", "b4")          # same round: nothing written yet
    assert delivered(bus) == ["b1", "b2", "b3"]
    assert refused(bus) == ["b4"]


def test_a_refused_pipelined_id_is_not_remembered_and_goes_through_once_the_target_reads():
    bus = pair()
    sends(bus, *[f"m{n}" for n in range(10)])
    read_all(bus, 7 * COST)
    sends(bus, "m7", "m8", "m9")
    assert delivered(bus) == ["m7", "m8", "m9"]
    assert refused(bus) == []


def test_after_a_refusal_later_sends_wait_until_the_first_refused_comes_again():
    bus = pair()
    sends(bus, *[f"m{n}" for n in range(10)])             # m7.. refused
    read_all(bus, 7 * COST)
    sends(bus, "m10", "m11")                              # overtaking: refused
    assert delivered(bus) == [] and refused(bus) == ["m10", "m11"]
    sends(bus, "m7", "m8", "m9", "m10", "m11")
    assert delivered(bus) == ["m7", "m8", "m9", "m10", "m11"]


def test_a_latch_nobody_comes_back_for_lapses():
    bus = pair()
    sends(bus, *[f"m{n}" for n in range(10)])
    read_all(bus, 7 * COST)
    bus.now += LATCH_S
    sends(bus, "n1")
    assert delivered(bus) == ["n1"]


def test_a_latch_holds_only_that_sender_and_target():
    bus = pair()
    bus.hello("carol")
    sends(bus, *[f"m{n}" for n in range(10)])
    read_all(bus, 7 * COST)
    sends(bus, "c1", to="carol")
    assert [i for env in bus.sends(b"carol", "msgs") for i in env["ids"]] == ["c1"]


def test_a_blocking_send_refused_for_the_backlog_gets_the_same_refusal_when_retried():
    bus = pair()
    bus.wrote({b"bob": 1500})
    first = bus.call(b"alice", "send", msg_id="s1", to="bob", message="hi")
    assert first["code"] == "target_backlogged"
    bus.feed(b"bob", envelope("hb", read=1500))
    assert bus.call(b"alice", "send", msg_id="s1", to="bob", message="hi") == first
