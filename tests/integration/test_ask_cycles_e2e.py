"""No ask cycles across two broker processes on one database: an ask back to a session
waiting on the asker on the other broker is refused at once, not after its timeout.
What the engines decide (longer chains, asks in any order, waits that end) is tested
in memory in tests/unit/test_ask_cycles.py."""

from __future__ import annotations

import time

import pytest

from tests.integration.multi_broker import asking, others_live, sees, shared_cluster, wait_until

pytestmark = pytest.mark.timeout(90)

_two_brokers, two = shared_cluster("two", 2)


def test_an_ask_back_across_brokers_is_refused_at_once_and_the_first_ask_completes(two):
    alice = two.connect(0, "alice", group=two.group)
    bob = two.connect(1, "bob", group=two.group)
    for session, other in ((alice, "bob"), (bob, "alice")):
        wait_until(lambda: others_live(session) == 1, 15, "the brokers count each other")
        wait_until(lambda: sees(session, other), 15, f"{session.name} lists {other}")
    result, asker = asking(alice, "bob", "which tests?")
    assert bob.receive(10)["expectsReply"] is True
    started = time.monotonic()
    back = bob.intercom(action="ask", to="alice", message="which branch?", timeout=30)
    assert time.monotonic() - started < 1.0                 # not the ask's 30 s
    assert (back["ok"], back["code"], back["waitsOn"], back["waitsOnName"]) == \
        (False, "ask_cycle", alice.id, "alice")
    assert bob.intercom(action="reply", message="test_auth")["ok"]
    asker.join(15)
    assert result["message"] == "test_auth"
