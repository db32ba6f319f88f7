"""Chaos for workflow hosts: several brokers on one database, one killed with SIGKILL
every so often (and restarted on its endpoint at once), while a host keeps running
workflows and sends to them.

The host (a client with every endpoint, failing over along them) runs one small
workflow after another: ``register_run``, ``add_stages``, ``set_stage_state``,
``revoke_stage``, then ``end_run``; another thread of the host keeps sending to the
current run's pending stage (sticky: ``queued``). The killer takes the broker the host is on (the
runs' broker, the case where a host could be locked out) every other time, and
otherwise the next one in turn, and restarts it at once on its data directory.

Prints, per operation, how many were answered ok and refused by code, the longest
stretch of host operations refused in a row (seconds), and the same for the sends.

Usage: python scripts/chaos_hosts.py [--brokers 3] [--seconds 120] [--every 15]
                                     [--restart-after 3.5]
"""

from __future__ import annotations

import argparse
import collections
import shutil
import signal
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from client import Client  # noqa: E402
from tests.conftest import start_broker  # noqa: E402


class Tally:
    """Answers by operation and code, and the longest run of refusals in a row."""

    def __init__(self) -> None:
        self.codes: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
        self.failing_since: float | None = None
        self.longest_s = 0.0
        self.stretches: list[float] = []     # seconds from a refusal to the next ok
        self.lock = threading.Lock()

    def count(self, op: str, answer: dict | None) -> bool:
        code = "no_answer" if answer is None else ("ok" if answer.get("ok") else answer.get("code"))
        now = time.monotonic()
        with self.lock:
            self.codes[op][code] += 1
            if code == "ok":
                if self.failing_since is not None:
                    self.stretches.append(now - self.failing_since)
                    self.longest_s = max(self.longest_s, now - self.failing_since)
                self.failing_since = None
            elif self.failing_since is None:
                self.failing_since = now
        return code == "ok"

    def report(self, title: str) -> None:
        print(f"{title}:")
        for op, codes in sorted(self.codes.items()):
            total = sum(codes.values())
            parts = ", ".join(f"{code} {n}" for code, n in codes.most_common())
            print(f"  {op:16s} {total:6d}  ({parts})")
        open_s = time.monotonic() - self.failing_since if self.failing_since is not None else 0.0
        print(f"  stretches refused in a row: {len(self.stretches)}, longest "
              f"{self.longest_s:.1f} s; refused at the end for {open_s:.1f} s")


def host_loop(host, runs: list, stop: threading.Event, tally: Tally) -> None:
    n = 0
    while not stop.is_set():
        n += 1
        run = f"chaos-{uuid.uuid4().hex[:8]}"
        if not tally.count("register_run", host.register_run(run, [{"name": "plan"}, {"name": "impl"}])):
            continue
        runs.append(run)
        steps = [("add_stages", lambda: host.add_stages(run, [{"name": f"extra{n}"}])),
                 ("set_stage_state", lambda: host.set_stage_state(run, "impl", "RUNNING")),
                 ("revoke_stage", lambda: host.revoke_stage(run, "impl")),
                 ("set_stage_state", lambda: host.set_stage_state(run, "impl", "completed"))]
        for op, do in steps:
            tally.count(op, do())
            stop.wait(0.3)
        # Let the sends reach this run for a while, then end it (until it ends).
        stop.wait(2.0)
        while not stop.is_set():
            answer = host.end_run(run)
            # unknown_run after a try: a resent end_run ended it already.
            if tally.count("end_run", answer) or answer and answer.get("code") == "unknown_run":
                break
            stop.wait(0.3)


def send_loop(sender, runs: list, stop: threading.Event, tally: Tally) -> None:
    while not stop.is_set():
        if runs:
            answer = sender.intercom(action="send", to=f"workflow:{runs[-1]}/plan", message="hi")
            if answer.get("code") not in ("unknown_run", "queue_full"):   # ended / capped: normal
                tally.count("send", answer)
        stop.wait(0.2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--brokers", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=120.0)
    parser.add_argument("--every", type=float, default=15.0, help="seconds between kills")
    parser.add_argument("--restart-after", type=float, default=0.0,
                        help="seconds a killed broker stays down (about 3.5: back on its "
                             "endpoint about when the host fails over)")
    args = parser.parse_args()

    root = Path(tempfile.mkdtemp(prefix="ic-ch-", dir="/tmp"))
    db = root / "bus.db"
    extra = ("--db", str(db), "--broker-lease-s", "3")
    dirs = [root / f"b{i}" for i in range(args.brokers)]
    procs = []
    for data in dirs:
        data.mkdir()
        procs.append(start_broker(data, *extra))
    endpoints = [p.endpoint for p in procs]
    host = Client.connect(name="host", endpoint=endpoints, timeout=15)
    stop = threading.Event()
    host_tally, send_tally = Tally(), Tally()
    runs: list[str] = []
    threads = [threading.Thread(target=host_loop, args=(host, runs, stop, host_tally)),
               threading.Thread(target=send_loop, args=(host, runs, stop, send_tally))]
    for thread in threads:
        thread.start()
    kills = 0
    started = time.monotonic()
    try:
        while time.monotonic() - started < args.seconds:
            stop.wait(args.every)
            if time.monotonic() - started >= args.seconds:
                break
            on = host.intercom(action="status").get("broker", {}).get("id") if kills % 2 == 0 else None
            victim = kills % len(procs)
            if on is not None:    # the broker the host (and its run) is on
                for i, proc in enumerate(procs):
                    if proc.proc.poll() is None and f'"broker_id": "{on}"' in proc.log.read_text(errors="replace"):
                        victim = i
            procs[victim].stop(signal.SIGKILL)
            stop.wait(args.restart_after)
            procs[victim] = start_broker(dirs[victim], *extra)      # back on its endpoint
            kills += 1
            print(f"{time.monotonic() - started:6.1f} s  kill -9 broker {victim} and restart", flush=True)
    finally:
        stop.set()
        for thread in threads:
            thread.join(60)
        host.close()
        for proc in procs:
            proc.stop()
        shutil.rmtree(root, ignore_errors=True)
    print(f"{args.brokers} brokers, {kills} kill -9 in {args.seconds:.0f} s, {len(runs)} runs")
    host_tally.report("host operations")
    send_tally.report("sticky sends to the current run")


if __name__ == "__main__":
    main()
