"""A session's inbound gate and capabilities through the public surface: a real broker,
Python sessions, and the ``inbound``, ``held``, ``release`` and ``drop`` commands as
real child processes acting for a session by its history file."""

from __future__ import annotations

import re
import threading

import pytest

from tests.integration.multi_broker import others_live, sees, shared_cluster, wait_until

from .cli_helpers import run_cli
from .conftest import drain_events, unique
from .mcp_helpers import bus_flags, call, mcp_client, run


def cli(bus, home, *args: str, **kwargs):
    return run_cli(home, "--endpoint", bus.endpoint, "--as-group", bus.group, *args, **kwargs)


def columns(line: str) -> list[str]:
    return re.split(r"\s{2,}", line.strip())


def row_of(session, viewer) -> dict:
    (row,) = [r for r in viewer.intercom(action="list")["sessions"] if r["id"] == session.id]
    return row


def settled(sender) -> list[dict]:
    return [e for e in drain_events(sender) if e.get("event") == "held_settled"]


def test_capabilities_are_in_every_row_and_change_with_a_status(bus):
    alice = bus.connect("alice", capabilities={"push": True, "steer": True})
    bob = bus.connect("bob")
    assert row_of(alice, bob)["capabilities"] == {"push": True, "steer": True, "host": "python"}
    assert row_of(bob, alice)["capabilities"] == {"host": "python"}
    assert row_of(bob, alice)["inbound"] == "accept"
    drain_events(bob)
    alice.update_capabilities(hooks=True)
    assert alice.intercom(action="status")["ok"]        # its status went first on its connection
    assert row_of(alice, bob)["capabilities"]["hooks"] is True
    updates = [e for e in drain_events(bob) if e.get("event") == "presence_update"]
    assert updates and updates[-1]["session"]["capabilities"]["hooks"] is True, updates


def test_refuse_refuses_sends_and_asks_with_inbound_refused(bus):
    alice = bus.connect("alice", inbound="refuse")
    bob = bus.connect("bob")
    sent = bob.intercom(action="send", to="alice", message="hello?")
    assert (sent["ok"], sent["code"]) == (False, "inbound_refused"), sent
    assert "refuses messages" in sent["error"]
    asked = bob.intercom(action="ask", to="alice", message="there?", timeout=5)
    assert asked["code"] == "inbound_refused", asked
    assert alice.receive(timeout=0.2) is None
    # Its own replies still reach it: it asked for them.
    assert alice.set_inbound("accept")["ok"]


def test_a_person_holds_lists_releases_and_drops_and_the_sender_sees_each_outcome(bus, tmp_path):
    history = tmp_path / "alice.jsonl"
    alice = bus.connect("alice", history_file=history)
    bob = bus.connect("bob")
    ran = cli(bus, tmp_path, "inbound", "--identity", str(history), "--policy", "hold")
    assert (ran.code, ran.out) == (0, "inbound policy: hold; 0 message(s) held\n"), ran
    assert any(e.get("event") == "inbound_changed" and e["policy"] == "hold"
               for e in drain_events(alice))
    first = bob.intercom(action="send", to="alice", message="first")
    second = bob.intercom(action="send", to="alice", message="second")
    for answer in (first, second):
        assert answer["ok"] and answer["held"] is True and answer["delivered"] is False, answer
    assert alice.receive(timeout=0.3) is None                      # nothing handed over
    assert bob.receipt(first["messageId"])["state"] == "held"
    listed = cli(bus, tmp_path, "held", "--identity", str(history))
    assert listed.code == 0, listed
    head, header, *rows = listed.lines
    assert head == "inbound policy: hold"
    assert [columns(r)[0] for r in rows] == [first["messageId"], second["messageId"]]
    assert columns(rows[0])[1] == f"bob ({bob.id[:8]})" and rows[0].endswith("first")

    released = cli(bus, tmp_path, "release", first["messageId"], "--identity", str(history))
    assert (released.code, released.out) == (0, "released 1 message(s); 1 still held\n"), released
    msg = alice.receive(timeout=10)
    assert (msg["id"], msg["message"], msg["from"]) == (first["messageId"], "first", bob.id)
    dropped = cli(bus, tmp_path, "drop", second["messageId"], "--identity", str(history))
    assert (dropped.code, dropped.out) == (0, "dropped 1 message(s); 0 still held\n"), dropped
    assert alice.receive(timeout=0.3) is None

    outcomes = {e["messageId"]: e["outcome"] for e in settled(bob)}
    assert outcomes == {first["messageId"]: "released", second["messageId"]: "dropped"}
    receipt = bob.receipt(first["messageId"])
    assert receipt["state"] in ("released", "read", "seen") and receipt["heldAt"] and receipt["releasedAt"]
    assert bob.receipt(second["messageId"])["state"] == "dropped"
    again = cli(bus, tmp_path, "drop", second["messageId"], "--identity", str(history))
    assert again.code == 1 and "unknown_held" in again.err, again


