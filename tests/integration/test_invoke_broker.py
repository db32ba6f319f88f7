"""respond and invoke against a real broker process, spoken in raw envelopes.

The client API for respond/invoke is built separately; these tests speak the wire
contract directly on a DEALER (msgpack frames), heartbeating while they wait, so
they check the broker alone: jobs committed before ``queued``, delivered exactly
once across a SIGKILL and restart, and outputs published on PUB ``channel:<id>``.
"""

from __future__ import annotations

import itertools
import os
import signal
import time

import msgpack
import pytest
import zmq

from schemas.protocol import envelope
from tests.conftest import start_broker
from tests.integration.conftest import wait_ready

WAIT_S = 15.0
_ids = itertools.count(1)


class Raw:
    """One session on a DEALER: requests answered by id, everything else kept in order."""

    def __init__(self, endpoint: str, name: str, **hello) -> None:
        self.sock = zmq.Context.instance().socket(zmq.DEALER)
        self.sock.linger = 0
        self.sock.connect(endpoint)
        self.inbox: list[dict] = []
        self.welcome = self.request("hello", name=name, **hello)
        assert self.welcome["ok"], self.welcome

    def post(self, kind: str, **fields) -> None:
        self.sock.send(msgpack.packb(envelope(kind, **fields), use_bin_type=True))

    def request(self, kind: str, **fields) -> dict:
        msg_id = f"q{next(_ids)}"
        self.post(kind, id=msg_id, **fields)
        return self.wait(lambda env: env.get("k") == "result" and env.get("re") == msg_id)

    def wait(self, matches, timeout: float = WAIT_S) -> dict:
        """The first envelope (kept or new) that ``matches``; heartbeats meanwhile."""
        deadline = time.monotonic() + timeout
        next_hb = 0.0
        while True:
            for env in self.inbox:
                if matches(env):
                    self.inbox.remove(env)
                    return env
            now = time.monotonic()
            if now >= deadline:
                raise AssertionError(f"nothing matched within {timeout:g} s; got {self.inbox}")
            if now >= next_hb:
                self.post("hb")
                next_hb = now + 0.5
            if self.sock.poll(200):
                value = msgpack.unpackb(self.sock.recv(), raw=False)
                self.inbox += value if isinstance(value, list) else [value]

    def events(self, name: str) -> list[dict]:
        return [env for env in self.inbox if env.get("k") == "event" and env.get("event") == name]

    def close(self) -> None:
        self.sock.close()


def is_invocation(env: dict) -> bool:
    return env.get("k") == "event" and env.get("event") == "invocation"


def started(data_dir):
    broker = start_broker(data_dir)
    wait_ready(broker.endpoint, broker.proc)
    return broker


class Running:
    """A broker process and the raw sessions opened on it; both closed by the test's end."""

    def __init__(self, data_dir) -> None:
        self.data_dir = data_dir
        self.broker = started(data_dir)
        self.raws: list[Raw] = []

    def open(self, name: str, **hello) -> Raw:
        raw = Raw(self.broker.endpoint, name, **hello)
        self.raws.append(raw)
        return raw

    def kill_and_restart(self) -> None:
        self.broker.stop(9)
        self.close_sessions()
        self.broker = started(self.data_dir)

    def close_sessions(self) -> None:
        for raw in self.raws:
            raw.close()
        self.raws.clear()


@pytest.fixture(params=["configured"])
def running(request, short_tmp):
    """A broker on a data dir where agent lys may invoke and has an owner, unless the
    test is parametrized ``running=["unconfigured"]`` (no agent config files)."""
    if request.param == "configured":
        config = short_tmp / "agents" / "lys" / "config"
        config.mkdir(parents=True)
        (config / "tools.toml").write_text("invoke = true\n")
        (config / "agent.toml").write_text('ownerId = "discord:owner"\n')
    bus = Running(short_tmp)
    yield bus
    bus.close_sessions()
    bus.broker.stop()


