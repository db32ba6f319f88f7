"""``python -m client tail`` on a real broker's PUB socket: channel outputs readable in
the plain tail, its probe never seen, and the ``--count`` / ``--timeout`` stops."""

from __future__ import annotations

import json
import subprocess
import time

from .agent_helpers import agent_broker
from .cli_helpers import Running, run_cli
from .conftest import drain_events, unique

AGENT = "kai"
shared_broker = agent_broker({AGENT: {}})


def keep_busy(session, until, timeout: float = 15.0) -> None:
    """PUB/SUB is a slow joiner: change ``session``'s status until ``until(wait_s)``
    (which waits up to ``wait_s`` for what it looks for) says it came."""
    deadline = time.monotonic() + timeout
    n = 0
    while True:
        assert session.set_status(("thinking", "idle")[n % 2])["ok"]
        n += 1
        if until(0.1):
            return
        assert time.monotonic() < deadline, f"nothing came within {timeout:g} s"


def exited(proc):
    def wait(seconds: float) -> bool:
        try:
            proc.wait(seconds)
        except subprocess.TimeoutExpired:
            return False
        return True
    return wait


def test_plain_tail_shows_channel_outputs_readably(bus, tmp_path):
    me = bus.connect(unique("me"), agent=AGENT, channel=f"internal:{unique('c')}")
    tail = Running(tmp_path, "--endpoint", bus.endpoint, "tail")
    try:
        deadline, line, n = time.monotonic() + 15, None, 0
        while line is None or "warm-up" not in line:
            assert time.monotonic() < deadline, "tail printed no output within 15 s"
            assert me.respond(content=f"warm-up {n}\nsecond line", final=False)["ok"]
            n += 1
            line = tail.reader.next_line(0.1)
        assert f" {me.channel} from {me.channel} final=false: warm-up " in line, line
        assert line.endswith("\\nsecond line") and "output ?" not in line
    finally:
        tail.interrupt()
        tail.close()


def test_the_tails_probe_is_never_seen_by_anyone(bus, tmp_path):
    watcher = bus.connect("watcher")
    drain_events(watcher)
    tail = Running(tmp_path, "--endpoint", bus.endpoint, "--as-group", bus.group, "--name",
                   "prober", "tail", "--group", bus.group, "--json")
    try:
        lines = []
        keep_busy(watcher, lambda wait: lines.append(tail.reader.next_line(wait)) or any(lines))
        assert drain_events(watcher) == []          # the probe came and went unannounced
        seen = [json.loads(line) for line in lines if line]
        assert all(e["session"]["name"] == "watcher" for e in seen), seen
    finally:
        tail.interrupt()
        tail.close()


def test_count_stops_the_tail_after_n_lines_with_0(bus, tmp_path):
    warm = bus.connect("warm")
    tail = Running(tmp_path, "--endpoint", bus.endpoint, "tail", "--group", bus.group,
                   "--json", "--count", "2")
    try:
        keep_busy(warm, exited(tail.proc))
        code, err = tail.wait()
        assert (code, err) == (0, "")
        lines = [tail.reader.next_line(5) for _ in range(3)]
        assert len([l for l in lines if l]) == 2 and lines[2] is None, lines
    finally:
        tail.close()


def test_timeout_stops_a_quiet_tail_with_0(bus, tmp_path):
    ran = run_cli(tmp_path, "--endpoint", bus.endpoint, "tail", "--group", unique("quiet"),
                  "--timeout", "1")
    assert (ran.code, ran.out, ran.err) == (0, "", ""), ran


def test_timeout_before_count_lines_is_exit_1_with_one_line(bus, tmp_path):
    ran = run_cli(tmp_path, "--endpoint", bus.endpoint, "tail", "--group", unique("quiet"),
                  "--timeout", "1", "--count", "3")
    assert (ran.code, ran.out) == (1, ""), ran
    assert ran.err == "timeout: 0 of 3 lines within 1 s\n"
