"""Pipelined sends refused ``target_backlogged`` are held and sent again (client.backpressure)."""

from __future__ import annotations

from client.backpressure import FIRST_WINDOW, HOLD_S, RESEND_DELAY_S
from schemas.protocol import envelope

from .test_client_protocol import connected_peer, result

REFUSAL = {"ok": False, "code": "target_backlogged", "error": "bob is not reading"}


def refuse(peer, *ids):
    peer.feed(*[result(i, **REFUSAL) for i in ids])


def sent_ids(peer) -> list[str]:
    return [i for env in peer.sent() if env["k"] == "sends" for i in env["ids"]]


def test_a_refused_send_is_held_not_answered_and_goes_again_under_its_id_after_a_pause():
    peer = connected_peer()
    owed = [peer.send("bob", f"m{n}", "hi") for n in range(3)]
    assert sent_ids(peer) == ["m0", "m1", "m2"]
    peer.feed(envelope("acks", ids=["m0"]))
    refuse(peer, "m1", "m2")
    assert [o for o, _ in peer.answers()] == [owed[0]]
    peer.jump(RESEND_DELAY_S / 2)
    assert sent_ids(peer) == []
    peer.jump(RESEND_DELAY_S)
    assert sent_ids(peer) == ["m1", "m2"]
    peer.feed(envelope("acks", ids=["m1", "m2"]))
    assert [o for o, _ in peer.answers()] == owed[1:]


def test_sends_queued_while_held_go_after_the_held_ones_never_before():
    peer = connected_peer()
    peer.send("bob", "m1", "a"), peer.send("bob", "m2", "b")
    sent_ids(peer)
    refuse(peer, "m1")
    peer.send("bob", "m3", "c")
    assert sent_ids(peer) == []                 # m3 waits behind m1
    refuse(peer, "m2")                          # the one on the wire, refused behind m1
    peer.jump(RESEND_DELAY_S)
    assert sent_ids(peer) == ["m1", "m2", "m3"]


def test_held_sends_wait_until_every_send_to_that_target_on_the_wire_is_answered():
    peer = connected_peer()
    peer.send("bob", "m1", "a"), peer.send("bob", "m2", "b")
    sent_ids(peer)
    refuse(peer, "m1")
    peer.jump(RESEND_DELAY_S * 2)
    assert sent_ids(peer) == []                 # m2 still owes its answer
    refuse(peer, "m2")
    peer.jump(0)
    assert sent_ids(peer) == ["m1", "m2"]


def test_sends_to_other_targets_are_not_held():
    peer = connected_peer()
    peer.send("bob", "m1", "a")
    sent_ids(peer)
    refuse(peer, "m1")
    peer.send("carol", "c1", "b")
    assert sent_ids(peer) == ["c1"]


def test_held_sends_go_as_a_small_probe_that_doubles_while_it_is_taken_whole():
    peer = connected_peer()
    ids = [f"m{n}" for n in range(4 * FIRST_WINDOW)]
    for msg_id in ids:
        peer.send("bob", msg_id, "x")
    sent_ids(peer)
    refuse(peer, *ids)
    peer.jump(RESEND_DELAY_S)
    probe = sent_ids(peer)
    assert probe == ids[:FIRST_WINDOW]
    peer.feed(envelope("acks", ids=probe))
    peer.jump(0)
    assert sent_ids(peer) == ids[FIRST_WINDOW:3 * FIRST_WINDOW]


def test_held_sends_fail_with_the_refusal_when_the_target_takes_none_for_long():
    peer = connected_peer()
    owed = peer.send("bob", "m1", "a")
    sent_ids(peer)
    refuse(peer, "m1")
    while True:
        peer.jump(RESEND_DELAY_S)
        if sent_ids(peer):
            refuse(peer, "m1")
        answers = peer.answers()
        if answers:
            break
        assert peer.now < 1000.0 + HOLD_S + 1, "never given up"
    assert answers == [(owed, {"ok": False, "code": "target_backlogged",
                               "error": "bob is not reading"})]


def test_a_rewelcome_sends_held_sends_again_in_their_order():
    peer = connected_peer()
    peer.send("bob", "m1", "a"), peer.send("bob", "m2", "b")
    sent_ids(peer)
    refuse(peer, "m1", "m2")
    peer.feed(result("x", code="not_connected", ok=False))
    (hello,) = peer.sent()
    peer.welcome(hello)
    assert sent_ids(peer) == ["m1", "m2"]
