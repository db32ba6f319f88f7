#!/usr/bin/env python3
"""Broker memory with consumers that stop reading (frozen with SIGSTOP).

    python3 scripts/bench_backlog.py              # 1 and 10 frozen consumers, 2.5 s each
    python3 scripts/bench_backlog.py --seconds 2

For each case a fresh broker starts (ipc sockets in a tmp dir). Consumers connect from
their own processes (tests/integration/peer_process.py) and are frozen with SIGSTOP;
one producer (this process) sends 10 KB messages to them round-robin, pipelined, for
``--seconds`` (kept under the 3 s liveness window, so the broker still holds them),
while the broker's VmRSS is sampled every 20 ms. The baseline of the same run is the
broker with the backlog bound raised out of the way (``--max-backlog-bytes`` 64 GiB):
what it held before the bound existed. Printed: idle RSS, peak RSS per case, messages
answered delivered and refused ``target_backlogged``, and the ratios.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from client import Client  # noqa: E402
from benchkit.procs import proc_stats  # noqa: E402
from benchkit.tmp_broker import TmpBroker  # noqa: E402

TEN_KB = "x" * 10_000
UNBOUNDED = str(64 << 30)


def rss_mib(pid: int) -> float:
    return proc_stats(pid).get("VmRSS", 0.0)


def run_case(consumers: int, seconds: float, *extra: str) -> dict:
    broker = TmpBroker.start(*extra)
    try:
        producer = Client.connect("producer", endpoint=broker.endpoint, timeout=15)
        ids = [broker.peer(f"frozen{n}")[1] for n in range(consumers)]
        idle = rss_mib(broker.popen.pid)
        for peer in broker.peers:
            os.kill(peer.pid, signal.SIGSTOP)
        peak, stop = [idle], threading.Event()

        def sample() -> None:
            while not stop.is_set():
                peak[0] = max(peak[0], rss_mib(broker.popen.pid))
                time.sleep(0.02)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        delivered = refused = other = 0
        end = time.monotonic() + seconds
        n = 0
        while time.monotonic() < end:
            futures = [producer.send_nowait(ids[(n + i) % consumers], TEN_KB) for i in range(64)]
            n += 64
            for future in futures:
                answer = future.result(15)
                if answer.get("ok"):
                    delivered += 1
                elif answer.get("code") == "target_backlogged":
                    refused += 1
                else:
                    other += 1
        stop.set()
        sampler.join()
        producer.close()
        return {"idle": idle, "peak": peak[0], "delivered": delivered, "refused": refused,
                "other": other}
    finally:
        broker.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=2.5)
    args = parser.parse_args()
    rows = []
    for consumers in (1, 10):
        bounded = run_case(consumers, args.seconds)
        baseline = run_case(consumers, args.seconds, "--max-backlog-bytes", UNBOUNDED)
        rows.append((consumers, bounded, baseline))
    print(f"broker VmRSS, MiB; one producer sending 10 KB messages for {args.seconds:g} s "
          "to consumers frozen with SIGSTOP")
    print(f"{'frozen':>6} {'case':<26} {'idle':>7} {'peak':>8} {'delivered':>10} "
          f"{'refused':>8} {'peak-idle':>10}")
    for consumers, bounded, baseline in rows:
        for label, r in (("bound 8 MiB (default)", bounded), ("baseline: no bound", baseline)):
            print(f"{consumers:>6} {label:<26} {r['idle']:>7.1f} {r['peak']:>8.1f} "
                  f"{r['delivered']:>10} {r['refused']:>8} {r['peak'] - r['idle']:>10.1f}")
        grown = max(bounded["peak"] - bounded["idle"], 0.1)
        print(f"{'':>6} growth ratio baseline/bounded: "
              f"{(baseline['peak'] - baseline['idle']) / grown:.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
