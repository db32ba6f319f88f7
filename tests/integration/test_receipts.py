"""Receipts against a real broker: a live message is kept until its receiver's client has
it, reaches the next process of the same identity when the first died without reading
it, and is reported ``undelivered`` once when nobody comes back; the sender reads each
message's state (delivered, read, seen, replied, undelivered) with ``receipt``."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import pytest

from client import Client
from client.history import read_identity

from .conftest import ROOT, child_env, make_tmp, module_broker, unique

pytestmark = pytest.mark.timeout(90)

RECLAIM_S = 3.0          # the module broker's --reclaim-window-s

# A receiver in a process of its own: it connects with a history file (its identity),
# says "ready <id>", prints each message it receives as a JSON line, and never exits.
RECEIVER = """
import json, sys
from client import Client
session = Client.connect(name=sys.argv[1], endpoint=sys.argv[2], group=sys.argv[3],
                         history_file=sys.argv[4], identity=json.loads(sys.argv[5]) or None,
                         keep_until=sys.argv[6])
print("ready", session.id, flush=True)
while True:
    msg = session.receive(1.0)
    if msg is not None:
        print(json.dumps({"id": msg["id"], "message": msg["message"]}), flush=True)
"""


@pytest.fixture(scope="module")
def broker():
    yield from module_broker(None, "--reclaim-window-s", str(RECLAIM_S))


@pytest.fixture
def sessions(broker):
    opened = []
    group = unique()

    def connect(name: str, **kwargs):
        session = Client.connect(name=name, endpoint=broker.endpoint, group=group, **kwargs)
        opened.append(session)
        return session
    connect.group = group
    yield connect
    for session in opened:
        session.close()


class Receiver:
    """A receiving client process; ``identity`` None: a new one (written to its history)."""

    def __init__(self, broker, group: str, name: str, history, keep_until: str = "read",
                 identity: dict | None = None) -> None:
        home = make_tmp()
        self.proc = subprocess.Popen(
            [sys.executable, "-c", RECEIVER, name, broker.endpoint, group, str(history),
             json.dumps(identity), keep_until],
            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
            env=child_env(home))
        line = self.proc.stdout.readline().split()
        assert line[:1] == ["ready"], line
        self.id = line[1]

    def messages(self, count: int, timeout: float = 20.0) -> list[str]:
        """The ids of the next ``count`` messages it printed."""
        got, deadline = [], time.monotonic() + timeout
        while len(got) < count:
            assert time.monotonic() < deadline, f"only {len(got)} of {count} arrived"
            line = self.proc.stdout.readline()
            assert line, "the receiver exited"
            got.append(json.loads(line)["id"])
        return got

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGCONT)
        self.proc.kill()
        self.proc.wait(10)


def eventually(check, timeout: float = 10.0, every: float = 0.05):
    """``check()``'s first truthy value within ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        assert time.monotonic() < deadline, "never came true"
        time.sleep(every)


def state_of(session, msg_id: str) -> str:
    receipt = session.receipt(msg_id)
    assert receipt["ok"], receipt
    return receipt["state"]


def gone(session, name: str) -> bool:
    return name not in [row["name"] for row in session.intercom(action="list")["sessions"]]


def test_a_receipt_goes_delivered_then_seen_then_replied(sessions):
    alice, bob = sessions("alice"), sessions("bob")
    msg_id = alice.intercom(action="send", to="bob", message="hi")["messageId"]
    first = alice.receipt(msg_id)
    assert first["ok"] and first["messageId"] == msg_id and first["to"] == bob.id
    assert first["toName"] == "bob" and first["deliveredAt"] > 0
    assert bob.receive(5)["id"] == msg_id
    eventually(lambda: state_of(alice, msg_id) == "seen")
    seen = alice.receipt(msg_id)
    assert seen["readAt"] is not None and seen["seenAt"] >= seen["deliveredAt"]
    assert seen["repliedAt"] is None and seen["undeliveredAt"] is None
    assert bob.intercom(action="reply", message="yes")["ok"]
    replied = alice.receipt(msg_id)
    assert replied["state"] == "replied" and replied["repliedAt"] >= seen["seenAt"]
    assert alice.intercom(action="status", messageId=msg_id)["state"] == "replied"


def test_an_ask_is_replied_once_answered_and_the_receipt_is_the_senders_alone(sessions):
    alice, bob, carol = sessions("alice"), sessions("bob"), sessions("carol")
    msg_id = bob.send_nowait("alice", "pipelined").result(5)["messageId"]
    assert alice.receive(5)["id"] == msg_id
    assert carol.receipt(msg_id)["code"] == "unknown_message"
    assert alice.receipt(msg_id)["code"] == "unknown_message"       # the receiver's too
    assert bob.receipt("no-such-message")["code"] == "unknown_message"
    assert bob.receipt("")["code"] == "invalid_params"
    eventually(lambda: state_of(bob, msg_id) == "seen")


