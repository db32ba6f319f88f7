"""Control connections (broker.core.sessions.control): a read-only look at the bus, driven
through the engine with a fake clock."""

from __future__ import annotations

import pytest

from broker.core import Persist, Publish
from schemas.agent_config import AgentSettings
from schemas.protocol import envelope

from .harness import Bus

CONTROL = {"sessionKind": "control"}


def bus_with(*names: str, group: str = "team") -> Bus:
    bus = Bus()
    for name in names:
        assert bus.hello(name, group=group)["ok"]
    return bus


def control(bus: Bus, name: str = "cli", group: str = "team", **fields) -> dict:
    welcome = bus.hello(name, group=group, **CONTROL, **fields)
    assert welcome["ok"], welcome
    return welcome


def names(rows: list[dict]) -> list[str]:
    return [row["name"] for row in rows]


# -- nobody's peer ------------------------------------------------------------------------

def test_a_control_connection_is_not_in_another_sessions_list_nor_counted_in_groups():
    bus = bus_with("alice")
    control(bus)
    assert names(bus.call(b"alice", "list")["sessions"]) == []
    assert names(bus.call(b"alice", "list", group="team")["sessions"]) == []
    assert bus.call(b"alice", "status")["visibleSessions"] == 0
    assert [(g["name"], g["sessions"]) for g in bus.call(b"alice", "groups")["groups"]] == \
        [("team", 1)]


def test_a_control_connection_sees_what_a_member_of_its_home_group_sees():
    bus = bus_with("alice", "bob")
    bus.hello("carol", group="elsewhere")
    control(bus)
    listed = bus.call(b"cli", "list")
    assert names(listed["sessions"]) == ["alice", "bob"] and listed["self"]["kind"] == "control"
    assert names(bus.call(b"cli", "list", group="elsewhere")["sessions"]) == ["carol"]
    status = bus.call(b"cli", "status")
    assert status["visibleSessions"] == 2 and status["groups"] == ["team"]
    assert bus.call(b"cli", "groups")["memberships"] == ["team"]


def test_a_control_connection_announces_no_presence_coming_or_going():
    bus = bus_with("watcher")
    bus.hello("cli", group="team", **CONTROL)
    assert bus.events(b"watcher") == [] and bus.published() == []
    bus.feed(b"cli", envelope("bye", id="bye-1"))
    assert bus.events(b"watcher") == [] and bus.published() == []
    assert [c for c in bus.last if isinstance(c, Publish)] == []


def test_a_silent_control_connection_expires_without_a_word():
    bus = bus_with("watcher")
    control(bus)
    liveness = bus.engine.state.limits.liveness_s
    bus.advance(liveness * 0.75)
    bus.feed(b"watcher", envelope("hb"))
    out = bus.advance(liveness * 0.5)      # the control connection is silent past liveness
    assert bus.engine.state.stats["sessions.control_closed"] == 1
    assert bus.events(b"watcher") == [] and [c for c in out if isinstance(c, Publish)] == []
    assert bus.call(b"cli", "status")["code"] == "not_connected"


def test_a_control_connection_writes_nothing_to_the_store():
    bus = Bus()
    bus.hello("cli", **CONTROL)
    opened = bus.persisted()
    bus.feed(b"cli", envelope("bye", id="bye-1"))
    assert opened == [] and bus.persisted() == []


@pytest.mark.parametrize("how", ["id", "name", "prefix"])
def test_a_control_connection_is_refused_as_a_target_like_an_unknown_one(how):
    bus = bus_with("alice")
    welcome = control(bus, name="looker")
    to = {"id": welcome["sessionId"], "name": "looker", "prefix": welcome["sessionId"][:8]}[how]
    for action in ("send", "ask"):
        result = bus.call(b"alice", action, to=to, message="hi")
        assert result["code"] == "target_not_found", result
    assert bus.sends(b"looker", "msg") == []


# -- what it may do ----------------------------------------------------------------------

@pytest.mark.parametrize("action, params", [
    ("reply", {"message": "hi"}),
    ("pending", {}),
    ("join", {"group": "other"}),
    ("leave", {}),
])
def test_a_control_connection_acting_for_nobody_has_no_asks_or_memberships_to_change(action, params):
    bus = bus_with("alice")
    control(bus)
    result = bus.call(b"cli", action, **params)
    assert result["code"] == "act_for_needed" and repr(action) in result["error"], result
    assert bus.sends(b"alice") == []


