"""The client across broker outages: memberships, an ask in flight, a full inbox.

Real broker processes on ipc sockets in a short tmp dir, killed by PID (SIGKILL, or
SIGSTOP to make one slow) and restarted on the same data dir. Nothing sleeps to let
things settle: each wait is a loop on a reply or a condition, with a deadline.
"""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from client import Client
from schemas.limits import CALL_TIMEOUT_S, MAX_INBOUND_FRAME_BYTES
from tests.conftest import start_broker

BACK_S = 30.0


def connect(broker, name, **kwargs):
    return Client.connect(name=name, endpoint=broker.endpoint, timeout=15, **kwargs)


def wait_until(condition, timeout: float, what: str, step=None) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"not {what} within {timeout:g} s"
        if step is not None:
            step()
        else:
            time.sleep(0.05)      # polling a condition that has no event to wait on


def back(session) -> dict:
    """The broker's own status for ``session`` once it answers again."""
    deadline = time.monotonic() + BACK_S
    while True:
        status = session.intercom(action="status")
        if status.get("ok") and status.get("connected"):
            return status
        assert time.monotonic() < deadline, f"{session.name} not back: {status}"


def broker_groups(session) -> list[str]:
    result = session.intercom(action="groups")
    assert result["ok"], result
    return result["memberships"]


@pytest.fixture
def brokers(short_tmp):
    started = []

    def start():
        broker = start_broker(short_tmp)
        started.append(broker)
        return broker

    yield start
    for broker in started:
        broker.stop()


# -- memberships ------------------------------------------------------------------------

@pytest.mark.timeout(90)
def test_a_join_answered_broker_unavailable_is_applied_on_neither_side(brokers):
    broker = brokers()
    noticed = connect(broker, "noticed")      # joins once it knows the broker is gone
    hasty = connect(broker, "hasty")          # joins at once: its frame is queued to a dead peer
    assert noticed.intercom(action="join", group="kept")["ok"]
    broker.kill()
    results = {}
    hasty_join = threading.Thread(target=lambda: results.update(
        hasty=hasty.intercom(action="join", group="lost-h")))
    hasty_join.start()
    wait_until(lambda: not noticed.connected, 15, "disconnected")
    results["noticed"] = noticed.intercom(action="join", group="lost-n")
    hasty_join.join(CALL_TIMEOUT_S + 5)
    assert results["noticed"]["code"] == "broker_unavailable", results
    assert results["hasty"]["code"] == "broker_unavailable", results

    brokers()
    back(noticed), back(hasty)
    assert noticed.groups == broker_groups(noticed) == ["default", "kept"]
    assert hasty.groups == broker_groups(hasty) == ["default"]


@pytest.mark.timeout(90)
def test_a_join_whose_answer_was_given_up_on_ends_the_same_on_both_sides(brokers):
    broker = brokers()
    alice = connect(broker, "alice")
    os.kill(broker.pid, signal.SIGSTOP)        # slow, not gone: the join waits in its socket
    try:
        result = alice.intercom(action="join", group="late")
    finally:
        os.kill(broker.pid, signal.SIGCONT)
    assert result["code"] == "broker_unavailable", result
    # The broker now reads the join, applies it and answers an id nobody waits for.
    back(alice)
    assert alice.groups == broker_groups(alice) == ["default"]


@pytest.mark.timeout(60)
def test_an_acknowledged_leave_is_kept_across_a_kill9(brokers):
    broker = brokers()
    alice = connect(broker, "alice", group="home")
    assert alice.intercom(action="join", group="ops")["ok"]
    assert alice.intercom(action="leave", group="home")["ok"]
    broker.kill()
    brokers()
    back(alice)
    assert alice.groups == broker_groups(alice) == ["ops"]


# -- an ask in flight across a restart --------------------------------------------------

def ask_across_a_kill9(brokers):
    """An ask from ``asker`` that ``target`` received, then the broker killed and a new
    one started on the same data: (target, the ask, the asker's answers, its thread)."""
    broker = brokers()
    asker = connect(broker, "asker")
    target = connect(broker, "target")
    answers = []
    waiting = threading.Thread(target=lambda: answers.append(
        asker.intercom(action="ask", to="target", message="still there?", timeout=40)))
    waiting.start()
    ask = target.receive(timeout=15)
    assert ask is not None and ask["expectsReply"], ask
    broker.kill()
    brokers()
    back(target)
    return target, ask, answers, waiting


@pytest.mark.timeout(90)
def test_an_ask_pending_across_a_kill9_reaches_its_target_once_and_gets_the_reply(brokers):
    target, ask, answers, waiting = ask_across_a_kill9(brokers)
    # The asker resends its ask to the new broker, which delivers it again: the target's
    # client drops the copy it already handed out.
    wait_until(lambda: target.inbox_statistics().duplicates_dropped >= 1, 20,
               "the resent ask seen", step=lambda: target.receive(timeout=0.2))
    started = time.monotonic()
    reply = target.intercom(action="reply", replyTo=ask["id"], message="yes")
    assert reply["ok"], reply
    waiting.join(15)
    assert answers and answers[0]["ok"] and answers[0]["message"] == "yes", answers
    assert time.monotonic() - started < 5
    assert target.receive(timeout=0.5) is None     # no second copy ever reached the app


