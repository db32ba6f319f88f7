"""Pipelined sends through the public client: order, frame limits, prompt refusals."""

from __future__ import annotations

import time

from schemas.limits import MAX_FRAME_BYTES


def receive_all(session, count: int, timeout: float = 20.0) -> list[dict]:
    deadline = time.monotonic() + timeout
    got = []
    while len(got) < count and (left := deadline - time.monotonic()) > 0:
        msg = session.receive(left)
        if msg is None:
            break
        got.append(msg)
    return got


def test_pipelined_sends_arrive_once_each_in_order_with_every_field(bus):
    alice, bob = bus.connect_all("alice", "bob")
    futures = [alice.send_nowait(bob.id, f"m{n}") for n in range(3000)]
    answers = [f.result(20) for f in futures]
    assert all(a["ok"] and a["delivered"] for a in answers)
    got = receive_all(bob, 3000)
    assert [m["message"] for m in got] == [f"m{n}" for n in range(3000)]
    assert [m["id"] for m in got] == [a["messageId"] for a in answers]
    first = got[0]
    assert first["from"] == alice.id and first["fromName"] == "alice"
    assert first["attachments"] == [] and first["expectsReply"] is False
    assert isinstance(first["sentAt"], float) and "m0" in first["body"]
    assert bob.receive(0.2) is None


def test_pipelined_and_blocking_sends_to_one_target_keep_their_order(bus):
    alice, bob = bus.connect_all("alice", "bob")
    futures = [alice.send_nowait("bob", f"a{n}") for n in range(50)]
    assert alice.intercom(action="send", to="bob", message="middle")["ok"]
    futures += [alice.send_nowait("bob", f"b{n}") for n in range(50)]
    assert all(f.result(20)["ok"] for f in futures)
    got = [m["message"] for m in receive_all(bob, 101)]
    assert got == [f"a{n}" for n in range(50)] + ["middle"] + [f"b{n}" for n in range(50)]


def test_large_pipelined_messages_are_split_across_frames_and_all_arrive(bus):
    alice, bob = bus.connect_all("alice", "bob")
    text = "y" * 200_000                 # 40 of them would be 8 MB in one frame
    futures = [alice.send_nowait(bob.id, f"{n:02d}{text}") for n in range(40)]
    assert all(f.result(30)["ok"] for f in futures)
    got = receive_all(bob, 40, timeout=30)
    assert [m["message"][:2] for m in got] == [f"{n:02d}" for n in range(40)]


def test_a_request_past_the_frame_limit_is_refused_at_once_not_after_a_timeout(bus):
    alice, bob = bus.connect_all("alice", "bob")
    # Every field is within its own limit; together they pass the frame limit.
    attachments = [{"type": "file", "name": f"f{n}", "content": "z" * 250_000} for n in range(5)]
    started = time.monotonic()
    result = alice.intercom(action="send", to="bob", message="see files", attachments=attachments)
    assert time.monotonic() - started < 2.0
    assert result["ok"] is False and result["code"] == "request_too_large", result
    assert str(MAX_FRAME_BYTES) in result["error"]
    wide = "\N{GRINNING FACE}" * 262_144   # an allowed length, four bytes a character
    assert alice.send_nowait("bob", wide).result(5)["code"] == "request_too_large"
    assert alice.intercom(action="send", to="bob", message="still here")["ok"]
    assert bob.receive(5)["message"] == "still here"


def test_pipelined_messages_just_under_the_frame_limit_each_arrive(bus):
    alice, bob = bus.connect_all("alice", "bob")
    # Each fits in a frame alone (the last is about 1 MB of UTF-8); together they do not.
    texts = ["a" * 100_000, "b" * 100_000, "\N{GRINNING FACE}" * 250_000, "c", "\u00e9" * 262_144]
    futures = [alice.send_nowait(bob.id, text) for text in texts]
    answers = [f.result(30) for f in futures]
    assert all(a["ok"] for a in answers), [a.get("code") for a in answers]
    got = receive_all(bob, len(texts), timeout=30)
    assert [m["message"] for m in got] == texts
