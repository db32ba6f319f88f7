"""Control connections beyond reading (broker.core.sessions.control, broker.core.sessions.acting): sends
and asks as itself, calls made for the session it acts for, and the operator's
overview, driven through the engine with a fake clock."""

from __future__ import annotations

import pytest

from broker.core import Publish
from schemas.protocol import envelope

from .harness import Bus, result_for

CONTROL = {"sessionKind": "control"}


def team(*names: str) -> tuple[Bus, dict[str, dict]]:
    bus = Bus()
    welcomes = {}
    for name in names:
        welcomes[name] = bus.hello(name, group="team")
        assert welcomes[name]["ok"], welcomes[name]
    return bus, welcomes


def acting_for(bus: Bus, welcome: dict, token: str | None = None, name: str = "cli") -> dict:
    return bus.hello(name, group="team", **CONTROL, actFor=welcome["sessionId"],
                     actForToken=token or welcome["token"])


def control_hello(bus: Bus, peer: str, peer_is_address: bool, name: str = "op") -> dict:
    out = bus.feed(name.encode(), envelope("hello", id="h-op", name=name, **CONTROL),
                   peer=peer, peer_is_address=peer_is_address)
    return result_for(out, name.encode(), "h-op")


# -- sends and asks as itself ---------------------------------------------------------------

def test_a_send_from_a_control_connection_reaches_its_target_and_announces_nothing():
    bus, _ = team("alice", "watcher")
    looker = bus.hello("cli", group="team", **CONTROL)
    result = bus.call(b"cli", "send", to="alice", message="hello there")
    assert result["ok"] and result["delivered"], result
    (msg,) = bus.sends(b"alice", "msg")
    assert (msg["from"], msg["fromName"], msg["message"]) == (looker["sessionId"], "cli", "hello there")
    assert bus.sends(b"watcher") == [] and not [c for c in bus.last if isinstance(c, Publish)]
    assert [row["name"] for row in bus.call(b"watcher", "list")["sessions"]] == ["alice"]


def test_an_ask_from_a_control_connection_gets_its_reply_back():
    bus, _ = team("alice")
    bus.hello("cli", group="team", **CONTROL)
    bus.feed(b"cli", envelope("call", id="ask-1", action="ask", to="alice", message="ready?"))
    (asked,) = bus.sends(b"alice", "msg")
    assert asked["expectsReply"] is True
    assert bus.call(b"alice", "reply", message="yes")["ok"]
    (answer,) = [e for e in bus.sends(b"cli", "result") if e["re"] == "ask-1"]
    assert answer["ok"] and answer["message"] == "yes" and answer["fromName"] == "alice"


def test_the_asks_of_a_control_connection_end_when_it_goes():
    bus, _ = team("alice")
    bus.hello("cli", group="team", **CONTROL)
    bus.feed(b"cli", envelope("call", id="ask-1", action="ask", to="alice", message="ready?"))
    assert len(bus.call(b"alice", "pending")["pending"]) == 1
    bus.feed(b"cli", envelope("bye", id="bye-1"))
    assert bus.call(b"alice", "pending")["pending"] == []
    assert bus.call(b"alice", "reply", message="late")["code"] == "no_pending_ask"


def test_a_control_connection_sends_only_within_its_home_group():
    bus, _ = team("alice")
    bus.hello("carol", group="elsewhere")
    bus.hello("cli", group="team", **CONTROL)
    assert bus.call(b"cli", "send", to="carol", message="hi")["code"] == "target_not_found"


# -- acting for a session ------------------------------------------------------------------

def test_pending_and_reply_for_the_session_it_acts_for():
    bus, welcomes = team("alice", "bob")
    bus.feed(b"bob", envelope("call", id="ask-1", action="ask", to="alice", message="ready?"))
    assert acting_for(bus, welcomes["alice"])["ok"]
    (row,) = bus.call(b"cli", "pending")["pending"]
    assert (row["messageId"], row["fromName"], row["preview"]) == ("ask-1", "bob", "ready?")
    answered = bus.call(b"cli", "reply", message="yes, from the console")
    assert answered["ok"] and answered["replyTo"] == "ask-1", answered
    (reply,) = [e for e in bus.sends(b"bob", "result") if e["re"] == "ask-1"]
    assert reply["message"] == "yes, from the console" and reply["from"] == welcomes["alice"]["sessionId"]
    assert bus.call(b"alice", "pending")["pending"] == []


def test_join_and_leave_for_the_session_it_acts_for_are_told_to_that_session():
    bus, welcomes = team("alice")
    assert acting_for(bus, welcomes["alice"])["ok"]
    joined = bus.call(b"cli", "join", group="ops")
    assert joined["ok"] and joined["groups"] == ["team", "ops"], joined
    told = [e for e in bus.sends(b"alice", "event") if e["event"] == "memberships_changed"]
    assert [e["groups"] for e in told] == [["team", "ops"]]
    assert bus.call(b"alice", "status")["groups"] == ["team", "ops"]
    left = bus.call(b"cli", "leave", group="team")
    assert left["ok"] and left["groups"] == ["ops"]
    assert bus.call(b"cli", "status")["groups"] == ["team"]      # its own never change


