#!/usr/bin/env python3
"""What one ask and one pipelined send cost the broker, this checkout beside another.

    python3 scripts/ask_cost.py --base /tmp/base            # 3 alternating repeats
    python3 scripts/ask_cost.py --base /tmp/base --strace   # + syscalls per ask (strace -c)
    python3 scripts/ask_cost.py --sends 0 --asks 3000       # this checkout only, asks only

``--base DIR`` is another checkout of the project (``git worktree add --detach /tmp/base
main``): each repeat runs the base, then this checkout, each with its own broker process
(``python -m broker`` started in that tree) and that tree's bench roles
(``bus_ask_probe``/``bus_ask_responder``, ``bus_sender``/``bus_receiver``), so both are
measured on the same host in the same minutes. Per run it prints the ask round trip
p50/p99, the broker's CPU per ask (schedstat of all its threads: nanoseconds, not
clock ticks), the asker's and the responder's CPU per ask, and, with ``--sends N``, the
broker's CPU per pipelined message and the send rate (1 sender). ``--strace`` attaches
``strace -c -f`` to the broker for the measured asks only and prints system calls per
ask by name (strace slows the broker: its p50 is not comparable then, its counts are).
The table at the end holds medians and the ratio this/base.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchkit import ROOT  # noqa: E402
from benchkit.procs import Harness, Proc, pdeathsig, proc_run_s, wait_for_bind  # noqa: E402


class TreeHarness(Harness):
    """A Harness whose processes run the code of another checkout ``tree``."""

    def __init__(self, tree: Path) -> None:
        super().__init__()
        self.tree = tree
        self.env["PYTHONPATH"] = str(tree)

    def spawn(self, name: str, argv: list[str], *, pipes: bool = True) -> Proc:
        log = self.dir / f"{self._next(name + '-')}.log"
        with open(log, "wb") as log_file:
            popen = subprocess.Popen(argv, cwd=self.tree, env=self.env, preexec_fn=pdeathsig,
                                     stdin=subprocess.PIPE if pipes else subprocess.DEVNULL,
                                     stdout=subprocess.PIPE if pipes else log_file,
                                     stderr=log_file)
        proc = Proc(name, popen, log)
        self.procs.append(proc)
        return proc

    def spawn_role(self, role: str, **args) -> Proc:
        return self.spawn(role, [sys.executable, str(self.tree / "scripts" / "bench.py"),
                                 "--role", role, "--role-args", json.dumps(args)])

    def broker(self) -> tuple[Proc, str]:
        data = self.dir / self._next("b")
        data.mkdir()
        endpoint = f"ipc://{data}/broker.sock"
        proc = self.spawn("broker", [sys.executable, "-m", "broker", "--data-dir", str(data),
                                     "--endpoint", endpoint, "--pub-endpoint",
                                     f"ipc://{data}/presence.sock", "--log-level", "info",
                                     "--max-backlog-bytes", str(1 << 30)], pipes=False)
        if wait_for_bind(proc, data / "broker.sock", 20, 0.02) != "bound":
            raise RuntimeError(f"broker did not start{proc.tail_note()}")
        return proc, endpoint


def parse_strace(text: str) -> dict[str, int]:
    """Calls by syscall name from ``strace -c`` output."""
    calls: dict[str, int] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 5 and parts[0][0].isdigit() and not line.startswith("100"):
            name = parts[-1]
            if name != "total":
                calls[name] = int(parts[3])
    return calls


def run_asks(h: TreeHarness, broker: Proc, endpoint: str, n: int, warm: int,
             strace: bool) -> dict:
    responder = h.spawn_role("bus_ask_responder", endpoint=endpoint, identity="r")
    probe = tracer = None
    try:
        to = responder.expect("ready", 30)["session_id"]
        probe = h.spawn_role("bus_ask_probe", endpoint=endpoint, to=to, n=n, warm=warm)
        probe.expect("ready", 60)
        out_file = h.dir / f"strace-{broker.pid}.txt"
        if strace:
            tracer = subprocess.Popen(["strace", "-c", "-f", "-o", str(out_file), "-p",
                                       str(broker.pid)], stderr=subprocess.DEVNULL)
            time.sleep(0.5)         # attached (strace gives no signal when it is)
        cpu0 = proc_run_s(broker.pid)
        probe.tell("go")
        result = probe.expect("result", 300)
        cpu1 = proc_run_s(broker.pid)
        if tracer is not None:
            tracer.send_signal(signal.SIGINT)
            tracer.wait(10)
            result["syscalls"] = parse_strace(out_file.read_text())
        result["responder"] = responder.expect("result", 10)
    finally:
        if tracer is not None and tracer.poll() is None:
            tracer.kill()
        h.reap([p for p in (probe, responder) if p is not None], timeout=5)
    trips = n + warm
    result["broker_us"] = (cpu1 - cpu0) / trips * 1e6
    result["asker_us"] = result["cpu_s"] / trips * 1e6
    result["responder_us"] = result["responder"]["cpu_s"] / trips * 1e6
    result["trips"] = trips
    return result


def run_sends(h: TreeHarness, broker: Proc, endpoint: str, count: int) -> dict:
    warm = count // 10
    receiver = h.spawn_role("bus_receiver", endpoint=endpoint, warm=warm, count=count,
                            timeout_s=120)
    sender = None
    try:
        to = receiver.expect("ready", 30)["session_id"]
        sender = h.spawn_role("bus_sender", endpoint=endpoint, to=to, warm=warm, count=count,
                              size=200, mode="pipelined", window=2000)
        sender.expect("ready", 30)
        cpu0 = proc_run_s(broker.pid)
        t0 = time.perf_counter()
        sender.tell("go")
        result = receiver.expect("result", 150)
        cpu1 = proc_run_s(broker.pid)
        sent = sender.expect("result", 60)
    finally:
        h.reap([p for p in (sender, receiver) if p is not None], timeout=10)
    total = warm + count
    return {"broker_us_per_msg": (cpu1 - cpu0) / total * 1e6,
            "rate": result["received"] / (result["t1"] - t0) if result.get("t1") else 0.0,
            "sender_us_per_msg": sent["cpu_s"] / total * 1e6, "errors": sent["errors"]}


def one_run(tree: Path, args) -> dict:
    h = TreeHarness(tree)
    try:
        broker, endpoint = h.broker()
        out: dict = {}
        if args.asks:
            out.update(run_asks(h, broker, endpoint, args.asks, args.warm, args.strace))
        if args.sends:
            out["send"] = run_sends(h, broker, endpoint, args.sends)
        return out
    finally:
        h.close()


def line(label: str, r: dict) -> str:
    parts = [f"{label:<5}"]
    if "p50_us" in r:
        parts.append(f"ask p50 {r['p50_us']:6.0f} p99 {r['p99_us']:6.0f} us; CPU us/ask broker "
                     f"{r['broker_us']:5.0f} asker {r['asker_us']:5.0f} responder "
                     f"{r['responder_us']:5.0f}")
        if "syscalls" in r:
            parts.append(f"syscalls/ask {sum(r['syscalls'].values()) / r['trips']:.1f}")
    if "send" in r:
        s = r["send"]
        parts.append(f"send {s['rate']:,.0f}/s broker {s['broker_us_per_msg']:.2f} us/msg "
                     f"sender {s['sender_us_per_msg']:.2f}" + (f" ERR {s['errors']}" if s["errors"] else ""))
    return "  ".join(parts)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--base", type=Path, help="another checkout to measure beside this one")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--asks", type=int, default=2000)
    p.add_argument("--warm", type=int, default=200)
    p.add_argument("--sends", type=int, default=100_000, help="pipelined sends per run (0: none)")
    p.add_argument("--strace", action="store_true", help="count the broker's system calls per ask")
    args = p.parse_args()
    trees = [("base", args.base.resolve())] if args.base else []
    trees.append(("this", ROOT))
    runs: dict[str, list[dict]] = {label: [] for label, _ in trees}
    print(f"load average {os.getloadavg()[0]:.2f}", flush=True)
    for rep in range(args.repeats):
        for label, tree in trees:
            r = one_run(tree, args)
            runs[label].append(r)
            print(f"[{rep + 1}] {line(label, r)}", flush=True)
    print("\nmedians:")
    keys = [("ask p50 us", lambda r: r.get("p50_us")),
            ("broker CPU us/ask", lambda r: r.get("broker_us")),
            ("asker+responder CPU us/ask", lambda r: r.get("asker_us", 0) + r.get("responder_us", 0)
             if "asker_us" in r else None),
            ("broker syscalls/ask", lambda r: sum(r["syscalls"].values()) / r["trips"]
             if "syscalls" in r else None),
            ("send msg/s (1 sender)", lambda r: r["send"]["rate"] if "send" in r else None),
            ("broker CPU us/send", lambda r: r["send"]["broker_us_per_msg"] if "send" in r else None),
            ("sender CPU us/send", lambda r: r["send"]["sender_us_per_msg"] if "send" in r else None)]
    for name, get in keys:
        values = {label: [get(r) for r in rs if get(r) is not None] for label, rs in runs.items()}
        meds = {label: statistics.median(v) for label, v in values.items() if v}
        if not meds:
            continue
        text = "  ".join(f"{label} {m:10,.1f}" for label, m in meds.items())
        ratio = (f"  this/base {meds['this'] / meds['base']:.2f}"
                 if "base" in meds and "this" in meds and meds["base"] else "")
        print(f"  {name:<28} {text}{ratio}")
    if args.strace:
        for label, rs in runs.items():
            calls: dict[str, float] = {}
            for r in rs:
                for name, k in r.get("syscalls", {}).items():
                    calls[name] = calls.get(name, 0) + k / r["trips"] / len(rs)
            top = sorted(calls.items(), key=lambda kv: -kv[1])[:12]
            print(f"  {label} syscalls/ask: " + ", ".join(f"{n} {k:.1f}" for n, k in top))
    return 0


if __name__ == "__main__":
    sys.exit(main())
