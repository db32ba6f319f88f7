"""The inbound gate in the core (broker.core.messaging.inbound_gate), on the fake clock:
held messages are answered ``held``, listed, released in order or dropped, expire after
HOLD_EXPIRY_S with one ``held_settled`` to their sender, stay within their bound, and
pipelined sends are held one by one; capabilities and the policy are in the row."""

from __future__ import annotations

from broker.core import Send
from schemas.attention import HOLD_EXPIRY_S, MAX_HELD_PER_SESSION
from schemas.protocol import envelope

from tests.unit.harness import Bus


def settled(out: list, identity: bytes) -> list[tuple[str, str]]:
    return [(c.env["messageId"], c.env["outcome"]) for c in out
            if isinstance(c, Send) and c.identity == identity and c.env["k"] == "event"
            and c.env["event"] == "held_settled"]


def delivered(out: list, identity: bytes) -> list[str]:
    ids: list[str] = []
    for c in out:
        if isinstance(c, Send) and c.identity == identity and c.env["k"] in ("msg", "msgs"):
            ids += c.env["ids"] if c.env["k"] == "msgs" else [c.env["id"]]
    return ids


def gate(b: Bus, identity: bytes, op: str, **fields) -> dict:
    return b.request(identity, "inbound", op=op, **fields)


def test_held_messages_expire_once_and_their_sender_is_told():
    b = Bus(liveness_s=10 * HOLD_EXPIRY_S)      # nobody goes silent meanwhile
    b.hello("alice")
    b.hello("bob", inbound="hold")
    answer = b.call(b"alice", "send", "m1", to="bob", message="hi")
    assert answer["held"] is True and delivered(b.last, b"bob") == []
    assert b.call(b"alice", "status", messageId="m1")["state"] == "held"
    out = b.advance(HOLD_EXPIRY_S - 1)
    assert settled(out, b"alice") == []
    out = b.advance(2)
    assert settled(out, b"alice") == [("m1", "expired")]
    assert settled(b.advance(HOLD_EXPIRY_S), b"alice") == []          # told once
    assert gate(b, b"bob", "held")["held"] == []
    assert b.call(b"alice", "status", messageId="m1")["state"] == "expired"


def test_a_held_ask_whose_asker_stopped_waiting_leaves_the_list_expired():
    """Its asker got ask_timeout: a release would hand over a question nobody waits for."""
    b = Bus(liveness_s=100)                 # nobody goes silent meanwhile
    b.hello("alice")
    b.hello("bob", inbound="hold")
    b.feed(b"alice", envelope("call", id="q1", action="ask", to="bob", message="ok?", timeout=5))
    assert [h["messageId"] for h in gate(b, b"bob", "held")["held"]] == ["q1"]
    out = b.advance(6)
    (timed_out,) = [c.env for c in out if isinstance(c, Send) and c.identity == b"alice"
                    and c.env.get("re") == "q1"]
    assert timed_out["code"] == "ask_timeout"
    assert settled(out, b"alice") == [("q1", "expired")]
    assert gate(b, b"bob", "held")["held"] == []
    assert gate(b, b"bob", "release", messageId="q1")["code"] == "unknown_held"
    assert b.call(b"alice", "status", messageId="q1")["state"] == "expired"


def test_a_held_ask_whose_asker_left_leaves_the_list_expired():
    b = Bus(liveness_s=100)
    b.hello("alice")
    b.hello("bob", inbound="hold")
    b.feed(b"alice", envelope("call", id="q1", action="ask", to="bob", message="ok?"))
    b.feed(b"alice", envelope("bye"))
    assert gate(b, b"bob", "held")["held"] == []
    assert b.engine.stats["inbound.expired"] == 1


def test_a_held_ask_whose_target_left_fails_and_leaves_the_list_expired():
    b = Bus(liveness_s=100)
    b.hello("alice")
    b.hello("bob", inbound="hold")
    b.feed(b"alice", envelope("call", id="q1", action="ask", to="bob", message="ok?"))
    out = b.feed(b"bob", envelope("bye"))
    (failed,) = [c.env for c in out if isinstance(c, Send) and c.identity == b"alice"
                 and c.env.get("re") == "q1"]
    assert failed["code"] == "peer_disconnected"
    assert settled(out, b"alice") == [("q1", "expired")]
    assert b.call(b"alice", "status", messageId="q1")["state"] == "expired"


def test_pipelined_sends_are_held_one_by_one_and_released_in_order():
    b = Bus()
    b.hello("alice")
    b.hello("bob", inbound="hold")
    out = b.feed(b"alice", envelope("sends", to="bob", ids=["p1", "p2", "p3"],
                                    messages=["a", "b", "c"]))
    assert delivered(out, b"bob") == []
    held = gate(b, b"bob", "held")["held"]
    assert [h["messageId"] for h in held] == ["p1", "p2", "p3"]
    assert gate(b, b"bob", "release", all=True)["released"] == ["p1", "p2", "p3"]
    assert delivered(b.last, b"bob") == ["p1", "p2", "p3"]
    assert settled(b.last, b"alice") == [("p1", "released"), ("p2", "released"),
                                         ("p3", "released")]
    released = b.call(b"alice", "status", messageId="p2")
    assert released["state"] == "released" and released["releasedAt"] >= released["heldAt"]


def test_the_held_list_is_bounded_the_oldest_expiring_first():
    b = Bus()
    b.hello("alice")
    b.hello("bob", inbound="hold")
    out = []
    for n in range(MAX_HELD_PER_SESSION + 2):
        out += b.feed(b"alice", envelope("call", id=f"m{n}", action="send", to="bob",
                                         message="x"))
    assert settled(out, b"alice") == [("m0", "expired"), ("m1", "expired")]
    assert len(gate(b, b"bob", "held")["held"]) == MAX_HELD_PER_SESSION


def test_the_row_carries_capabilities_and_policy_and_a_bad_policy_is_refused():
    b = Bus()
    b.hello("alice", capabilities={"host": "mcp", "push": True, "nonsense": 1})
    b.hello("bob")
    (row,) = [r for r in b.call(b"bob", "list")["sessions"] if r["name"] == "alice"]
    assert row["capabilities"] == {"host": "mcp", "push": True} and row["inbound"] == "accept"
    refused = gate(b, b"alice", "policy", policy="maybe")
    assert refused["code"] == "invalid_params", refused
    assert gate(b, b"alice", "policy", policy="refuse") == {"ok": True, "policy": "refuse",
                                                            "held": 0}
    assert b.call(b"bob", "send", to="alice", message="hi")["code"] == "inbound_refused"
    assert gate(b, b"alice", "release", messageId="nope")["code"] == "unknown_held"