def test_a_control_connection_acting_for_someone_still_sends_as_itself():
    bus, welcomes = team("alice", "bob")
    looker = acting_for(bus, welcomes["alice"])
    assert bus.call(b"cli", "send", to="bob", message="hi")["ok"]
    (msg,) = bus.sends(b"bob", "msg")
    assert msg["from"] == looker["sessionId"] != welcomes["alice"]["sessionId"]


@pytest.mark.parametrize("how", ["wrong secret", "unknown id", "a control connection"])
def test_acting_for_a_session_needs_its_id_and_reclaim_secret(how):
    bus, welcomes = team("alice")
    other = bus.hello("other", group="team", **CONTROL)
    target = {"wrong secret": welcomes["alice"], "a control connection": other,
              "unknown id": {"sessionId": "nobody", "token": "x"}}[how]
    refused = acting_for(bus, target, token="token-999" if how == "wrong secret" else None)
    assert refused["code"] == "act_for_refused", refused
    assert bus.call(b"cli", "pending")["code"] == "not_connected"


def test_acting_for_a_session_that_left_is_refused_at_the_next_call():
    bus, welcomes = team("alice")
    assert acting_for(bus, welcomes["alice"])["ok"]
    bus.feed(b"alice", envelope("bye", id="bye-a"))
    assert bus.call(b"cli", "pending")["code"] == "act_for_refused"


# -- the operator's overview ---------------------------------------------------------------

@pytest.mark.parametrize("peer, by_address", [
    ("Peer-Address=localhost:0:0:4242", False),     # ipc
    ("Peer-Address=127.0.0.1", True),
    ("Peer-Address=::1", True),
])
def test_the_overview_shows_every_group_to_a_control_connection_on_the_brokers_host(peer, by_address):
    bus, _ = team("alice")
    bus.hello("carol", group="elsewhere")
    bus.hello("cli", group="team", **CONTROL)     # another control connection: not a row
    assert control_hello(bus, peer, by_address)["ok"]
    seen = bus.request(b"op", "overview")
    assert seen["ok"] and seen["brokerId"] == "test", seen
    assert [(r["name"], r["homeGroup"], r["broker"]) for r in seen["sessions"]] == \
        [("alice", "team", None), ("carol", "elsewhere", None)]
    assert seen["workflows"] == []


@pytest.mark.parametrize("peer, by_address", [
    ("Peer-Address=10.1.2.3", True),
    ("User-Id=someClientKey", False),
    ("", False),
])
def test_the_overview_is_refused_from_another_host_or_another_key(peer, by_address):
    bus, _ = team("alice")
    assert control_hello(bus, peer, by_address)["ok"]
    assert bus.request(b"op", "overview")["code"] == "operator_only"


def test_the_overview_is_for_the_holder_of_the_brokers_own_curve_key():
    bus, _ = team("alice")
    bus.engine.state.cluster.curve_public = "brokerKey"
    assert control_hello(bus, "User-Id=brokerKey", False)["ok"]
    assert [r["name"] for r in bus.request(b"op", "overview")["sessions"]] == ["alice"]


def test_the_overview_is_for_control_connections_only():
    bus, _ = team("alice")
    assert control_hello(bus, "Peer-Address=127.0.0.1", True, name="alice2")["ok"]
    refused = bus.feed(b"alice", envelope("overview", id="o1"), peer="Peer-Address=127.0.0.1",
                       peer_is_address=True)
    assert result_for(refused, b"alice", "o1")["code"] == "operator_only"


def test_the_overview_shows_every_run_with_its_stages_and_queued_counts():
    bus, _ = team("alice")
    bus.hello("host", group="elsewhere")
    assert bus.workflow(b"host", "register_run", runId="r1",
                        stages=[{"name": "plan"}, {"name": "build"}])["ok"]
    bus.feed(b"host", envelope("call", id="q1", action="send", to="workflow:r1/build",
                               message="use the cache"))
    assert result_for(bus.commit(), b"host", "q1")["queued"] is True
    assert control_hello(bus, "Peer-Address=127.0.0.1", True)["ok"]
    (run,) = bus.request(b"op", "overview")["workflows"]
    assert run["runId"] == "r1" and run["group"] == "workflow:r1"
    assert [(s["target"], s["label"], s["queued"]) for s in run["stages"]] == \
        [("workflow:r1/plan", "PENDING", 0), ("workflow:r1/build", "PENDING", 1)]
    assert bus.call(b"alice", "list")["sessions"] == []          # alice sees no run


# -- several brokers ------------------------------------------------------------------------

def test_a_send_from_a_control_connection_to_another_brokers_session_is_refused_at_once():
    from tests.unit.brokers_in_memory import Pair

    pair = Pair()
    pair.link()
    pair.hello(pair.b, "bob", group="team")
    pair.hello(pair.a, "cli", group="team", **CONTROL)
    for action in ("send", "ask"):
        out = pair.call(pair.a, b"cli", action, f"{action}-1", to="bob", message="hi")
        refused = result_for(out, b"cli", f"{action}-1")
        assert refused["code"] == "control_other_broker" and "'bob'" in refused["error"], refused
    assert pair.sent(pair.b, b"bob", "msg") == []
