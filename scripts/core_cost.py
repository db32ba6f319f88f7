#!/usr/bin/env python3
"""What the sans-IO core alone costs: per ask + reply, and per idle session in memory.

    python3 scripts/core_cost.py                        # asks: us per ask+reply, 5 rounds
    python3 scripts/core_cost.py --profile 20           # + cProfile, top 20 functions
    python3 scripts/core_cost.py --sessions 1000        # + Python bytes per idle session
    python3 scripts/core_cost.py --base /tmp/base       # the same loop on another checkout too

No sockets, no msgpack: the engine (``broker.core.Engine``) is fed decoded envelopes as
the shell would (``receive``), with the shell's ``wrote`` report after each, and the
commands it returns are dropped. ``--asks`` measures an ask from one session to another
and the reply to it in a hot loop (the core's share of what ``ask_cost.py`` measures on
a real broker). ``--sessions N`` connects N sessions and reports the traced Python
memory (tracemalloc) the engine holds per session, by allocation site. ``--base DIR``
runs the asks loop in a child process on DIR's code (alternating with this checkout's),
so both are measured in the same minutes.
"""

from __future__ import annotations

import argparse
import gc
import itertools
import json
import subprocess
import sys
import time
from pathlib import Path
from broker.core.kernel import inputs

ROOT = Path(__file__).resolve().parent.parent


def new_engine():
    from broker.core import Engine, Limits
    from broker.store.memory import MemoryStore

    ids = itertools.count(0xA0000001)
    tokens = itertools.count(1)
    # As ask_cost.py's broker: no backlog refusals (this loop sends no read reports).
    engine = Engine(broker_id="bench", limits=Limits(liveness_s=1e9, max_backlog_bytes=1 << 40),
                    new_id=lambda: f"{next(ids):08x}-0000-4000-8000-{next(ids):012x}",
                    new_token=lambda: f"token-{next(tokens)}")
    engine.set_agents({})
    engine.restore(MemoryStore(clock=lambda: 1000.0).load())
    return engine


def hello(engine, name: str, now: float) -> str:
    from schemas.protocol import envelope

    for cmd in engine.handle(inputs.Frame(name.encode(), [envelope("hello", id="h-" + name, name=name)], now, peer=name)):
        env = getattr(cmd, "env", None)
        if env and env.get("k") == "result" and env.get("re") == "h-" + name:
            return env["sessionId"] if "sessionId" in env else env["session"]["id"]
    raise RuntimeError(f"no welcome for {name}")


def ask_loop(n: int, warm: int, rounds: int, profile: int) -> list[float]:
    """Microseconds per ask + reply, one figure per round."""
    from schemas.protocol import envelope

    engine = new_engine()
    now = 1000.0
    hello(engine, "asker", now)
    responder = hello(engine, "responder", now)
    handle, frame, written = engine.handle, inputs.Frame, inputs.Wrote
    counts = {b"asker": 200, b"responder": 200}
    serial = itertools.count()

    def one() -> None:
        i = next(serial)
        ask_id, reply_id = f"a{i}", f"r{i}"
        handle(frame(b"asker", [envelope("call", id=ask_id, action="ask", to=responder,
                                         message="ping")], now))
        handle(written(counts, now))
        handle(frame(b"responder", [envelope("call", id=reply_id, action="reply",
                                             replyTo=ask_id, message="pong")], now))
        handle(written(counts, now))

    for _ in range(warm):
        one()
    from broker.server import GC_THRESHOLDS       # as the shell runs the engine
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)
    figures = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(n):
            one()
        figures.append((time.perf_counter() - t0) / n * 1e6)
    if profile:
        import cProfile
        import pstats

        prof = cProfile.Profile()
        prof.enable()
        for _ in range(n):
            one()
        prof.disable()
        pstats.Stats(prof).sort_stats("tottime").print_stats(profile)
        pstats.Stats(prof).sort_stats("cumulative").print_stats(profile)
    return figures


def session_memory(n: int, top: int) -> None:
    """Traced Python bytes the engine holds per idle connected session."""
    import tracemalloc

    engine = new_engine()
    for i in range(20):                        # warm: first-use caches are not per session
        hello(engine, f"warm{i}", 1000.0)
    gc.collect()
    tracemalloc.start(1)
    before = tracemalloc.take_snapshot()
    for i in range(n):
        hello(engine, f"s{i}", 1000.0)
        engine.handle(inputs.Wrote({f"s{i}".encode(): 0}, 1000.0))
    gc.collect()
    after = tracemalloc.take_snapshot()
    stats = after.compare_to(before, "lineno")
    total = sum(s.size_diff for s in stats)
    print(f"{n} sessions: {total / n:,.0f} bytes of Python objects per session "
          f"({total / 1024:,.0f} KiB in all)")
    for s in stats[:top]:
        frame = s.traceback[0]
        print(f"  {s.size_diff / n:8,.0f} B/session  {s.count_diff / n:5.1f} blocks  "
              f"{frame.filename.replace(str(ROOT) + '/', '')}:{frame.lineno}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--asks", type=int, default=5000, help="asks per round (0: none)")
    p.add_argument("--warm", type=int, default=1000)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--profile", type=int, default=0, help="print the top N functions")
    p.add_argument("--sessions", type=int, default=0, help="measure memory per idle session")
    p.add_argument("--top", type=int, default=15)
    p.add_argument("--base", type=Path, help="another checkout: run the asks loop there too")
    p.add_argument("--json", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.sessions:
        session_memory(args.sessions, args.top)
    if not args.asks:
        return 0
    if args.json:
        print(json.dumps(ask_loop(args.asks, args.warm, args.rounds, 0)))
        return 0
    trees = ([("base", args.base.resolve())] if args.base else []) + [("this", ROOT)]
    figures: dict[str, list[float]] = {label: [] for label, _ in trees}
    for rep in range(args.rounds if args.base else 1):
        for label, tree in trees:
            if args.base:
                out = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--json",
                                      "--asks", str(args.asks), "--warm", str(args.warm),
                                      "--rounds", "1"], cwd=tree, check=True,
                                     capture_output=True, text=True,
                                     env={"PYTHONPATH": str(tree), "PATH": "/usr/bin:/bin"})
                got = json.loads(out.stdout)
            else:
                got = ask_loop(args.asks, args.warm, args.rounds, args.profile)
            figures[label] += got
            print(f"[{rep + 1}] {label}: " + " ".join(f"{f:.1f}" for f in got) + " us per ask+reply",
                  flush=True)
    best = {label: min(f) for label, f in figures.items()}
    for label, value in best.items():
        print(f"{label}: best {value:.1f} us per ask+reply (median "
              f"{sorted(figures[label])[len(figures[label]) // 2]:.1f})")
    if args.base:
        print(f"this/base: {best['this'] / best['base']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