@pytest.mark.timeout(90)
def test_unstarted_jobs_survive_kill_9_and_are_each_delivered_once(running):
    caller = running.open("caller", agent="lys", channel="discord:1")
    dest = running.open("dest", agent="lys", channel="discord:2")
    dest.post("status", status="thinking")          # busy: the jobs stay queued
    answers = [caller.request("invoke", session="discord:2", reason=f"job {n}") for n in range(3)]
    assert all(a["ok"] and a["queued"] for a in answers), answers
    running.kill_and_restart()
    dest = running.open("dest", agent="lys", channel="discord:2")
    seen = []
    for _ in range(3):
        event = dest.wait(is_invocation)
        seen.append(event["id"])
        assert event["agent"] == "lys" and event["fromSession"] == "discord:1"
        dest.post("finish_invocation", id=event["id"], ok=True)
    (row,) = [r for r in dest.request("sessions")["sessions"] if r["session"] == "discord:2"]
    assert row["queuedInvocations"] == 0
    # Frames on one connection arrive in order: nothing more was handed over.
    assert sorted(seen) == sorted(a["id"] for a in answers)
    assert [e for e in dest.inbox if is_invocation(e)] == []


@pytest.mark.timeout(60)
def test_an_offline_destination_gets_its_job_on_connect_and_a_busy_one_when_idle(running):
    caller = running.open("caller", agent="lys", channel="discord:1")
    dest = running.open("dest", agent="lys", channel="discord:2")
    dest.request("bye")
    first = caller.request("invoke", session="discord:2", reason="offline")
    dest = running.open("dest", agent="lys", channel="discord:2")
    assert dest.wait(is_invocation)["id"] == first["id"]
    dest.post("status", status="thinking")
    second = caller.request("invoke", session="discord:2", reason="busy")
    dest.post("finish_invocation", id=first["id"], ok=True)
    assert dest.request("sessions")["ok"]            # the finish is handled by now
    assert dest.events("invocation") == []
    went_idle = time.monotonic()
    dest.post("status", status="idle")
    assert dest.wait(is_invocation)["id"] == second["id"]
    assert time.monotonic() - went_idle < 1.5


@pytest.mark.timeout(60)
def test_an_output_is_published_on_its_channel_topic_and_delivered_in_band(running):
    sub = zmq.Context.instance().socket(zmq.SUB)
    sub.linger = 0
    sub.connect(running.broker.pub_endpoint)
    sub.subscribe(b"channel:discord:2")
    try:
        caller = running.open("caller", agent="lys", channel="discord:1")
        dest = running.open("dest", agent="lys", channel="discord:2")
        deadline = time.monotonic() + WAIT_S
        while True:                       # until the subscription has reached the broker
            result = caller.request("respond", content="over there", channel="discord:2")
            assert result == {"v": 1, "k": "result", "re": result["re"], "ok": True,
                              "final": False, "sent": True, "channel": "discord:2",
                              "outputId": result["outputId"]}
            if sub.poll(200):
                break
            assert time.monotonic() < deadline, "no output published"
        topic, body = sub.recv_multipart()
    finally:
        sub.close()
    event = msgpack.unpackb(body, raw=False)
    assert topic == b"channel:discord:2"
    assert (event["event"], event["content"], event["fromSession"]) == (
        "output", "over there", "discord:1")
    inband = dest.wait(lambda env: env.get("event") == "output")
    assert inband["channel"] == "discord:2" and inband["final"] is False
    assert caller.request("respond", content="alert", channel="owner")["channel"] == "discord:owner"


@pytest.mark.timeout(60)
@pytest.mark.parametrize("running", ["unconfigured"], indirect=True)
def test_sighup_rereads_the_agents_config_files(running):
    unconfigured = running
    caller = unconfigured.open("caller", agent="lys", channel="discord:1")
    unconfigured.open("dest", agent="lys", channel="discord:2")
    assert caller.request("invoke", session="discord:2", reason="x")["code"] == "invoke_disabled"
    config = unconfigured.data_dir / "agents" / "lys" / "config"
    config.mkdir(parents=True)
    (config / "tools.toml").write_text("invoke = true\n")
    os.kill(unconfigured.broker.pid, signal.SIGHUP)
    deadline = time.monotonic() + WAIT_S
    while (result := caller.request("invoke", session="discord:2", reason="x"))["ok"] is not True:
        assert result["code"] == "invoke_disabled" and time.monotonic() < deadline
    assert result["queued"] is True
