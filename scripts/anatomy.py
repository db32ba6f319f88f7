#!/usr/bin/env python3
"""The anatomy of one ask and of one pipelined send: what each side does per operation.

    python3 scripts/anatomy.py                     # 2,000 asks, 50,000 sends
    python3 scripts/anatomy.py --asks 500 --sends 0
    python3 scripts/anatomy.py --profile /tmp/anat  # cProfile per thread group too

Everything runs in this one process so every piece can be counted: a broker
(``broker.server.Broker``) on its own thread, an asker and a responder session (or a
sender and a receiver) with their client threads. Per operation it prints:

* frames and envelopes (by kind) the broker read and wrote, and those each client
  read and wrote;
* msgpack encodes (``packb`` calls: one per envelope a frame carries) and frame
  decodes (``unpack_frame`` calls: one per frame) on each side;
* engine inputs (frames handled) and commands by type;
* CPU microseconds per operation of each thread group, from /proc (the broker's
  Python loop, the broker's libzmq IO thread, the clients' Python threads and
  their libzmq IO thread, the persistence worker).

System calls of a real broker process per ask: run ``bench.py --only ask`` and
attach ``strace -c -f -p <broker pid>`` for the measured part (the broker's pid is
in its log line ``broker_started``); divide each count by the round trips.

Sharing one interpreter makes the threads take turns on the GIL, so its latencies
and CPU split are not the broker's in production (bench.py measures those, in
separate processes); its counts are exact. ``--profile DIR`` writes cProfile stats of
the broker loop thread and of the client threads into DIR and prints the top
functions of each.
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import schemas.protocol as wire  # noqa: E402


class Counts:
    """Counters by name, safe enough under the GIL for counting."""

    def __init__(self) -> None:
        self.c: collections.Counter[str] = collections.Counter()

    def add(self, key: str, n: int = 1) -> None:
        self.c[key] += n


COUNTS = Counts()


def _counting_packer(side: str, packb):
    def packer(value):
        COUNTS.add(f"{side}.msgpack_encodes")
        if value.__class__ is dict:
            COUNTS.add(f"{side}.out.{value.get('k')}")
        return packb(value)
    return packer


def _counting_unpack(side: str, unpack):
    def unpack_frame(frame, *args, **kwargs):
        envs = unpack(frame, *args, **kwargs)
        COUNTS.add(f"{side}.frames_in")
        COUNTS.add(f"{side}.msgpack_decodes")
        for env in envs:
            if env.__class__ is dict:
                COUNTS.add(f"{side}.in.{env.get('k')}")
        return envs
    return unpack_frame


def instrument() -> None:
    """Wrap the encoders, decoders and the engine entry before anything binds them."""
    import broker.server as server
    import client.protocol as protocol
    from broker.core.assembly import engine as engine_mod
    from broker.core.kernel import inputs as inputs_mod

    server.unpack_frame = _counting_unpack("broker", wire.unpack_frame)
    protocol.unpack_frame = _counting_unpack("client", wire.unpack_frame)
    protocol.new_packer = lambda: _counting_packer("client", wire.new_packer())
    frames_to_send = protocol.ClientProtocol.frames_to_send

    def counted_frames(self, now):
        frames = frames_to_send(self, now)
        COUNTS.add("client.frames_out", len(frames))
        return frames
    protocol.ClientProtocol.frames_to_send = counted_frames
    on_frame = engine_mod.Engine._on_frame

    def counted_frame(self, frame):
        COUNTS.add("broker.engine_inputs")
        out = on_frame(self, frame)
        for command in out:
            COUNTS.add(f"broker.command.{type(command).__name__}")
        return out
    engine_mod._INPUTS[inputs_mod.Frame] = counted_frame


# -- threads and their CPU --------------------------------------------------------------

def thread_cpu() -> dict[int, tuple[str, float]]:
    """tid -> (name, CPU seconds) of this process's threads, from /proc."""
    out = {}
    tick = os.sysconf("SC_CLK_TCK")
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            with open(f"/proc/self/task/{tid}/comm") as f:
                name = f.read().strip()
            with open(f"/proc/self/task/{tid}/schedstat") as f:
                run_ns = int(f.read().split()[0])
        except OSError:
            continue
        out[int(tid)] = (name, run_ns / 1e9 if run_ns else
                         (int(fields[11]) + int(fields[12])) / tick)
    return out


class Groups:
    """Which thread ids belong to whom (the broker, the clients), by when they appeared."""

    def __init__(self) -> None:
        self.by_tid: dict[int, str] = {}

    def claim(self, group: str, before: set[int]) -> None:
        for tid in set(thread_cpu()) - before - set(self.by_tid):
            self.by_tid[tid] = group

    def split(self, cpu0: dict, cpu1: dict) -> dict[str, float]:
        out: dict[str, float] = collections.defaultdict(float)
        for tid, (name, seconds) in cpu1.items():
            group = self.by_tid.get(tid, "this script")
            kind = "libzmq IO" if name.startswith("ZMQbg") else "python"
            out[f"{group} ({kind})"] += seconds - cpu0.get(tid, (name, 0.0))[1]
        return dict(out)


