"""The flood and loop guard through real processes: Python sessions that ask for it,
and the MCP server, which has it on by default."""

from __future__ import annotations


import pytest

from schemas.attention import GUARD_PER_MINUTE
from tests.integration.multi_broker import sees, shared_cluster, wait_until

from .conftest import unique
from .mcp_helpers import call, mcp_client, run

pytestmark = pytest.mark.timeout(120)


def test_a_guarded_session_is_refused_past_its_bounds_with_when_to_retry(bus):
    alice, bob, carol = bus.connect_all(("alice", {"guard": {"perMinute": 3, "exchanges": 2}}),
                                        "bob", "carol")
    for n in range(3):
        assert alice.intercom(action="send", to="bob", message=f"m{n}")["ok"]
    refused = alice.intercom(action="send", to="bob", message="one too many")
    assert refused["code"] == "flood_guard" and 55 < refused["retryAfterS"] <= 60
    # carol and alice answer each other: the third turn is alice's, refused.
    assert alice.intercom(action="send", to="carol", message="ping")["ok"]
    assert carol.intercom(action="send", to="alice", message="pong")["ok"]
    assert alice.intercom(action="send", to="carol", message="ping")["ok"]
    assert carol.intercom(action="send", to="alice", message="pong")["ok"]
    refused = alice.intercom(action="send", to="carol", message="ping")
    assert refused["code"] == "loop_guard" and "prompt" in refused["error"]
    alice.human_input()               # a person prompted alice: the count starts again
    assert alice.intercom(action="send", to="carol", message="a person asked me to")["ok"]
    assert bob.receive(5)["message"] == "m0"


def test_a_guarded_pipelined_run_is_delivered_up_to_its_bound(bus):
    alice, bob = bus.connect_all(("alice", {"guard": {"perMinute": 5}}), "bob")
    answers = [f.result(20) for f in [alice.send_nowait("bob", f"p{n}") for n in range(8)]]
    assert [a.get("code") for a in answers] == [None] * 5 + ["flood_guard"] * 3
    assert [bob.receive(5)["message"] for _ in range(5)] == [f"p{n}" for n in range(5)]
    assert bob.receive(0.2) is None


def test_an_unguarded_session_moves_thousands_without_a_refusal(bus):
    alice, bob = bus.connect_all("alice", ("bob", {"guard": True}))
    answers = [f.result(20) for f in [alice.send_nowait("bob", f"m{n}") for n in range(3000)]]
    assert all(a["ok"] for a in answers)


def test_the_mcp_server_is_guarded_by_default_and_not_with_no_guard(bus, home):
    peer = bus.connect("peer")

    async def sends(name: str, count: int, *extra: str) -> list[dict]:
        async with mcp_client(home, name, "--endpoint", bus.endpoint, "--group", bus.group,
                              *extra) as session:
            return [(await call(session, "intercom", action="send", to="peer",
                                message=f"m{n}"))[0] for n in range(count)]

    guarded = run(sends(unique("m"), GUARD_PER_MINUTE + 1))
    assert all(answer["ok"] for answer in guarded[:-1])
    assert guarded[-1]["code"] == "flood_guard" and guarded[-1]["retryAfterS"] > 0
    free = run(sends(unique("m"), GUARD_PER_MINUTE + 5, "--no-guard"))
    assert all(answer["ok"] for answer in free)
    assert peer.intercom(action="list")["ok"]


# -- across brokers ----------------------------------------------------------------------

_two_brokers, two = shared_cluster("two", 2)


@pytest.mark.timeout(90)
def test_a_person_speaking_on_the_peers_broker_restarts_the_guarded_pair(two):
    alice = two.connect(0, "alice", group=two.group, guard={"exchanges": 1})
    bob = two.connect(1, "bob", group=two.group)
    for session, other in ((alice, "bob"), (bob, "alice")):
        wait_until(lambda: sees(session, other), 15, f"{session.name} lists {other}")
    assert alice.intercom(action="send", to="bob", message="one")["ok"]
    assert bob.receive(10)["message"] == "one"
    assert bob.intercom(action="send", to="alice", message="two")["ok"]
    assert alice.receive(10)["message"] == "two"
    assert alice.intercom(action="send", to="bob", message="three")["code"] == "loop_guard"
    bob.human_input()                 # bob's person spoke, on bob's broker
    # A refused send changes nothing, so asking again until the notice arrives is safe.
    wait_until(lambda: alice.intercom(action="send", to="bob", message="four").get("ok"),
               10, "alice's broker hears that bob's person spoke")
    assert bob.receive(10)["message"] == "four"
