#!/usr/bin/env python3
"""Broker memory under hostile requests of every kind: its RSS must stay flat.

    PYTHONPATH=. python3 scripts/fuzz_memory.py                 # 60 s
    PYTHONPATH=. python3 scripts/fuzz_memory.py --seconds 300 --workers 4

A fresh broker starts (ipc sockets in a tmp dir, see benchkit.tmp_broker). Worker
threads open raw DEALER sessions that come and go (most say ``bye``, some vanish and
are dropped by the liveness check; some are agent sessions, some are children of
another live session). Each session sends bursts of requests of every client kind
declared in :data:`schemas.kinds.CLIENT_KINDS`, each one mutated one way:

* ``undeclared``: a valid-looking request plus an undeclared field of ``--field-bytes``;
* ``declared``:   one declared field (or tool parameter) set to ``--field-bytes`` of text;
* ``wrong-type``: one declared field (or tool parameter) of another type, often big;
* ``plain``:      a valid-looking request, big text where the kind takes text.

Targets are the other live sessions, so sends and asks are delivered too, and asks
are answered by their targets with big replies. The broker's VmRSS is printed at
the start, every ``--every`` seconds, at the end of the traffic, and once the
sessions are gone (after the liveness window), with the ratio end/start. Exit
status 1 when the end is more than ``--max-growth-mib`` above the start, or when
any answer said ``internal_error``.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import threading
import time
import uuid

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import msgpack  # noqa: E402
import zmq  # noqa: E402

from benchkit.procs import proc_stats  # noqa: E402
from benchkit.tmp_broker import TmpBroker  # noqa: E402
from schemas.kinds import CLIENT_KINDS, Kind  # noqa: E402
from schemas.limits import LIVENESS_S, MAX_FRAME_BYTES, PROTOCOL_VERSION  # noqa: E402
from schemas.tools import INTERCOM_ACTIONS, INTERCOM_SCHEMA  # noqa: E402

MUTATIONS = ("undeclared", "declared", "wrong-type", "plain")
WORKFLOW_OPS = ("register_run", "add_stages", "stage_state", "end_run", "revoke_stage",
                "take_over")
# Never sent in a burst: hello opens a session, bye ends it (both sent on their own).
_LIFECYCLE = frozenset({"hello", "bye"})


def pack(value) -> bytes:
    return msgpack.packb(value, use_bin_type=True)


def rss_mib(pid: int) -> float:
    return proc_stats(pid).get("VmRSS", 0.0)


class Live:
    """Ids of the live fuzz sessions, shared by the workers (targets, parents)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.ids: list[str] = []

    def add(self, session_id: str) -> None:
        with self.lock:
            self.ids.append(session_id)

    def remove(self, session_id: str) -> None:
        with self.lock:
            if session_id in self.ids:
                self.ids.remove(session_id)

    def pick(self, rng: random.Random) -> str:
        with self.lock:
            return rng.choice(self.ids) if self.ids else str(uuid.uuid4())


