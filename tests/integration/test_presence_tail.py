"""Presence end to end: in-band events, ``python -m client tail`` on PUB, disconnects.

In-band checks are exact: :func:`drain_events` returns every event the broker has
sent a session so far, so "gets nothing" is an empty list, not a timeout.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import pytest

from tests.conftest import LIVENESS_S   # the window the test brokers run with

from .conftest import ROOT, LineReader, child_env, drain_events, stop_process, summary, unique, wait_for_event


def clear(*sessions) -> None:
    for session in sessions:
        drain_events(session)


@pytest.fixture
def world(bus):
    """alice and bob share a group; carol sits in a second group, ursula in a third."""
    g, h, u = bus.group, unique("h"), unique("u")
    alice, bob, carol, ursula = bus.connect_all(
        "alice", "bob", ("carol", {"group": h}), ("ursula", {"group": u}))
    clear(alice, bob, carol, ursula)
    return g, h, alice, bob, carol, ursula


# -- in-band presence ------------------------------------------------------------------------

def test_connect_sends_session_joined_only_to_sessions_that_can_see_the_newcomer(world, bus):
    g, h, alice, bob, carol, ursula = world
    dave = bus.connect("dave")
    assert summary(drain_events(alice)) == [("session_joined", "dave")]
    assert summary(drain_events(bob)) == [("session_joined", "dave")]
    assert drain_events(carol) == []
    assert drain_events(ursula) == []
    assert dave.id in {row["id"] for row in bob.intercom(action="list")["sessions"]}


def test_join_sends_session_joined_both_ways_and_presence_update_to_peers_that_saw_it(world):
    g, h, alice, bob, carol, ursula = world
    assert alice.intercom(action="join", group=h)["ok"]
    assert summary(drain_events(alice)) == [("session_joined", "carol")]
    assert summary(drain_events(carol)) == [("session_joined", "alice")]
    bob_events = drain_events(bob)
    assert summary(bob_events) == [("presence_update", "alice")]
    assert bob_events[0]["session"]["groups"] == [g, h]
    assert drain_events(ursula) == []


def test_leave_with_group_sends_session_left_both_ways_and_presence_update_to_peers_that_still_see_it(world):
    g, h, alice, bob, carol, ursula = world
    assert alice.intercom(action="join", group=h)["ok"]
    clear(alice, bob, carol, ursula)
    assert alice.intercom(action="leave", group=h)["ok"]
    assert summary(drain_events(alice)) == [("session_left", "carol")]
    assert summary(drain_events(carol)) == [("session_left", "alice")]
    bob_events = drain_events(bob)
    assert summary(bob_events) == [("presence_update", "alice")]
    assert bob_events[0]["session"]["groups"] == [g]
    assert drain_events(ursula) == []


def test_bare_leave_back_to_home_group_sends_joined_and_left_to_the_right_sessions(world):
    g, h, alice, bob, carol, ursula = world
    assert alice.intercom(action="join", group=h)["ok"]
    assert alice.intercom(action="leave", group=g)["ok"]
    clear(alice, bob, carol, ursula)
    result = alice.intercom(action="leave")
    assert result["ok"] and result["groups"] == [g], result
    assert sorted(summary(drain_events(alice))) == [("session_joined", "bob"), ("session_left", "carol")]
    assert summary(drain_events(bob)) == [("session_joined", "alice")]
    assert summary(drain_events(carol)) == [("session_left", "alice")]
    assert drain_events(ursula) == []


@pytest.mark.parametrize("status", ["thinking", "tool:bash", "idle"])
def test_set_status_sends_presence_update_to_visible_peers_only(world, status):
    g, h, alice, bob, carol, ursula = world
    assert alice.set_status(status) == {"ok": True, "status": status}
    bob_events = drain_events(bob)
    assert summary(bob_events) == [("presence_update", "alice")]
    assert bob_events[0]["session"]["status"] == status
    assert drain_events(alice) == []
    assert drain_events(carol) == []
    assert drain_events(ursula) == []


def test_status_change_shows_in_peers_list(world):
    g, h, alice, bob, carol, ursula = world
    assert alice.set_status("tool:grep")["ok"]
    rows = {row["id"]: row for row in bob.intercom(action="list")["sessions"]}
    assert rows[alice.id]["status"] == "tool:grep"


# -- disconnects ---------------------------------------------------------------------------------

def test_closed_session_is_gone_from_list_at_once_and_peers_get_session_left(world):
    g, h, alice, bob, carol, ursula = world
    bob.close()
    rows = alice.intercom(action="list")["sessions"]
    assert bob.id not in {row["id"] for row in rows}
    assert summary(drain_events(alice)) == [("session_left", "bob")]
    assert drain_events(carol) == []
    assert drain_events(ursula) == []


_VICTIM = """
import sys
from client import Client
session = Client.connect(name="victim", endpoint=sys.argv[1], group=sys.argv[2], timeout=15)
print(session.id, flush=True)
sys.stdin.read()
"""


@pytest.mark.timeout(60)
def test_killed_client_process_is_gone_within_seconds_and_peers_get_session_left(world, bus, tmp_path):
    g, h, alice, bob, carol, ursula = world
    victim = subprocess.Popen([sys.executable, "-c", _VICTIM, bus.endpoint, g], cwd=ROOT,
                              env=child_env(tmp_path), stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        victim_id = victim.stdout.readline().strip()
        assert victim_id, "the victim process did not connect"
        wait_for_event(alice, lambda e: e["event"] == "session_joined"
                       and e["session"]["id"] == victim_id, timeout=10)
        killed_at = time.monotonic()
        stop_process(victim, signal.SIGKILL)
        event, before = wait_for_event(alice, lambda e: e["session"]["id"] == victim_id,
                                       timeout=LIVENESS_S + 7)
        waited = time.monotonic() - killed_at
    finally:
        stop_process(victim, signal.SIGKILL)
        victim.stdin.close()
        victim.stdout.close()
    assert event["event"] == "session_left"
    assert waited < LIVENESS_S + 3, f"took {waited:.1f} s"
    rows = alice.intercom(action="list")["sessions"]
    assert victim_id not in {row["id"] for row in rows}
    left = [e for e in drain_events(bob) if e["session"]["id"] == victim_id]
    assert summary(left) == [("session_joined", "victim"), ("session_left", "victim")]
    assert [e for e in drain_events(ursula) if e["session"]["id"] == victim_id] == []


# -- python -m client tail -------------------------------------------------------------------------

@pytest.fixture
def start_tail(bus, tmp_path):
    started: list[subprocess.Popen] = []

    def _start(*args: str) -> LineReader:
        proc = subprocess.Popen(
            [sys.executable, "-m", "client", "tail", "--pub-endpoint", bus.broker.pub_endpoint, *args],
            cwd=ROOT, env=child_env(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True)
        started.append(proc)
        return LineReader(proc)

    yield _start
    for proc in started:
        stop_process(proc, signal.SIGINT)
        proc.stdout.close()
        proc.stderr.close()


def warm_up(reader: LineReader, session, timeout: float = 15.0) -> None:
    """PUB/SUB is a slow joiner: publish status changes until the tail prints one."""
    deadline = time.monotonic() + timeout
    statuses = ("thinking", "idle")
    n = 0
    while time.monotonic() < deadline:
        assert session.set_status(statuses[n % 2])["ok"]
        n += 1
        if reader.next_line(0.1) is not None:
            return
    raise AssertionError(f"tail printed nothing within {timeout:g} s")


def test_tail_json_prints_one_json_line_per_presence_event(bus, start_tail):
    g, k = bus.group, unique("k")
    warm = bus.connect("warm")
    reader = start_tail("--json")
    warm_up(reader, warm)
    zed = bus.connect("zed")
    assert zed.intercom(action="join", group=k)["ok"]
    assert zed.set_status("thinking")["ok"]
    assert zed.intercom(action="leave", group=k)["ok"]
    zed.close()

    def is_zed_leaving_g(line: str) -> bool:
        event = json.loads(line)
        return event["session"]["name"] == "zed" and event["event"] == "session_left" and event["group"] == g

    last, before = reader.wait_line(is_zed_leaving_g, timeout=10)
    events = [json.loads(line) for line in [*before, last]]
    zed_events = [(e["event"], e["group"]) for e in events if e["session"]["name"] == "zed"]
    assert zed_events == [
        ("session_joined", g),
        ("session_joined", k),
        ("presence_update", g),      # its peers in g saw its membership set change
        ("presence_update", g),      # set_status, once per group
        ("presence_update", k),
        ("session_left", k),
        ("presence_update", g),      # leave k, seen from g
        ("session_left", g),
    ]
    updates = [e for e in events if e["session"]["name"] == "zed" and e["event"] == "presence_update"]
    assert all(e["session"]["id"] == zed.id for e in updates)
    # Membership changes seen from a kept group carry the change, not the whole set.
    assert [(e["joinedGroups"], e["leftGroups"]) for e in updates if "joinedGroups" in e] == \
        [([k], []), ([], [k])]
    assert [e["session"]["status"] for e in updates][1:3] == ["thinking", "thinking"]


def test_tail_with_group_prints_only_that_groups_events(bus, start_tail):
    g = bus.group
    near = g + "x"   # shares g as a prefix: a SUB filter alone would let it through
    warm = bus.connect("warm")
    reader = start_tail("--group", g, "--json")
    warm_up(reader, warm)
    outsider = bus.connect("outsider", group=near)
    assert outsider.set_status("thinking")["ok"]
    bus.connect("insider")
    last, before = reader.wait_line(lambda line: json.loads(line)["session"]["name"] == "insider",
                                    timeout=10)
    events = [json.loads(line) for line in [*before, last]]
    assert all(e["group"] == g for e in events), events
    assert not [e for e in events if e["session"]["name"] == "outsider"]
    assert json.loads(last)["event"] == "session_joined"


def test_tail_without_json_prints_one_readable_line_per_event(bus, start_tail):
    g = bus.group
    warm = bus.connect("warm")
    reader = start_tail("--group", g)
    warm_up(reader, warm)
    zed = bus.connect("zed")
    assert zed.set_status("tool:grep")["ok"]
    last, before = reader.wait_line(lambda line: "zed" in line and "presence_update" in line, timeout=10)
    zed_lines = [line for line in [*before, last] if "zed" in line]
    assert len(zed_lines) == 2, zed_lines
    joined, updated = zed_lines
    for line in zed_lines:
        with pytest.raises(ValueError):
            json.loads(line)
        assert g in line and zed.id in line
    assert "session_joined" in joined
    assert "presence_update" in updated and "tool:grep" in updated


def test_tail_with_an_endpoint_follows_that_brokers_pub_socket(bus, tmp_path):
    """No --pub-endpoint: the broker's welcome says where its PUB socket is."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "client", "--endpoint", bus.broker.endpoint, "tail", "--json"],
        cwd=ROOT, env=child_env(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    reader = LineReader(proc)
    try:
        warm_up(reader, bus.connect("warm"))
    finally:
        stop_process(proc, signal.SIGINT)
        proc.stdout.close()