def test_a_message_a_killed_client_never_read_reaches_the_next_process_of_its_identity(
        broker, sessions, tmp_path):
    sender = sessions("sender")
    history = tmp_path / "history.jsonl"
    first = Receiver(broker, sessions.group, "rx", history)
    first.proc.send_signal(signal.SIGSTOP)          # it reads nothing from now on
    ids = [sender.intercom(action="send", to="rx", message=f"m{n}")["messageId"]
           for n in range(20)]
    assert {state_of(sender, i) for i in ids} == {"delivered"}
    first.kill()                                     # what its socket held is gone
    eventually(lambda: gone(sender, "rx"))
    second = Receiver(broker, sessions.group, "rx", history, identity=read_identity(history))
    try:
        assert second.id == first.id
        assert second.messages(20) == ids             # all of them, in order, once
        eventually(lambda: {state_of(sender, i) for i in ids} == {"seen"})
    finally:
        second.kill()


def test_messages_nobody_comes_back_for_are_reported_undelivered_once(broker, sessions,
                                                                       tmp_path):
    sender = sessions("sender")
    receiver = Receiver(broker, sessions.group, "rx", tmp_path / "history.jsonl")
    receiver.proc.send_signal(signal.SIGSTOP)
    ids = [sender.intercom(action="send", to="rx", message=f"m{n}")["messageId"]
           for n in range(5)]
    receiver.kill()
    events = []
    deadline = time.monotonic() + RECLAIM_S + 10
    while len(events) < len(ids) and time.monotonic() < deadline:
        event = sender.next_event(0.5)
        if event is not None and event["event"] == "undelivered":
            events.append(event)
    assert [e["messageId"] for e in events] == ids
    assert {(e["to"], e["toName"], e["reason"]) for e in events} == \
        {(receiver.id, "rx", "session_ended")}
    while (event := sender.next_event(0.2)) is not None:
        assert event["event"] != "undelivered", event            # at most one each
    receipt = sender.receipt(ids[0])
    assert receipt["state"] == "undelivered" and receipt["reason"] == "session_ended"
    assert receipt["undeliveredAt"] >= receipt["deliveredAt"]


def test_a_session_that_keeps_until_seen_gets_again_what_its_last_process_read_unseen(
        broker, sessions, tmp_path):
    sender = sessions("sender")
    history = tmp_path / "history.jsonl"
    first = Receiver(broker, sessions.group, "rx", history, keep_until="seen")
    ids = [sender.intercom(action="send", to="rx", message=f"m{n}")["messageId"]
           for n in range(3)]
    assert first.messages(3) == ids                    # taken, never marked seen
    eventually(lambda: {state_of(sender, i) for i in ids} == {"read"})
    first.kill()
    eventually(lambda: gone(sender, "rx"))
    second = Receiver(broker, sessions.group, "rx", history, keep_until="seen",
                      identity=read_identity(history))
    try:
        assert second.messages(3) == ids
    finally:
        second.kill()
    # The second process never marked them seen either: once the window passes
    # without a third, their senders hear the session never showed them.
    reasons = []
    while len(reasons) < 3:
        event = sender.next_event(RECLAIM_S + 10)
        assert event is not None, reasons
        if event["event"] == "undelivered":
            reasons.append(event["reason"])
    assert reasons == ["never_seen"] * 3


def test_a_send_to_a_session_that_left_says_since_when_and_only_to_those_who_saw_it(
        broker, sessions):
    alice, bob = sessions("alice"), sessions("bob")
    outsider = Client.connect(name="outsider", endpoint=broker.endpoint, group=unique())
    try:
        bob_id = bob.id
        before = time.time()
        bob.close()
        refused = alice.intercom(action="send", to="bob", message="are you there?")
        assert refused["code"] == "target_not_found"
        assert before - 1 <= refused["lastSeenAt"] <= time.time()
        assert "No session you can see matches 'bob'" in refused["error"]
        by_id = alice.intercom(action="ask", to=bob_id, message="?", timeout=5)
        assert by_id["code"] == "target_not_found" and by_id["lastSeenAt"] == refused["lastSeenAt"]
        never = alice.intercom(action="send", to="nobody-ever", message="hi")
        assert never["code"] == "target_not_found" and "lastSeenAt" not in never
        hidden = outsider.intercom(action="send", to="bob", message="hi")
        assert hidden["code"] == "target_not_found" and "lastSeenAt" not in hidden
    finally:
        outsider.close()