class Fuzzer:
    """One worker's generator of envelopes: every client kind, mutated."""

    def __init__(self, rng: random.Random, big: str, live: Live) -> None:
        self.rng = rng
        self.big = big
        self.live = live
        self.kinds = [k for k in CLIENT_KINDS if k.name not in _LIFECYCLE]

    def text(self) -> str:
        return self.big if self.rng.random() < 0.5 else self.big[: self.rng.randint(1, 2000)]

    def base(self, kind: Kind) -> dict:
        """A plausible request of ``kind``, big where it takes text."""
        rng, name = self.rng, kind.name
        to = self.live.pick(rng)
        fields: dict = {
            "call": lambda: {"action": rng.choice(INTERCOM_ACTIONS), "to": to,
                             "message": self.text(), "group": f"g{rng.randint(0, 9)}"},
            "sends": lambda: {"to": to, "ids": [str(uuid.uuid4()) for _ in range(3)],
                              "messages": [self.text()[:20_000] for _ in range(3)]},
            "supervisor": lambda: {"message": self.text()},
            "workflow": lambda: {"op": rng.choice(WORKFLOW_OPS), "runId": f"r{rng.randint(0, 99)}",
                                 "stages": [{"name": "s"}], "stage": "s", "state": "RUNNING"},
            "status": lambda: {"status": rng.choice(["idle", "thinking", "tool:x"])},
            "received": lambda: {"ids": [str(uuid.uuid4())]},
            "grant": lambda: {"for": "child"},
            "respond": lambda: {"content": self.text(), "channel": "current"},
            "invoke": lambda: {"session": f"internal:{to}", "reason": "x" * 100},
            "finish_invocation": lambda: {"ok": True},
            "turn": lambda: {"turn": str(uuid.uuid4())},
            "recovery": lambda: {"turn": str(uuid.uuid4()), "outcome": "pending",
                                 "drafts": [{"id": "d", "text": self.text()[:50_000],
                                             "completion": "x", "outcome": "pending"}]},
            "hb": lambda: {"read": 0},
        }.get(name, dict)()
        if name == "call" and fields["action"] == "reply":
            fields["replyTo"] = str(uuid.uuid4())
        if name == "call" and fields["action"] == "ask":
            fields["timeout"] = 30
        return fields

    def field_names(self, kind: Kind) -> list[str]:
        names = [f.name for f in kind.fields]
        if kind.params == "intercom":
            names += list(INTERCOM_SCHEMA["properties"])
        return names

    def wrong(self) -> object:
        rng, big = self.rng, self.big
        return rng.choice([12345, -1, 1.5, True, None, [big], {"a": big}, [[1, 2]] * 1000,
                           {"k": ["x"] * 1000}, b"\x00" * 1000, "x" * 10])

    def envelope(self, kind: Kind, mutation: str) -> dict:
        env = {"v": PROTOCOL_VERSION, "k": kind.name, "id": str(uuid.uuid4()), **self.base(kind)}
        names = self.field_names(kind)
        if mutation == "undeclared":
            env[f"junk{self.rng.randint(0, 9)}"] = self.big
        elif mutation == "declared" and names:
            name = self.rng.choice(names)
            env[name] = [self.big] if name in ("ids", "messages", "drafts", "groups",
                                               "attachments", "stages") else self.big
        elif mutation == "wrong-type" and names:
            env[self.rng.choice(names + ["id", "k"])] = self.wrong()
        return env

    def burst(self, n: int) -> list[bytes]:
        frames = []
        for _ in range(n):
            env = self.envelope(self.rng.choice(self.kinds), self.rng.choice(MUTATIONS))
            frame = pack(env)
            if len(frame) <= MAX_FRAME_BYTES:
                frames.append(frame)
        return frames


