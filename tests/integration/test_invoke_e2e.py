"""invoke, list_sessions, reset and delete end to end: a real broker with per-agent
configuration, persistent conversations that come and go, idle and busy destinations.

Agents with ``invoke = true`` are configured before the broker starts; each test uses
its own channel ids, and a row of ``list_sessions`` is looked up by its channel id.
"""

from __future__ import annotations

import time

from schemas.limits import INVOKE_RECHECK_S

from .agent_helpers import agent_broker
from .conftest import drain_events, unique, wait_for_event

AGENT, OTHER, DISABLED = "kai", "mio", "ren"
shared_broker = agent_broker({AGENT: {"invoke": True}, OTHER: {"invoke": True},
                              DISABLED: {"invoke": False}})


def conversation(bus, agent: str = AGENT, channel: str | None = None, **kwargs):
    return bus.connect(unique("s"), agent=agent, channel=channel, **kwargs)


def row_of(session, channel: str) -> dict:
    result = session.list_sessions()
    assert result["ok"], result
    rows = [row for row in result["sessions"] if row["session"] == channel]
    assert len(rows) == 1, result
    return rows[0]


def is_invocation(event: dict) -> bool:
    return event["event"] == "invocation"


def invocations_within(session, seconds: float) -> list[dict]:
    """The invocation events ``session`` gets in the next ``seconds`` (other events
    skipped): an absence check over a bounded, stated time."""
    deadline = time.monotonic() + seconds
    got = []
    while (left := deadline - time.monotonic()) > 0:
        event = session.next_event(left)
        if event is not None and is_invocation(event):
            got.append(event)
    return got


def test_list_sessions_shows_the_agents_conversations_with_their_fields(bus):
    agent = unique("a")
    me = conversation(bus, agent, f"discord:{unique('m')}")
    gone = conversation(bus, agent, f"remote:{unique('g')}")
    brief = conversation(bus, agent, persistent=False)
    conversation(bus, unique("b"), f"discord:{unique('x')}")     # another agent's
    gone.close()
    me.begin_turn()
    result = me.list_sessions()
    assert result["ok"], result
    rows = {row["session"]: row for row in result["sessions"]}
    assert set(rows) == {me.channel, gone.channel, brief.channel}
    assert set(rows[me.channel]) >= {"session", "persistent", "remote", "connected",
                                     "lastActiveAt", "queuedInvocations", "current"}
    assert rows[me.channel] | {"lastActiveAt": None} == {
        "session": me.channel, "persistent": True, "remote": False, "connected": True,
        "lastActiveAt": None, "queuedInvocations": 0, "current": True}
    assert isinstance(rows[me.channel]["lastActiveAt"], float)
    assert abs(rows[me.channel]["lastActiveAt"] - time.time()) < 60
    assert rows[gone.channel]["remote"] is True and rows[gone.channel]["connected"] is False
    assert rows[gone.channel]["persistent"] is True and rows[gone.channel]["current"] is False
    assert rows[brief.channel]["persistent"] is False and rows[brief.channel]["connected"] is True


def test_an_ephemeral_conversation_is_forgotten_when_it_leaves(bus):
    agent = unique("a")
    me = conversation(bus, agent, f"discord:{unique('m')}")
    brief = conversation(bus, agent, persistent=False)
    channel = brief.channel
    brief.close()
    assert channel not in {row["session"] for row in me.list_sessions()["sessions"]}


def test_invoke_to_a_busy_session_is_delivered_within_about_a_second_of_it_going_idle(bus):
    caller = conversation(bus, channel=f"internal:{unique('c')}")
    dest = conversation(bus, channel=f"discord:{unique('d')}")
    assert dest.set_status("thinking")["ok"]
    result = caller.invoke(session=dest.channel, reason="Time for the check-in. Ask how she is.")
    assert result["ok"] and result["queued"] is True and result["session"] == dest.channel, result
    job = result["id"]
    assert row_of(caller, dest.channel)["queuedInvocations"] == 1
    # Busy through two rechecks: nothing is handed over.
    assert [e for e in drain_events(dest) if is_invocation(e)] == []
    assert invocations_within(dest, 2 * INVOKE_RECHECK_S + 0.2) == []
    went_idle = time.monotonic()
    assert dest.set_status("idle")["ok"]
    event, _ = wait_for_event(dest, is_invocation, timeout=10)
    assert time.monotonic() - went_idle < INVOKE_RECHECK_S + 0.6
    assert event == {"event": "invocation", "id": job, "agent": AGENT,
                     "fromSession": caller.channel,
                     "reason": "Time for the check-in. Ask how she is."}
    assert row_of(caller, dest.channel)["queuedInvocations"] == 0
    assert dest.finish_invocation(job, ok=True) == {"ok": True}
    assert dest.finish_invocation(job, ok=True)["code"] == "unknown_invocation"


