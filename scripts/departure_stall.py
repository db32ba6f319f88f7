#!/usr/bin/env python3
"""How long a crowd leaving at once stalls the sessions that stay.

    python3 scripts/departure_stall.py                  # 1800 sessions say bye at once
    python3 scripts/departure_stall.py --sessions 1000 --mode kill

Starts its own broker (ipc, fresh tmp dir), opens N sessions on raw DEALER sockets in
this process (one socket each, as a client process would), and a probe session (the
Python client) that calls ``status`` back to back. Then every one of the N sends
``bye`` at once (``--mode bye``) or all their sockets are closed without a word
(``--mode kill``: the broker finds them silent). Printed: the probe's worst and p99
``status`` latency while the crowd leaves, the same figures before it (the baseline
of this run) and their ratio, and how long until a watcher session had every
``session_left``.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

import zmq  # noqa: E402

from benchkit.tmp_broker import TmpBroker  # noqa: E402
from client import Client  # noqa: E402
from schemas.protocol import envelope, pack  # noqa: E402

mode_kill = mp.Value('b', False)


def probe_latencies(session, stop: threading.Event, out: list[float]) -> None:
    while not stop.is_set():
        t = time.perf_counter()
        answer = session.intercom(action="status")
        if not answer.get("connected"):
            raise SystemExit(f"the probe's status failed: {answer}")
        out.append(time.perf_counter() - t)


def figures(lat: list[float]) -> tuple[float, float]:
    if not lat:
        return float("nan"), float("nan")
    lat = sorted(lat)
    return lat[-1] * 1000, lat[min(len(lat) - 1, int(len(lat) * 0.99))] * 1000


class Crowd:
    """N raw sessions in one process: reads (and drops) what arrives, heartbeats on time."""

    def __init__(self, endpoint: str, n: int) -> None:
        self.ctx = zmq.Context()
        self.ctx.max_sockets = n + 64
        self.endpoint = endpoint
        self.socks: list[zmq.Socket] = []
        self.welcomed = 0
        self.beat = pack(envelope("hb"))
        self.next_beat = time.monotonic()

    def open(self, count: int) -> None:
        for _ in range(count):
            sock = self.ctx.socket(zmq.DEALER)
            sock.linger = 0
            sock.connect(self.endpoint)
            sock.send(pack(envelope("hello", id="h", name=f"crowd-{len(self.socks)}")))
            self.socks.append(sock)

    def service(self) -> None:
        for i, sock in enumerate(self.socks):
            while sock.poll(0):
                if b"livenessS" in sock.recv():
                    self.welcomed += 1
            if i % 64 == 0 and time.monotonic() >= self.next_beat:
                # Heartbeats go out on time even while a storm of events is read.
                self.next_beat = time.monotonic() + 0.5
                for other in self.socks:
                    other.send(self.beat)


def crowd(endpoint: str, n: int, ready, go, done) -> None:
    """The N sessions, in a process of their own: hello (100 at a time, each step
    welcomed before the next, so a storm of hellos does not keep the broker from
    reading the first ones' heartbeats), heartbeats until told to go, then every bye
    at once (or every socket closed)."""
    people = Crowd(endpoint, n)
    while len(people.socks) < n:
        people.open(min(100, n - len(people.socks)))
        deadline = time.monotonic() + 60
        while people.welcomed < len(people.socks) and time.monotonic() < deadline:
            people.service()
            time.sleep(0.005)
    if people.welcomed == n:
        ready.set()
    while not go.is_set():
        people.service()
        time.sleep(0.01)
    if mode_kill.value:
        for sock in people.socks:
            sock.close(0)
    else:
        for i, sock in enumerate(people.socks):
            sock.send(pack(envelope("bye", id=f"b{i}")))
    done.wait(120)
    for sock in people.socks:
        sock.close(0)
    people.ctx.term()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=1800)
    parser.add_argument("--mode", choices=("bye", "kill"), default="bye")
    args = parser.parse_args()
    n = args.sessions
    broker = TmpBroker.start("--max-sessions-per-connection", str(n + 16),
                             "--max-sessions", str(n + 64))
    ready, go, done = mp.Event(), mp.Event(), mp.Event()
    mode_kill.value = args.mode == "kill"
    proc = mp.Process(target=crowd, args=(broker.endpoint, n, ready, go, done), daemon=True)
    try:
        watcher = Client.connect(name="watcher", endpoint=broker.endpoint)
        probe = Client.connect(name="probe", endpoint=broker.endpoint)
        proc.start()
        if not ready.wait(120):
            raise SystemExit("the crowd was not welcomed in 120 s")
        joined = 0
        while joined < n:     # the connect storm is over for the watcher too
            event = watcher.next_event(timeout=60)
            if event is None:
                raise SystemExit(f"watcher saw {joined} of {n} joins")
            joined += event.get("event") == "session_joined"
        before: list[float] = []
        stop = threading.Event()
        thread = threading.Thread(target=probe_latencies, args=(probe, stop, before))
        thread.start()
        time.sleep(1.0)          # a baseline second of probing with the crowd idle
        stop.set()
        thread.join()
        during: list[float] = []
        stop = threading.Event()
        thread = threading.Thread(target=probe_latencies, args=(probe, stop, during))
        thread.start()
        t0 = time.monotonic()
        go.set()
        left = 0
        deadline = t0 + 60
        while left < n and time.monotonic() < deadline:
            event = watcher.next_event(timeout=1.0)
            if event is not None and event.get("event") == "session_left":
                left += 1
        all_left_s = time.monotonic() - t0
        stop.set()
        thread.join()
        done.set()
        b_max, b_p99 = figures(before)
        d_max, d_p99 = figures(during)
        print(f"{n} sessions leave ({args.mode}); watcher saw {left} session_left in {all_left_s:.2f} s")
        print(f"probe status before: max {b_max:.1f} ms  p99 {b_p99:.1f} ms  ({len(before)} calls)")
        print(f"probe status during: max {d_max:.1f} ms  p99 {d_p99:.1f} ms  ({len(during)} calls)")
        print(f"ratio during/before: max {d_max / b_max:.1f}x  p99 {d_p99 / b_p99:.1f}x")
        watcher.close()
        probe.close()
        return 0 if left == n else 1
    finally:
        done.set()
        proc.join(10)
        if proc.is_alive():
            proc.kill()
        broker.stop()


if __name__ == "__main__":
    sys.exit(main())