class Session:
    """A raw DEALER session; answers asks it receives with big replies."""

    def __init__(self, ctx: zmq.Context, endpoint: str) -> None:
        self.sock = ctx.socket(zmq.DEALER)
        self.sock.linger = 0
        self.sock.connect(endpoint)
        self.id: str | None = None
        self.asks: list[str] = []
        self.internal_errors = 0          # answers saying the broker hit a bug

    def read(self, timeout_s: float, until: str | None = None) -> dict | None:
        """Read frames until the result for ``until`` (returned) or ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while (left := deadline - time.monotonic()) > 0:
            if not self.sock.poll(left * 1000):
                return None
            value = msgpack.unpackb(self.sock.recv(), raw=False)
            for env in value if isinstance(value, list) else [value]:
                if not isinstance(env, dict):
                    continue
                if env.get("k") == "msg" and env.get("expectsReply"):
                    self.asks.append(env["id"])
                elif env.get("code") == "internal_error":
                    self.internal_errors += 1
                if until is not None and env.get("k") == "result" and env.get("re") == until:
                    return env
        return None

    def request(self, env: dict, timeout_s: float = 10.0) -> dict | None:
        self.sock.send(pack(env))
        return self.read(timeout_s, env["id"])

    def close(self) -> None:
        self.sock.close()


def hello(fuzz: Fuzzer, session: Session, n: int) -> bool:
    env = {"v": PROTOCOL_VERSION, "k": "hello", "id": str(uuid.uuid4()), "name": f"fz{n}",
           "group": "fuzz"}
    roll = fuzz.rng.random()
    if roll < 0.2:
        env.update(agent=f"fuzz{n % 5}", persistent=False)
    elif roll < 0.3:
        env["parent"] = fuzz.live.pick(fuzz.rng)      # no grant: refused
    elif roll < 0.4:
        env["junk"] = fuzz.big
    answer = session.request(env)
    if not answer or not answer.get("ok"):
        return False
    session.id = answer["sessionId"]
    return True


def worker(endpoint: str, seed: int, big: str, live: Live, stop: threading.Event,
           counts: dict, lock: threading.Lock, bursts: int, burst_size: int) -> None:
    rng = random.Random(seed)
    fuzz = Fuzzer(rng, big, live)
    ctx = zmq.Context.instance()
    n = 0
    while not stop.is_set():
        n += 1
        session = Session(ctx, endpoint)
        try:
            if not hello(fuzz, session, seed * 1_000_000 + n):
                continue
            live.add(session.id)
            sent = 0
            for _ in range(bursts):
                if stop.is_set():
                    break
                frames = fuzz.burst(burst_size)
                for ask_id in session.asks[:4]:      # answer what we were asked, big
                    frames.append(pack({"v": PROTOCOL_VERSION, "k": "call", "id": str(uuid.uuid4()),
                                        "action": "reply", "replyTo": ask_id,
                                        "message": fuzz.text()}))
                session.asks.clear()
                for frame in frames:
                    session.sock.send(frame)
                    sent += len(frame)
                probe = str(uuid.uuid4())             # answered after everything above
                session.sock.send(pack({"v": PROTOCOL_VERSION, "k": "probe", "id": probe}))
                session.read(10.0, probe)
                with lock:
                    counts["requests"] += len(frames)
                    counts["bytes"] += sent
                sent = 0
            live.remove(session.id)
            if rng.random() < 0.8:
                session.sock.send(pack({"v": PROTOCOL_VERSION, "k": "bye"}))
                session.read(0.05)
            else:
                with lock:
                    counts["vanished"] += 1            # dropped by the liveness check
            with lock:
                counts["sessions"] += 1
        finally:
            with lock:
                counts["internal_errors"] += session.internal_errors
            session.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="fuzz this long (default 60)")
    parser.add_argument("--workers", type=int, default=4, help="worker threads (default 4)")
    parser.add_argument("--field-bytes", type=int, default=250_000,
                        help="size of each big field (default 250000)")
    parser.add_argument("--bursts", type=int, default=5, help="bursts per session (default 5)")
    parser.add_argument("--burst-size", type=int, default=20,
                        help="requests per burst (default 20)")
    parser.add_argument("--every", type=float, default=10.0, help="print RSS this often (s)")
    parser.add_argument("--max-growth-mib", type=float, default=20.0,
                        help="exit 1 when the broker ends this much above its start")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()

    broker = TmpBroker.start()
    pid = broker.popen.pid
    live, stop, lock = Live(), threading.Event(), threading.Lock()
    counts = {"requests": 0, "bytes": 0, "sessions": 0, "vanished": 0, "internal_errors": 0}
    big = "x" * args.field_bytes
    try:
        start = rss_mib(pid)
        print(f"broker pid {pid}: RSS at start {start:.1f} MiB; fuzzing {args.seconds:g} s "
              f"with {args.workers} workers, fields of {args.field_bytes} bytes", flush=True)
        threads = [threading.Thread(target=worker, daemon=True,
                                    args=(broker.endpoint, args.seed * 100 + w, big, live, stop,
                                          counts, lock, args.bursts, args.burst_size))
                   for w in range(args.workers)]
        for thread in threads:
            thread.start()
        began = time.monotonic()
        peak = start
        while (elapsed := time.monotonic() - began) < args.seconds:
            time.sleep(min(args.every, args.seconds - elapsed))
            if broker.popen.poll() is not None:
                print(f"broker exited with {broker.popen.returncode}")
                return 1
            now = rss_mib(pid)
            peak = max(peak, now)
            print(f"  {time.monotonic() - began:6.1f} s  RSS {now:7.1f} MiB  "
                  f"requests {counts['requests']:>8}  sent {counts['bytes'] / 2**20:9.1f} MiB  "
                  f"sessions {counts['sessions']:>6}", flush=True)
        stop.set()
        for thread in threads:
            thread.join(30)
        traffic_end = rss_mib(pid)
        # Sessions that vanished are dropped once silent for the liveness window.
        time.sleep(2 * LIVENESS_S + 1)
        end = rss_mib(pid)
        peak = max(peak, traffic_end, end)
        print(f"sent {counts['requests']} requests ({counts['bytes'] / 2**20:.1f} MiB) from "
              f"{counts['sessions']} sessions ({counts['vanished']} vanished without bye); "
              f"{counts['internal_errors']} answered internal_error")
        print(f"RSS start {start:.1f} MiB, end of traffic {traffic_end:.1f} MiB, "
              f"after the sessions left {end:.1f} MiB, peak {peak:.1f} MiB; "
              f"end/start {end / start:.2f}, growth {end - start:+.1f} MiB")
        alive = broker.popen.poll() is None
        if not alive:
            print(f"broker exited with {broker.popen.returncode}")
        return 0 if alive and end - start <= args.max_growth_mib and \
            not counts["internal_errors"] else 1
    finally:
        stop.set()
        broker.stop()


if __name__ == "__main__":
    sys.exit(main())
