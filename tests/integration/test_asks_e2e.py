"""Ask and reply over real sockets: threads, killed peers, asks back (cycles)."""

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.integration.conftest import module_connect_broker

PEER = Path(__file__).with_name("peer_process.py")

# One broker for the module: each test's sessions and peer processes end with it.
broker = module_connect_broker()


@pytest.fixture
def peer_process(broker):
    started = []

    def start(name: str, mode: str):
        proc = subprocess.Popen([sys.executable, str(PEER), broker.endpoint, name, mode],
                                stdout=subprocess.PIPE, text=True)
        started.append(proc)
        session_id = proc.stdout.readline().strip()
        assert session_id, "peer process did not connect"
        return proc, session_id

    yield start
    for proc in started:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)


def test_concurrent_asks_from_threads_each_get_their_own_reply(connect):
    alice = connect("alice")
    bob = connect("bob")
    stop = threading.Event()

    def answer_all():
        while not stop.is_set():
            msg = bob.receive(timeout=0.2)
            if msg is not None:
                bob.intercom(action="reply", replyTo=msg["id"], message="re " + msg["message"])

    server = threading.Thread(target=answer_all)
    server.start()
    results = {}

    def ask(n):
        results[n] = alice.intercom(action="ask", to="bob", message=f"q{n}", timeout=20)

    askers = [threading.Thread(target=ask, args=(n,)) for n in range(6)]
    for thread in askers:
        thread.start()
    for thread in askers:
        thread.join(30)
    stop.set()
    server.join(5)
    assert {n: r.get("message") for n, r in results.items()} == {n: f"re q{n}" for n in range(6)}