def test_a_held_ask_waits_and_a_dropped_one_fails_at_once_for_its_asker(bus, tmp_path):
    alice = bus.connect("alice", inbound="hold")
    bob = bus.connect("bob")
    answers: list[dict] = []
    asker = threading.Thread(target=lambda: answers.append(
        bob.intercom(action="ask", to="alice", message="deploy?", timeout=30)))
    asker.start()
    held = _wait_held(alice, 1)
    assert held[0]["expectsReply"] is True
    dropped = alice.drop_held(held[0]["messageId"])
    assert dropped["ok"] and dropped["dropped"] == [held[0]["messageId"]], dropped
    asker.join(10)
    assert answers and answers[0]["code"] == "held_dropped", answers


def test_release_all_delivers_in_order_and_replies_are_never_held(bus):
    alice = bus.connect("alice")
    bob = bus.connect("bob", inbound="hold")
    # bob asks alice; alice's reply reaches bob although bob holds messages.
    answers: list[dict] = []
    asker = threading.Thread(target=lambda: answers.append(
        bob.intercom(action="ask", to="alice", message="status?", timeout=30)))
    asker.start()
    ask = alice.receive(timeout=10)
    assert alice.intercom(action="reply", replyTo=ask["id"], message="green")["ok"]
    asker.join(10)
    assert answers and answers[0]["message"] == "green", answers
    for n in range(3):
        assert alice.intercom(action="send", to="bob", message=f"m{n}")["held"] is True
    assert len(bob.held_messages()["held"]) == 3
    assert bob.release_held(all=True)["released"] and bob.held_messages()["held"] == []
    assert [bob.receive(timeout=10)["message"] for _ in range(3)] == ["m0", "m1", "m2"]


def test_the_policy_survives_a_reconnect_of_its_client(bus, tmp_path):
    history = tmp_path / "alice.jsonl"
    alice = bus.connect("alice", history_file=history)
    ran = cli(bus, tmp_path, "inbound", "--identity", str(history), "--policy", "refuse")
    assert ran.code == 0, ran
    drain_events(alice)
    assert alice._hello()["inbound"] == "refuse"        # the next hello states the person's choice
    bob = bus.connect("bob")
    assert row_of(alice, bob)["inbound"] == "refuse"


def _wait_held(session, count: int) -> list[dict]:
    for _ in range(200):
        held = session.held_messages()["held"]
        if len(held) >= count:
            return held
        session.receive(timeout=0.05)
    raise AssertionError(f"fewer than {count} held")


# -- across brokers ----------------------------------------------------------------------

_two_brokers, two = shared_cluster("two", 2)


@pytest.mark.timeout(90)
def test_across_brokers_the_row_tells_the_gate_and_a_held_message_is_settled_where_it_waits(two):
    alice = two.connect(0, "alice", group=two.group, capabilities={"push": True})
    bob = two.connect(1, "bob", group=two.group, inbound="hold")
    for session, other in ((alice, "bob"), (bob, "alice")):
        wait_until(lambda: others_live(session) == 1, 15, "the brokers count each other")
        wait_until(lambda: sees(session, other), 15, f"{session.name} lists {other}")
    wait_until(lambda: row_of(bob, alice).get("inbound") == "hold", 15, "alice sees bob's gate")
    assert row_of(alice, bob)["capabilities"] == {"push": True, "host": "python"}
    sent = alice.intercom(action="send", to="bob", message="across")
    assert sent["ok"] and sent["held"] is True, sent
    assert alice.receipt(sent["messageId"])["state"] == "held"
    assert bob.release_held(sent["messageId"])["released"] == [sent["messageId"]]
    assert bob.receive(timeout=10)["message"] == "across"
    event = None
    for _ in range(50):
        event = alice.next_event(timeout=0.2)
        if event is not None and event.get("event") == "held_settled":
            break
    assert event is not None and event["outcome"] == "released", event
    assert bob.set_inbound("refuse")["ok"]
    wait_until(lambda: row_of(bob, alice).get("inbound") == "refuse", 15, "the row follows")
    assert alice.intercom(action="send", to="bob", message="no")["code"] == "inbound_refused"


def test_the_mcp_servers_row_says_how_it_is_reached_and_its_inbound_flag_holds(bus, home):
    bob = bus.connect("bob")
    name = unique("m")

    async def scenario() -> tuple[dict, list[dict]]:
        async with mcp_client(home, name, *bus_flags(bus, "--no-push", "--inbound", "hold")) \
                as session:
            row = row_of_name(bob, name)
            sent = bob.intercom(action="send", to=name, message="for a person first")
            first = (await call(session, "intercom", action="list"))[0]
            return {"row": row, "sent": sent}, first.get("inbox", [])

    seen, inbox = run(scenario())
    assert seen["row"]["capabilities"] == {"host": "mcp", "push": False, "steer": True,
                                           "hooks": False}
    assert seen["row"]["inbound"] == "hold"
    assert seen["sent"]["held"] is True and inbox == []       # held, so never shown


def row_of_name(viewer, name: str) -> dict:
    (row,) = [r for r in viewer.intercom(action="list")["sessions"] if r["name"] == name]
    return row