@pytest.mark.timeout(90)
def test_a_reply_made_before_the_ask_is_resent_still_reaches_the_asker(brokers):
    target, ask, answers, waiting = ask_across_a_kill9(brokers)
    # At once: the asker has not resent its ask yet, so the first try finds no ask.
    reply = target.intercom(action="reply", replyTo=ask["id"], message="yes")
    assert reply["ok"], reply
    waiting.join(15)
    assert answers and answers[0]["ok"] and answers[0]["message"] == "yes", answers


@pytest.mark.timeout(90)
def test_an_ask_resent_after_a_restart_keeps_its_own_deadline(brokers):
    broker = brokers()
    asker = connect(broker, "asker")
    target = connect(broker, "target")
    answers = []
    started = time.monotonic()
    waiting = threading.Thread(target=lambda: answers.append(
        asker.intercom(action="ask", to="target", message="anyone?", timeout=12)))
    waiting.start()
    assert target.receive(timeout=15) is not None
    broker.kill()
    brokers()
    waiting.join(30)
    assert answers and answers[0]["code"] == "ask_timeout", answers
    assert 11 < time.monotonic() - started < 17


# -- a bounded inbox ----------------------------------------------------------------------

def delivered_of(futures) -> list[int]:
    """Which of these 10 KB sends were answered delivered. Past the broker's backlog
    bound (8 MiB unread) the rest are refused target_backlogged, not queued; more
    than 4 MiB (a call's reserve) got through."""
    answers = [future.result(30) for future in futures]
    assert {a["code"] for a in answers if not a["ok"]} <= {"target_backlogged"}
    delivered = [n for n, a in enumerate(answers) if a["ok"]]
    assert len(delivered) * 10_000 > 4 << 20
    return delivered


@pytest.mark.timeout(120)
def test_a_client_that_does_not_read_keeps_its_inbox_bounded_and_loses_nothing(brokers):
    broker = brokers()
    limit = 256 * 1024
    idle = connect(broker, "idle", inbox_limit_bytes=limit)
    sender = connect(broker, "sender")
    body = "x" * 10_000
    count = 1500                                # about 15 MB: 60 times the limit
    # Reading stops at the first frame that finds the inbox full; one frame (a batch
    # of what the broker had queued) may take it past the limit.
    bound = limit + MAX_INBOUND_FRAME_BYTES
    futures = [sender.send_nowait("idle", f"{n:04d}{body}") for n in range(count)]
    wait_until(lambda: idle.inbox_statistics().paused, 20, "paused")
    # everything answered delivered must arrive, in order.
    delivered = [f"{n:04d}" for n in delivered_of(futures)]
    peak = idle.inbox_statistics()
    assert peak.paused and peak.size < bound, peak
    assert peak.messages < count

    assert idle.connected                       # paused reading is not a dead broker
    got = []
    while len(got) < len(delivered):
        msg = idle.receive(timeout=15)
        assert msg is not None, f"after {len(got)} messages"
        got.append(msg["message"][:4])
        assert idle.inbox_statistics().size < bound
    assert got == delivered
    # The last take wakes the IO thread, which resumes reading once it runs.
    wait_until(lambda: not idle.inbox_statistics().paused, 10, "reading resumed")
    assert idle.receive(timeout=0.3) is None
    assert idle.intercom(action="status")["ok"]


@pytest.mark.timeout(120)
def test_a_call_made_while_the_inbox_is_full_is_answered_from_the_reserve(brokers):
    broker = brokers()
    limit = 128 * 1024
    idle = connect(broker, "idle", inbox_limit_bytes=limit)
    sender = connect(broker, "sender")
    futures = [sender.send_nowait("idle", "y" * 10_000) for _ in range(100)]
    wait_until(lambda: idle.inbox_statistics().paused, 20, "paused")
    result = idle.intercom(action="status")
    assert result["ok"], result
    for future in futures:
        future.result(30)


@pytest.mark.timeout(120)
def test_a_call_past_the_reserve_fails_inbox_full_at_its_timeout_naming_receive(brokers):
    broker = brokers()
    idle = connect(broker, "idle", inbox_limit_bytes=1024)
    sender = connect(broker, "sender")
    futures = [sender.send_nowait("idle", "z" * 10_000) for _ in range(1000)]   # 10 MB
    delivered = len(delivered_of(futures))
    wait_until(lambda: idle.inbox_statistics().paused, 20, "paused")
    # Let the call's reserve (4 MiB) fill: what the broker sent ahead of the answer.
    started = time.monotonic()
    result = idle.intercom(action="status")
    assert result["code"] == "inbox_full" and "receive()" in result["error"], result
    assert CALL_TIMEOUT_S <= time.monotonic() - started < CALL_TIMEOUT_S + 3
    assert idle.connected
    for n in range(delivered):
        assert idle.receive(timeout=15) is not None, f"message {n} missing"
    assert idle.intercom(action="status")["ok"]