# -- the runs ------------------------------------------------------------------------

def start_broker(tmp: Path, groups: Groups):
    from broker.server import Broker, BrokerSettings

    before = set(thread_cpu())
    settings = BrokerSettings(endpoint=f"ipc://{tmp}/broker.sock",
                              pub_endpoint=f"ipc://{tmp}/pub.sock", db_path=tmp / "intercom.db")
    broker = Broker(settings)
    broker._packb = _counting_packer("broker", broker._packb)
    thread = threading.Thread(target=broker.serve_forever, name="broker-loop", daemon=True)
    thread.start()
    groups.claim("broker", before)
    return broker, thread


def connect(name: str, endpoint: str, groups: Groups, group: str):
    from client import Client

    before = set(thread_cpu())
    session = Client.connect(name=name, endpoint=endpoint, timeout=20)
    groups.claim(group, before)
    return session


def measure(label: str, n: int, run, groups: Groups, broker) -> None:
    COUNTS.c.clear()
    frames0 = (broker.frames_in, broker.frames_out)
    cpu0 = thread_cpu()
    t0 = time.perf_counter()
    run()
    elapsed = time.perf_counter() - t0
    cpu1 = thread_cpu()
    counts = dict(COUNTS.c)
    counts["broker.frames_in"] = broker.frames_in - frames0[0]
    counts["broker.frames_out"] = broker.frames_out - frames0[1]
    print(f"\n{label}: {n:,} in {elapsed:.2f} s ({n / elapsed:,.0f}/s), per operation:")
    for key in sorted(counts):
        print(f"  {key:<40} {counts[key] / n:10.4f}")
    print("  CPU us per operation (threads of this one process):")
    for group, seconds in sorted(groups.split(cpu0, cpu1).items()):
        print(f"    {group:<38} {seconds / n * 1e6:8.1f}")


def run_asks(n: int, endpoint: str, groups: Groups, broker) -> None:
    responder = connect("anatomy-responder", endpoint, groups, "clients")
    asker = connect("anatomy-asker", endpoint, groups, "clients")
    stop = threading.Event()

    def respond() -> None:
        while not stop.is_set():
            msg = responder.receive(0.2)
            if msg is not None and msg.get("expectsReply"):
                responder.intercom(action="reply", replyTo=msg["id"], message="pong")

    before = set(thread_cpu())
    thread = threading.Thread(target=respond, name="responder")
    thread.start()
    groups.claim("clients", before)
    for _ in range(50):                        # warm up
        asker.intercom(action="ask", to=responder.id, message="ping")

    def asks() -> None:
        for _ in range(n):
            result = asker.intercom(action="ask", to=responder.id, message="ping")
            assert result.get("ok"), result
    try:
        measure("ask (asker intercom ask -> responder receive + reply)", n, asks, groups, broker)
    finally:
        stop.set()
        thread.join(5)
        asker.close(), responder.close()


def run_sends(n: int, endpoint: str, groups: Groups, broker, window: int = 2000) -> None:
    receiver = connect("anatomy-receiver", endpoint, groups, "clients")
    sender = connect("anatomy-sender", endpoint, groups, "clients")
    text = "x" * 200

    def sends() -> None:
        pending: collections.deque = collections.deque()
        got = 0
        for _ in range(n):
            if len(pending) >= window:
                assert pending.popleft().result(30)["ok"]
            pending.append(sender.send_nowait(receiver.id, text))
            while receiver.receive(0) is not None:
                got += 1
        while pending:
            assert pending.popleft().result(30)["ok"]
        while got < n:
            assert receiver.receive(10) is not None
            got += 1
    try:
        measure("pipelined send (send_nowait -> receive), 200 characters", n, sends, groups, broker)
    finally:
        sender.close(), receiver.close()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--asks", type=int, default=2000)
    p.add_argument("--sends", type=int, default=50_000)
    p.add_argument("--profile", type=Path, metavar="DIR",
                   help="cProfile every thread; stats per thread group into DIR")
    args = p.parse_args()
    instrument()
    profiles = None
    if args.profile:
        sys.path.insert(0, str(ROOT / "scripts"))
        from benchkit.profiling import ThreadProfiles

        args.profile.mkdir(parents=True, exist_ok=True)
        profiles = ThreadProfiles()
    tmp = Path(tempfile.mkdtemp(prefix="anat-", dir="/tmp"))
    groups = Groups()
    broker, thread = start_broker(tmp, groups)
    endpoint = broker.settings.endpoint
    try:
        if args.asks:
            run_asks(args.asks, endpoint, groups, broker)
        if args.sends:
            run_sends(args.sends, endpoint, groups, broker)
    finally:
        broker.stop()
        thread.join(10)
        broker.close()
        if profiles is not None:
            out = args.profile / "anatomy.prof"
            profiles.dump(out)
            import pstats
            print(f"\ncProfile, all threads ({out}), top by internal time:")
            pstats.Stats(str(out)).sort_stats("tottime").print_stats(25)
        import shutil
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
