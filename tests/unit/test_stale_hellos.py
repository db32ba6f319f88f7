"""Hellos delivered late (a client's copies that a partition held back) can neither
take the client's id nor open a phantom session: each hello carries an ``attempt``
that grows with every hello its client says, and an older one than the one its
session was opened or taken back with is refused ``stale_hello``."""

from __future__ import annotations

from broker.core import Send
from schemas.protocol import envelope
from tests.unit.brokers_in_memory import linked_pair
from tests.unit.harness import result_for


def alice_on_a(pair, attempt: int) -> dict:
    welcome = pair.hello(pair.a, "alice", instance="i-alice", attempt=attempt)
    assert welcome["ok"], welcome
    return welcome


def late_hello(welcome: dict, attempt: int, **fields) -> dict:
    return envelope("hello", id=f"late-{attempt}", name="alice", instance="i-alice",
                    sessionId=welcome["sessionId"], token=welcome["token"], attempt=attempt,
                    **fields)


def test_a_late_hello_to_the_same_broker_does_not_move_the_sessions_route():
    pair = linked_pair()
    welcome = alice_on_a(pair, 2000)
    pair.feed(pair.a, b"alice-old-connection", late_hello(welcome, 1000))
    answer = result_for(pair.seen[pair.a], b"alice-old-connection", "late-1000")
    assert (answer["ok"], answer["code"]) == (False, "stale_hello")
    session = pair.a.engine.state.registry.by_id[welcome["sessionId"]]
    assert session.identity == b"alice"
    # A newer one is the client on a new connection: it takes the route.
    pair.feed(pair.a, b"alice-new-connection", late_hello(welcome, 3000))
    assert result_for(pair.seen[pair.a], b"alice-new-connection", "late-3000")["ok"]
    assert session.identity == b"alice-new-connection"


def test_a_late_hello_on_another_broker_opens_nothing_and_leaves_the_id_with_its_client():
    pair = linked_pair()
    welcome = alice_on_a(pair, 2000)
    pair.settle()
    pair.feed(pair.b, b"alice-late", late_hello(welcome, 1000))
    pair.settle()          # the reclaim waits for its claim's commit: the store refuses it
    answer = result_for(pair.seen[pair.b], b"alice-late", "late-1000")
    assert (answer["ok"], answer["code"]) == (False, "stale_hello")
    assert not [s for s in pair.b.engine.state.registry.by_id.values()
                if s.name == "alice" and s.broker is None]
    assert pair.store.claims()[welcome["sessionId"]] == "ba"
    assert pair.a.engine.state.registry.by_id[welcome["sessionId"]].broker is None


def test_a_newer_hello_on_another_broker_takes_the_id_from_the_live_holder():
    """The client moved (its old broker cannot reach it, but is alive): its newest
    hello wins the id there, and the old broker lets its copy go."""
    pair = linked_pair()
    welcome = alice_on_a(pair, 2000)
    pair.settle()
    pair.feed(pair.b, b"alice-moved", late_hello(welcome, 3000))
    pair.settle()
    answer = result_for(pair.seen[pair.b], b"alice-moved", "late-3000")
    assert answer["ok"] and answer["sessionId"] == welcome["sessionId"], answer
    assert pair.store.claims()[welcome["sessionId"]] == "bb"
    held_on_a = pair.a.engine.state.registry.by_id.get(welcome["sessionId"])
    assert held_on_a is not None and held_on_a.broker == "bb"        # a mirror now
    assert not [c for c in pair.seen[pair.b] if isinstance(c, Send)
                and c.identity == b"alice-moved" and c.env.get("code") == "stale_hello"]
