"""respond and invoke against a real broker process, spoken in raw envelopes.

The client API for respond/invoke is built separately; these tests speak the wire
contract directly on a DEALER (msgpack frames), heartbeating while they wait, so
they check the broker alone: jobs committed before ``queued``, delivered exactly
once across a SIGKILL and restart, and outputs published on PUB ``channel:<id>``.
"""

from __future__ import annotations

import itertools
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


@pytest.fixture
def agent_dir(short_tmp):
    config = short_tmp / "agents" / "lys" / "config"
    config.mkdir(parents=True)
    (config / "tools.toml").write_text("invoke = true\n")
    (config / "agent.toml").write_text('ownerId = "discord:owner"\n')
    return short_tmp


def started(data_dir):
    broker = start_broker(data_dir)
    wait_ready(broker.endpoint, broker.proc)
    return broker


@pytest.mark.timeout(90)
def test_unstarted_jobs_survive_kill_9_and_are_each_delivered_once(agent_dir):
    broker = started(agent_dir)
    raws = []
    try:
        caller = Raw(broker.endpoint, "caller", agent="lys", channel="discord:1")
        dest = Raw(broker.endpoint, "dest", agent="lys", channel="discord:2")
        raws += [caller, dest]
        dest.post("status", status="thinking")          # busy: the jobs stay queued
        answers = [caller.request("invoke", session="discord:2", reason=f"job {n}") for n in range(3)]
        assert all(a["ok"] and a["queued"] for a in answers), answers
        broker.stop(9)
        for raw in raws:
            raw.close()
        broker = started(agent_dir)
        dest = Raw(broker.endpoint, "dest", agent="lys", channel="discord:2")
        raws.append(dest)
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
    finally:
        for raw in raws:
            raw.close()
        broker.stop()


@pytest.mark.timeout(60)
def test_an_offline_destination_gets_its_job_on_connect_and_a_busy_one_when_idle(agent_dir):
    broker = started(agent_dir)
    raws = []
    try:
        caller = Raw(broker.endpoint, "caller", agent="lys", channel="discord:1")
        raws.append(caller)
        dest = Raw(broker.endpoint, "dest", agent="lys", channel="discord:2")
        dest.request("bye")
        dest.close()
        first = caller.request("invoke", session="discord:2", reason="offline")
        dest = Raw(broker.endpoint, "dest", agent="lys", channel="discord:2")
        raws.append(dest)
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
    finally:
        for raw in raws:
            raw.close()
        broker.stop()


@pytest.mark.timeout(60)
def test_an_output_is_published_on_its_channel_topic_and_delivered_in_band(agent_dir):
    broker = started(agent_dir)
    sub = zmq.Context.instance().socket(zmq.SUB)
    sub.linger = 0
    sub.connect(broker.pub_endpoint)
    sub.subscribe(b"channel:discord:2")
    raws = []
    try:
        caller = Raw(broker.endpoint, "caller", agent="lys", channel="discord:1")
        dest = Raw(broker.endpoint, "dest", agent="lys", channel="discord:2")
        raws += [caller, dest]
        deadline = time.monotonic() + WAIT_S
        while True:                       # until the subscription has reached the broker
            result = caller.request("respond", content="over there", channel="discord:2")
            assert result == {"v": 1, "k": "result", "re": result["re"], "ok": True,
                              "final": False, "sent": True, "channel": "discord:2"}
            if sub.poll(200):
                break
            assert time.monotonic() < deadline, "no output published"
        topic, body = sub.recv_multipart()
        event = msgpack.unpackb(body, raw=False)
        assert topic == b"channel:discord:2"
        assert (event["event"], event["content"], event["fromSession"]) == (
            "output", "over there", "discord:1")
        inband = dest.wait(lambda env: env.get("event") == "output")
        assert inband["channel"] == "discord:2" and inband["final"] is False
        owner = caller.request("respond", content="alert", channel="owner")
        assert owner["channel"] == "discord:owner"
    finally:
        sub.close()
        for raw in raws:
            raw.close()
        broker.stop()
