"""Control connections end to end: ``python -m client`` looking at a real broker is
invisible to other sessions and consumes nothing (issue 17 item 13, issue 22's
"a CLI call is a control connection").

One broker (with an agent whose invoke is on) serves the module; each test works in
its own group and channels.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys

from .agent_helpers import agent_broker
from .conftest import ROOT, child_env, drain_events, unique, wait_for_event

AGENT = "kai"
shared_broker = agent_broker({AGENT: {"invoke": True}})


def cli(bus, home, *args: str) -> tuple[int, dict]:
    """Run ``python -m client --endpoint <broker> --json ARGS`` (HOME: ``home``); its
    exit code and JSON answer."""
    done = subprocess.run([sys.executable, "-m", "client", "--endpoint", bus.endpoint, "--json",
                           *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=60,
                          env=child_env(home))
    assert done.stderr == "", done.stderr
    return done.returncode, json.loads(done.stdout)


def is_invocation(event: dict) -> bool:
    return event["event"] == "invocation"


def row_of(session, channel: str) -> dict:
    (row,) = [r for r in session.list_sessions()["sessions"] if r["session"] == channel]
    return row


def test_the_cli_reading_a_conversation_leaves_its_queued_invocation_queued(bus, tmp_path):
    channel = f"discord:{unique('d')}"
    bus.connect(unique("dest"), agent=AGENT, channel=channel).close()   # kept, offline
    caller = bus.connect(unique("caller"), agent=AGENT, channel=f"internal:{unique('c')}")
    job = caller.invoke(session=channel, reason="look at the ticket")
    assert job["ok"] and job["queued"], job

    code, answer = cli(bus, tmp_path, "sessions", "--agent", AGENT, "--channel", channel)
    assert code == 0, answer
    assert [(r["session"], r["queuedInvocations"], r["connected"]) for r in answer["sessions"]] \
        == [(channel, 1, False)]
    code, everything = cli(bus, tmp_path, "sessions", "--agent", AGENT)
    assert code == 0 and {channel, caller.channel} <= {r["session"] for r in everything["sessions"]}
    assert not any(r["current"] for r in everything["sessions"])

    assert row_of(caller, channel)["queuedInvocations"] == 1       # the CLI took nothing
    back = bus.connect(unique("dest"), agent=AGENT, channel=channel)
    event, _ = wait_for_event(back, is_invocation, timeout=10)
    assert event["id"] == job["id"] and event["reason"] == "look at the ticket"
    assert back.finish_invocation(job["id"]) == {"ok": True}


def test_the_cli_prints_an_agents_conversations_as_a_table(bus, tmp_path):
    channel = f"discord:{unique('d')}"
    dest = bus.connect(unique("dest"), agent=AGENT, channel=channel)
    assert bus.connect(unique("sender")).intercom(action="send", to=dest.id, message="hi")["ok"]
    done = subprocess.run([sys.executable, "-m", "client", "--endpoint", bus.endpoint, "sessions",
                           "--agent", AGENT, "--channel", channel], cwd=ROOT, capture_output=True,
                          text=True, timeout=60, env=child_env(tmp_path))
    assert (done.returncode, done.stderr) == (0, ""), done
    header, row = done.stdout.splitlines()
    assert header.split() == ["SESSION", "CONNECTED", "QUEUED", "PERSISTENT", "REMOTE", "LAST",
                              "ACTIVE"]
    assert row.split()[:4] == [channel, "yes", "0", "yes"], row
    assert re.search(r"  (now|\d+s ago)$", row), row


def test_the_cli_names_a_conversation_the_agent_does_not_have(bus, tmp_path):
    code, answer = cli(bus, tmp_path, "sessions", "--agent", AGENT, "--channel", f"discord:{unique('n')}")
    assert code == 1 and answer["code"] == "channel_not_found", answer


def test_a_control_connection_is_listed_to_nobody_and_announces_nothing(bus):
    watcher = bus.connect(unique("watcher"))
    drain_events(watcher)
    looker = bus.connect(unique("looker"), kind="control")
    assert [s["name"] for s in looker.intercom(action="list")["sessions"]] == [watcher.name]
    assert watcher.intercom(action="list")["sessions"] == []
    assert [g["sessions"] for g in watcher.intercom(action="groups")["groups"]
            if g["name"] == bus.group] == [1]
    assert drain_events(watcher) == []
    refused = watcher.intercom(action="send", to=looker.id, message="hello?")
    assert refused["code"] == "target_not_found", refused
    assert looker.intercom(action="send", to=watcher.name, message="hi")["delivered"]
    assert watcher.receive(timeout=10)["from"] == looker.id
    looker.close()
    assert drain_events(watcher) == []


def test_cli_list_groups_and_status_read_through_a_control_connection(bus, tmp_path):
    watcher = bus.connect(unique("watcher"))
    drain_events(watcher)
    code, listed = cli(bus, tmp_path, "--as-group", bus.group, "list")
    assert code == 0 and [s["name"] for s in listed["sessions"]] == [watcher.name], listed
    assert listed["self"]["kind"] == "control"
    code, status = cli(bus, tmp_path, "--as-group", bus.group, "status")
    assert code == 0 and status["connected"] is True and status["visibleSessions"] == 1, status
    code, groups = cli(bus, tmp_path, "--as-group", bus.group, "groups")
    assert code == 0 and [g["sessions"] for g in groups["groups"] if g["name"] == bus.group] == [1]
    assert drain_events(watcher) == []
