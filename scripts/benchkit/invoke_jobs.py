"""bench.py, beside the durable sticky figure: invoke jobs committed per second.

One caller conversation pipelines ``invoke`` requests (a window of outstanding ones)
to offline persistent conversations of the same agent, so every job stays queued and
each ``queued`` answer is one committed row (the broker answers only after the
commit). Destinations are spread so none reaches the per-destination bound. Spoken
in raw envelopes on a DEALER, in this process: the figure is the broker's.
"""

from __future__ import annotations

import itertools
import os
import signal
import time
from pathlib import Path

import msgpack
import zmq

from schemas.limits import MAX_QUEUED_INVOCATIONS
from schemas.protocol import envelope

AGENT = "bench"


class _Raw:
    def __init__(self, endpoint: str) -> None:
        self.sock = zmq.Context.instance().socket(zmq.DEALER)
        self.sock.linger = 0
        self.sock.connect(endpoint)
        self.ids = itertools.count(1)
        self.pack = msgpack.Packer(use_bin_type=True).pack

    def send(self, kind: str, **fields) -> str:
        msg_id = f"b{next(self.ids)}"
        self.sock.send(self.pack(envelope(kind, id=msg_id, **fields)))
        return msg_id

    def results(self, timeout_s: float) -> list[dict]:
        if not self.sock.poll(timeout_s * 1000):
            raise TimeoutError("the broker did not answer")
        value = msgpack.unpackb(self.sock.recv(), raw=False)
        return [e for e in (value if isinstance(value, list) else [value]) if e.get("k") == "result"]

    def request(self, kind: str, **fields) -> dict:
        msg_id = self.send(kind, **fields)
        while True:
            for env in self.results(15):
                if env.get("re") == msg_id:
                    return env

    def close(self) -> None:
        self.sock.close()


def enable_invoke(data_dir: Path, broker_pid: int) -> None:
    config = data_dir / "agents" / AGENT / "config"
    config.mkdir(parents=True, exist_ok=True)
    (config / "tools.toml").write_text("invoke = true\n")
    os.kill(broker_pid, signal.SIGHUP)


def measure_invoke(endpoint: str, count: int, window: int, tag: str) -> dict:
    """``count`` invokes with ``window`` outstanding; committed jobs per second."""
    n_dest = -(-count // (MAX_QUEUED_INVOCATIONS - 1))
    for k in range(n_dest):
        dest = _Raw(endpoint)
        assert dest.request("hello", name=f"d{k}", agent=AGENT, channel=f"discord:{tag}-{k}")["ok"]
        dest.request("bye")
        dest.close()
    caller = _Raw(endpoint)
    try:
        assert caller.request("hello", name="caller", agent=AGENT, channel=f"discord:{tag}-caller")["ok"]
        deadline = time.monotonic() + 15
        while caller.request("invoke", session=f"discord:{tag}-0", reason="warm")["ok"] is not True:
            if time.monotonic() > deadline:   # the SIGHUP is read at the broker's next round
                raise RuntimeError("invoke stayed disabled after SIGHUP")
        sent = queued = 0
        not_ok: dict[str, int] = {}
        t0 = time.perf_counter()
        while queued + sum(not_ok.values()) < count:
            while sent < count and sent - queued - sum(not_ok.values()) < window:
                caller.send("invoke", session=f"discord:{tag}-{sent % n_dest}", reason=f"job {sent}")
                sent += 1
            for env in caller.results(30):
                if env.get("ok") and env.get("queued"):
                    queued += 1
                else:
                    not_ok[env.get("code", "?")] = not_ok.get(env.get("code", "?"), 0) + 1
        elapsed = time.perf_counter() - t0
    finally:
        caller.close()
    return {"queued": queued, "not_ok": not_ok, "elapsed_s": elapsed,
            "rate": queued / elapsed if elapsed > 0 else 0.0}