def test_seventh_concurrent_ask_is_refused_at_once(connect):
    alice = connect("alice")
    connect("bob")
    started = threading.Barrier(7)
    results = []

    def ask():
        started.wait()
        results.append(alice.intercom(action="ask", to="bob", message="q", timeout=3))

    threads = [threading.Thread(target=ask) for _ in range(7)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(20)
    codes = sorted(r["code"] for r in results)
    assert codes.count("too_many_asks") == 1 and codes.count("ask_timeout") == 6


@pytest.mark.timeout(40)
def test_killed_peer_fails_only_its_ask_within_seconds(connect, peer_process):
    alice = connect("alice")
    victim, _ = peer_process("victim", "silent")
    _, echo_id = peer_process("echo", "echo")
    outcome = {}

    def ask_victim():
        outcome["victim"] = alice.intercom(action="ask", to="victim", message="hello?", timeout=120)

    waiter = threading.Thread(target=ask_victim)
    waiter.start()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:   # wait until the broker lists the ask as open
        rows = alice.intercom(action="list")["sessions"]
        if any(r["name"] == "victim" for r in rows):
            break
    killed_at = time.monotonic()
    os.kill(victim.pid, signal.SIGKILL)
    waiter.join(30)
    elapsed = time.monotonic() - killed_at
    assert outcome["victim"]["code"] == "peer_disconnected"
    assert elapsed < 10
    assert alice.intercom(action="ask", to=echo_id, message="still there", timeout=10)["message"] == "echo: still there"


def test_closed_peer_fails_the_ask_at_once(connect):
    alice = connect("alice")
    bob = connect("bob")
    outcome = {}
    waiter = threading.Thread(target=lambda: outcome.update(
        r=alice.intercom(action="ask", to="bob", message="q", timeout=60)))
    waiter.start()
    assert bob.receive(timeout=10)["expectsReply"] is True
    closed_at = time.monotonic()
    bob.close()
    waiter.join(10)
    assert outcome["r"]["code"] == "peer_disconnected"
    assert time.monotonic() - closed_at < 2


def test_an_ask_back_is_refused_at_once_as_a_cycle_and_the_first_ask_completes(connect):
    alice = connect("alice")
    bob = connect("bob")
    result = {}
    asker = threading.Thread(target=lambda: result.update(
        alice.intercom(action="ask", to="bob", message="which tests?", timeout=20)))
    asker.start()
    assert bob.receive(timeout=10)["expectsReply"] is True
    started = time.monotonic()
    back = bob.intercom(action="ask", to="alice", message="which branch?", timeout=20)
    assert time.monotonic() - started < 1.0                 # not the ask's 20 s
    assert (back["ok"], back["code"], back["waitsOnName"]) == (False, "ask_cycle", "alice")
    assert bob.intercom(action="reply", message="test_auth")["ok"]
    asker.join(15)
    assert result["message"] == "test_auth"


def test_an_isolated_child_sends_to_and_asks_its_supervisor_by_8_hex_prefix(connect):
    parent = connect("parent", group="team")
    bystander = connect("bystander", group="team")
    child = connect("child", group="isolated", parent=parent.id, grant=parent.grant_child()["grant"])
    sent = child.intercom(action="send", to=parent.id[:8], message="progress")
    assert (sent["ok"], sent.get("delivered"), sent.get("to")) == (True, True, parent.id), sent
    assert parent.receive(timeout=10)["message"] == "progress"
    outcome = {}
    waiter = threading.Thread(target=lambda: outcome.update(
        child.intercom(action="ask", to=parent.id[:8], message="which branch?")))
    waiter.start()
    msg = parent.receive(timeout=10)
    assert msg["expectsReply"] and msg["message"] == "which branch?", msg
    assert parent.intercom(action="reply", message="main")["ok"]
    waiter.join(10)
    assert (outcome.get("ok"), outcome.get("message")) == (True, "main"), outcome
    # The relationship opens nothing else: the supervisor's group stays closed.
    assert child.intercom(action="send", to=bystander.id, message="x")["code"] == "different_group"
    assert child.intercom(action="send", to=bystander.id[:8], message="x")["code"] == "target_not_found"


def test_child_contacts_supervisor_across_groups(connect):
    parent = connect("parent", group="team")
    child = connect("child", group="isolated", parent=parent.id, grant=parent.grant_child()["grant"])
    outcome = {}
    waiter = threading.Thread(target=lambda: outcome.update(r=child.contact_supervisor(message="which?")))
    waiter.start()
    msg = parent.receive(timeout=10)
    assert msg["expectsReply"] and msg["fromName"] == "child"
    assert parent.intercom(action="pending")["pending"][0]["messageId"] == msg["id"]
    assert parent.intercom(action="reply", message="this one")["ok"]
    waiter.join(10)
    assert outcome["r"]["message"] == "this one"


def test_attachments_reach_the_recipient_rendered_in_order(connect):
    alice = connect("alice")
    bob = connect("bob")
    files = [{"type": "file", "name": "a.py", "content": "print(1)", "language": "python"},
             {"type": "context", "name": "notes", "content": "second"},
             {"type": "file", "name": "a.py", "content": "print(1)", "language": "python"}]
    assert alice.intercom(action="send", to="bob", message="see", attachments=files)["ok"]
    msg = bob.receive(timeout=10)
    assert msg["attachments"] == files
    body = msg["body"]
    assert body.index("print(1)") < body.index("second") < body.rindex("print(1)")


def test_bad_attachment_is_refused_by_the_client_with_a_code(connect):
    alice = connect("alice")
    connect("bob")
    result = alice.intercom(action="send", to="bob", message="m",
                            attachments=[{"type": "pdf", "name": "x", "content": "y"}])
    assert result["ok"] is False and result["code"] == "invalid_attachment"


def test_confirm_send_callback_gates_non_reply_sends(broker):
    from client import Client
    from schemas.config import Config

    asked = []
    alice = Client.connect(name="alice", endpoint=broker.endpoint, config=Config(confirmSend=True),
                           confirm=lambda params: asked.append(params) or False)
    bob = Client.connect(name="bob", endpoint=broker.endpoint)
    try:
        assert alice.intercom(action="send", to="bob", message="m")["code"] == "confirmation_declined"
        assert asked and asked[0]["to"] == "bob"
        assert bob.receive(timeout=0.3) is None
    finally:
        alice.close()
        bob.close()