def test_invoke_to_an_idle_session_is_delivered_at_once_and_only_once(bus):
    caller = conversation(bus, channel=f"internal:{unique('c')}")
    dest = conversation(bus, channel=f"discord:{unique('d')}")
    job = caller.invoke(session=dest.channel, reason="look")["id"]
    event, _ = wait_for_event(dest, is_invocation, timeout=5)
    assert event["id"] == job
    assert dest.set_status("thinking")["ok"] and dest.set_status("idle")["ok"]
    assert [e for e in drain_events(dest) if is_invocation(e)] == []
    assert dest.finish_invocation(job, ok=False, error="the provider failed") == {"ok": True}


def test_invoke_to_an_offline_persistent_session_is_delivered_when_it_connects(bus):
    channel = f"discord:{unique('d')}"
    conversation(bus, channel=channel).close()
    caller = conversation(bus, channel=f"internal:{unique('c')}")
    result = caller.invoke(session=channel, reason="catch up when you are back")
    assert result["ok"] and result["queued"] is True, result
    row = row_of(caller, channel)
    assert row["connected"] is False and row["queuedInvocations"] == 1
    back = conversation(bus, channel=channel)
    event, _ = wait_for_event(back, is_invocation, timeout=5)
    assert event["id"] == result["id"] and event["reason"] == "catch up when you are back"
    assert back.finish_invocation(result["id"]) == {"ok": True}


def test_a_started_invocation_whose_session_leaves_is_not_handed_over_again(bus):
    channel = f"discord:{unique('d')}"
    caller = conversation(bus, channel=f"internal:{unique('c')}")
    dest = conversation(bus, channel=channel)
    job = caller.invoke(session=channel, reason="once")["id"]
    wait_for_event(dest, is_invocation, timeout=5)
    dest.close()                      # before finish_invocation: the job failed
    back = conversation(bus, channel=channel)
    assert [e for e in drain_events(back) if is_invocation(e)] == []
    assert back.finish_invocation(job)["code"] == "unknown_invocation"
    assert row_of(caller, channel)["queuedInvocations"] == 0


def test_invoke_refusals_each_have_their_own_code(bus):
    caller = conversation(bus, channel=f"internal:{unique('c')}")
    remote = conversation(bus, channel=f"remote:{unique('r')}")
    brief = conversation(bus, channel=f"discord:{unique('e')}", persistent=False)
    other_agents = conversation(bus, OTHER, f"discord:{unique('o')}")
    dest = conversation(bus, channel=f"discord:{unique('d')}")
    for alias in ("last", "owner", "current"):
        assert caller.invoke(session=alias, reason="x")["code"] == "invoke_alias", alias
    assert caller.invoke(session=caller.channel, reason="x")["code"] == "invoke_self"
    assert caller.invoke(session=brief.channel, reason="x")["code"] == "invoke_ephemeral"
    assert caller.invoke(session=remote.channel, reason="x")["code"] == "invoke_remote_target"
    assert remote.invoke(session=dest.channel, reason="x")["code"] == "invoke_remote_caller"
    assert caller.invoke(session=other_agents.channel, reason="x")["code"] == "invoke_cross_agent"
    assert caller.invoke(session=f"discord:{unique('n')}", reason="x")["code"] == "channel_not_found"
    assert caller.invoke(session=dest.channel, reason="")["code"] == "invalid_params"
    disabled = conversation(bus, DISABLED, f"internal:{unique('c')}")
    disabled_dest = conversation(bus, DISABLED, f"discord:{unique('d')}")
    assert disabled.invoke(session=disabled_dest.channel, reason="x")["code"] == "invoke_disabled"
    unconfigured = conversation(bus, unique("a"), f"internal:{unique('c')}")
    assert unconfigured.invoke(session=dest.channel, reason="x")["code"] in (
        "invoke_disabled", "invoke_cross_agent")
    assert bus.connect("no-agent").invoke(session=dest.channel, reason="x")["code"] == "no_agent"
    assert [e for e in drain_events(dest) if is_invocation(e)] == []


def test_delete_forgets_the_conversation_and_its_queued_invocations(bus):
    channel = f"discord:{unique('d')}"
    caller = conversation(bus, channel=f"internal:{unique('c')}")
    dest = conversation(bus, channel=channel)
    assert dest.set_status("thinking")["ok"]
    assert caller.invoke(session=channel, reason="dropped with the session")["ok"]
    assert dest.delete() == {"ok": True}
    row = row_of(caller, channel)          # still live, now ephemeral
    assert row["persistent"] is False and row["queuedInvocations"] == 0
    assert caller.invoke(session=channel, reason="x")["code"] == "invoke_ephemeral"
    assert dest.set_status("idle")["ok"]
    assert invocations_within(dest, INVOKE_RECHECK_S + 0.5) == []
    assert dest.delete()["code"] == "not_persistent"
    dest.close()
    assert channel not in {row["session"] for row in caller.list_sessions()["sessions"]}


def test_reset_keeps_the_conversation(bus):
    channel = f"discord:{unique('d')}"
    me = conversation(bus, channel=channel)
    assert me.reset() == {"ok": True}
    assert row_of(me, channel)["persistent"] is True
