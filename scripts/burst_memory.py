#!/usr/bin/env python3
"""Broker memory after a burst of refused large requests: is it given back?

    python3 scripts/burst_memory.py                       # this checkout, 600 requests
    python3 scripts/burst_memory.py --tree /tmp/base      # and another checkout beside it
    python3 scripts/burst_memory.py --count 2000 --size 250000 --idle-s 10

One raw DEALER connection says hello, then sends ``--count`` requests, each carrying a
``--size``-byte field, spread over every kind a client can send that the broker refuses
at once: a send, an ask and a pipelined ``sends`` to nobody (``target_not_found``), a
``workflow`` op with a huge run id (``invalid_params``), a ``respond`` from a session
with no agent (``no_agent``), an unknown action and an unknown kind, and a ``hello``
with a huge name on a connection of its own (``invalid_name``). Every refusal is read.
Printed per tree: the broker's VmRSS at start (after the hello), right after the burst,
and after ``--idle-s`` seconds of idle (only heartbeats), in MiB, and what stays above
the start. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path

import zmq

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "scripts")]

from benchkit.tmp_broker import TmpBroker  # noqa: E402
from schemas.protocol import envelope, pack, unpack_frame  # noqa: E402


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


class Peer:
    def __init__(self, ctx: zmq.Context, endpoint: str) -> None:
        self.sock = ctx.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.connect(endpoint)
        self.n = 0
        self.read = 0           # bytes read: reported in heartbeats, as a client must

    def recv(self) -> bytes:
        frame = self.sock.recv()
        self.read += len(frame)
        return frame

    def hb(self) -> None:
        self.sock.send(pack(envelope("hb", read=self.read)))

    def request(self, kind: str, **fields) -> dict:
        """Send one envelope and wait for its answer (heartbeats in between skipped)."""
        self.n += 1
        msg_id = f"r{self.n}"
        self.sock.send(pack(envelope(kind, id=msg_id, **fields)))
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if not self.sock.poll(1000):
                self.hb()
                continue
            for env in unpack_frame(self.recv(), 8 << 20):
                if env.get("re") == msg_id:
                    self.hb()
                    return env
        raise SystemExit(f"no answer to {kind}")

    def heartbeat_for(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            self.hb()
            if self.sock.poll(500):
                self.recv()


def burst(peer: Peer, ctx: zmq.Context, endpoint: str, count: int, size: int) -> dict:
    big = "x" * size
    kinds = [
        ("call", dict(action="send", to="nobody", message=big)),
        ("call", dict(action="ask", to="nobody", message=big, timeout=5)),
        ("sends", dict(to="nobody", ids=None, messages=[big])),
        ("workflow", dict(op="register_run", runId=big, stages=[])),
        ("respond", dict(content=big)),
        ("call", dict(action="nonsense", message=big)),
        ("nonsense", dict(payload=big)),
        ("hello", dict(name=big)),
    ]
    codes: dict[str, int] = {}
    for n in range(count):
        kind, fields = kinds[n % len(kinds)]
        if kind == "sends":
            fields = dict(fields, ids=[f"s{n}"])
            peer.sock.send(pack(envelope("sends", **fields)))
            answer = _acks(peer)
        elif kind == "hello":
            other = Peer(ctx, endpoint)
            answer = other.request("hello", **fields)
            other.sock.close()
        else:
            answer = peer.request(kind, **fields)
        key = f"{kind}:{answer.get('code') or 'ok'}"
        codes[key] = codes.get(key, 0) + 1
    return codes


def _acks(peer: Peer) -> dict:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if peer.sock.poll(1000):
            for env in unpack_frame(peer.recv(), 8 << 20):
                if env.get("k") in ("result", "acks"):
                    return env
    raise SystemExit("no answer to sends")


def measure(tree: Path, count: int, size: int, idle_s: float) -> dict:
    broker = TmpBroker.start(tree=tree)
    pid = broker.popen.pid
    ctx = zmq.Context()
    try:
        peer = Peer(ctx, broker.endpoint)
        assert peer.request("hello", name="burster").get("ok"), "hello refused"
        peer.heartbeat_for(1.0)
        start = rss_mib(pid)
        began = time.monotonic()
        codes = burst(peer, ctx, broker.endpoint, count, size)
        took = time.monotonic() - began
        after = rss_mib(pid)
        peer.heartbeat_for(idle_s)
        later = rss_mib(pid)
        return {"start": start, "after": after, "later": later, "codes": codes, "took": took}
    finally:
        ctx.destroy(0)
        broker.stop()
        shutil.rmtree(broker.data, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--count", type=int, default=600)
    parser.add_argument("--size", type=int, default=250_000)
    parser.add_argument("--idle-s", type=float, default=10.0)
    parser.add_argument("--tree", type=Path, help="another checkout, measured first")
    args = parser.parse_args()
    trees = ([("before", args.tree)] if args.tree else []) + [("this", ROOT)]
    for label, tree in trees:
        r = measure(tree, args.count, args.size, args.idle_s)
        print(f"{label:>6}: RSS start {r['start']:.0f} MiB, right after {args.count} refused "
              f"{args.size // 1000} KB requests {r['after']:.0f} MiB, after {args.idle_s:g} s "
              f"idle {r['later']:.0f} MiB (+{r['later'] - r['start']:.0f} over start); "
              f"burst took {r['took']:.1f} s")
        print("        answers: " + ", ".join(f"{k} {v}" for k, v in sorted(r["codes"].items())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