@pytest.mark.parametrize("kind, fields", [
    ("grant", {}),
    ("respond", {"content": "hi"}),
    ("invoke", {"session": "discord:1", "reason": "r"}),
    ("workflow", {"op": "register_run", "runId": "r1", "stages": []}),
    ("reset", {}),
    ("supervisor", {"message": "hi"}),
    ("sends", {"to": "alice", "ids": ["s1"], "messages": ["hi"]}),
])
def test_a_control_connection_makes_no_other_request(kind, fields):
    bus = bus_with()
    control(bus)
    assert bus.request(b"cli", kind, **fields)["code"] == "control_read_only"


@pytest.mark.parametrize("field, value", [("agent", "lys"), ("channel", "discord:1"),
                                          ("stage", "workflow:r/s"), ("parent", "p")])
def test_a_control_hello_that_asks_to_be_a_conversation_stage_or_child_is_refused(field, value):
    bus = Bus()
    refused = bus.hello("cli", **CONTROL, **{field: value})
    assert refused["code"] == "bad_envelope", refused
    assert "control connection" in refused["error"] and field in refused["error"]


# -- sessions of a named agent ------------------------------------------------------------

def agent_bus() -> Bus:
    bus = Bus()
    bus.set_agents(lys=AgentSettings(invoke=True))
    bus.hello("caller", agent="lys", channel="discord:1")
    bus.hello("dest", agent="lys", channel="discord:2")
    bus.feed(b"dest", envelope("bye", id="bye-dest"))     # offline, kept: persistent
    return bus


def test_looking_at_an_agents_conversations_consumes_no_invocation():
    bus = agent_bus()
    bus.feed(b"caller", envelope("invoke", id="inv-1", session="discord:2", reason="wake up"))
    bus.commit()                                         # the job is kept: queued
    assert [e["queued"] for e in bus.sends(b"caller", "result") if e["re"] == "inv-1"] == [True]
    control(bus)
    rows = {r["session"]: r for r in bus.request(b"cli", "sessions", agent="lys")["sessions"]}
    assert rows["discord:2"]["queuedInvocations"] == 1 and rows["discord:2"]["connected"] is False
    assert not any(row["current"] for row in rows.values())
    assert bus.request(b"cli", "sessions", agent="lys")["sessions"] == list(rows.values())
    bus.hello("dest", agent="lys", channel="discord:2")
    bus.commit()
    assert [e["reason"] for e in bus.sends(b"dest", "event") if e["event"] == "invocation"] == \
        ["wake up"]


def test_looking_does_not_change_which_conversation_is_the_agents_last():
    bus = agent_bus()
    bus.feed(b"caller", envelope("turn", turn="t1"))
    before = bus.request(b"caller", "sessions")["sessions"]
    control(bus)
    bus.request(b"cli", "sessions", agent="lys")
    assert bus.request(b"caller", "sessions")["sessions"] == before


def test_sessions_of_a_named_agent_is_for_control_connections_only():
    bus = agent_bus()
    assert bus.request(b"caller", "sessions", agent="lys")["code"] == "control_only"
    assert [r["current"] for r in bus.request(b"caller", "sessions")["sessions"]
            if r["session"] == "discord:1"] == [True]     # its own agent, as before
    control(bus)
    assert bus.request(b"cli", "sessions")["code"] == "missing_param"
    assert bus.request(b"cli", "sessions", agent="../x")["code"] == "invalid_agent"
    assert bus.request(b"cli", "sessions", agent="nobody")["sessions"] == []


def test_a_control_connection_counts_against_the_per_peer_bound():
    bus = Bus(max_sessions_per_connection=1)
    assert bus.hello("cli", peer="p", **CONTROL)["ok"]
    assert bus.hello("two", peer="p", **CONTROL)["code"] == "too_many_sessions"
    assert not any(isinstance(c, Persist) for c in bus.last)


def test_other_brokers_are_never_told_of_a_control_connection():
    from broker.core.kernel.commands import LinkSend
    from tests.unit.harness import result_for
    from tests.unit.brokers_in_memory import Pair

    pair = Pair()
    told: list[str] = []
    pump = pair.pump

    def watching(node, out):
        told.extend(row["name"] for c in out if isinstance(c, LinkSend) and node is pair.b
                    for env in c.envs for row in env.get("sessions", ()))
        pump(node, out)

    pair.pump = watching
    pair.hello(pair.b, "cli", **CONTROL)
    pair.hello(pair.b, "bob")
    pair.link()                      # the link hello carries every session b holds
    pair.hello(pair.b, "cli2", **CONTROL)
    pair.hello(pair.a, "alice")
    assert "bob" in told and not {"cli", "cli2"} & set(told)
    rows = result_for(pair.call(pair.a, b"alice", "list", "l1"), b"alice", "l1")["sessions"]
    assert [r["name"] for r in rows] == ["bob"]
