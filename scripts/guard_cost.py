#!/usr/bin/env python3
"""What the flood and loop guard costs pipelined sends: one sender, guard off and on.

    python3 scripts/guard_cost.py                      # 3 repeats of 100,000 messages
    python3 scripts/guard_cost.py --count 300000 --repeats 5
    python3 scripts/guard_cost.py --core-only          # the sans-IO core alone

Two figures, each guard off then on, alternating, in the same minutes:

* **end to end**: one broker; the pipelined throughput run of bench.py's
  ``throughput`` section (one sender process pipelining ``send_nowait`` to one
  receiver, which counts ``receive``): the sender without the guard (the default for
  a library client), then the same with ``guard`` on and bounds too high to refuse
  anything (every message is still counted: the pair's window and turns are kept).
  Each run's msg/s and the broker's CPU per message, then the medians and the ratio
  on/off. A refused message would show as ERRORS in its run's line. On a small shared
  host the run-to-run noise is larger than the guard's cost; the second figure is not.
* **core**: the engine alone (no sockets, no msgpack, as scripts/core_cost.py), fed
  ``sends`` envelopes of 1,024 items and single ``send`` calls from one session to
  another: CPU microseconds per message with the sender unguarded and guarded.
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchkit.config import Config  # noqa: E402
from benchkit.live_sections import _log_run, cpu_per_message, measure_bus_throughput  # noqa: E402
from benchkit.procs import Harness  # noqa: E402

# Bounds no benchmark reaches: every send is counted and none is refused.
HIGH = {"perMinute": 10**9, "exchanges": 10**9, "pauseS": 120}


def core_figures(rounds: int) -> None:
    """Microseconds per message in the engine, guard off and on: one engine, an
    unguarded sender and a guarded one to the same receiver, taking turns in small
    chunks (so both see the same caches, collections and neighbours' load)."""
    import gc

    from broker.core import Engine, Limits
    from broker.core.kernel import inputs
    from broker.store.memory import MemoryStore
    from schemas.protocol import envelope

    ids = itertools.count(0xA0000001)
    engine = Engine(broker_id="bench", limits=Limits(liveness_s=1e9, max_backlog_bytes=1 << 40),
                    new_id=lambda: f"{next(ids):08x}-0000-4000-8000-{next(ids):012x}",
                    new_token=lambda: "token")
    engine.set_agents({})
    engine.restore(MemoryStore(clock=lambda: 1000.0).load())
    clock = [1000.0]
    senders = {"off": b"alice", "on": b"carol"}
    for name, fields in (("alice", {}), ("carol", {"guard": HIGH}), ("bob", {})):
        engine.handle(inputs.Frame(name.encode(), [envelope("hello", id=f"h-{name}", name=name,
                                                            **fields)], clock[0], peer=name))
    serial = itertools.count()
    text = "x" * 100
    texts = [text] * 1024

    def piped(who: bytes) -> None:
        batch = [f"p{next(serial)}" for _ in range(1024)]
        engine.handle(inputs.Frame(who, [envelope("sends", to="bob", ids=batch,
                                                  messages=texts)], clock[0]))
        clock[0] += 0.001

    def single(who: bytes) -> None:
        engine.handle(inputs.Frame(who, [envelope("call", id=f"c{next(serial)}", action="send",
                                                  to="bob", message=text)], clock[0]))
        clock[0] += 0.001

    gc.collect()
    gc.freeze()
    print(f"core: the engine alone, {rounds} rounds; each round 10 sends of 1,024 items "
          f"and 1,000 single sends from an unguarded and a guarded sender, in turn "
          f"(process CPU time)", flush=True)
    for what, step, per_round, items in (("pipelined", piped, 10, 1024),
                                         ("single send", single, 1000, 1)):
        spent = {"off": 0.0, "on": 0.0}
        for k in range(rounds):
            for label in (("off", "on") if k % 2 == 0 else ("on", "off")):
                t0 = time.process_time()    # CPU time: a busy neighbour does not count
                for _ in range(per_round):
                    step(senders[label])
                spent[label] += time.process_time() - t0
        n = rounds * per_round * items
        off, on = spent["off"] / n * 1e6, spent["on"] / n * 1e6
        print(f"  {what:<12} guard off {off:7.3f} us/msg, guard on {on:7.3f} us/msg; "
              f"ratio on/off {on / off:.3f}", flush=True)
    views = engine.state.guards.views
    assert set(views) == {engine.registry.by_name["carol"].copy().pop()}, "only carol counts"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=100_000, help="messages per run")
    parser.add_argument("--repeats", type=int, default=3, help="runs each way, alternating")
    parser.add_argument("--window", type=int, default=2000,
                        help="outstanding send_nowait futures (bench.py's default)")
    parser.add_argument("--core-only", action="store_true", help="only the engine figures")
    args = parser.parse_args()
    core_figures(40)
    if args.core_only:
        return 0
    cfg = Config(quick=False, count=args.count, warm=0, senders=[1], window=args.window,
                 blocking_count=0, latency_n=0, latency_warm=0, latency_sessions=0,
                 repeats=args.repeats, run_timeout_s=120.0)
    print(f"guard_cost: one sender, {cfg.count:,} pipelined messages per run, window "
          f"{cfg.window}, {cfg.repeats} repeat(s) each way, alternating", flush=True)
    h = Harness()
    rates: dict[str, list[float]] = {"off": [], "on": []}
    router_us: dict[str, list[float]] = {"off": [], "on": []}
    try:
        broker, ep = h.start_broker()
        for rep in range(cfg.repeats):
            for label, guard in (("off", None), ("on", HIGH)):
                def spawn(role: str, **role_args):
                    if role == "bus_sender" and guard is not None:
                        role_args["guard"] = guard
                    return h.spawn_role(role, **role_args)

                run = measure_bus_throughput(h, broker, ep, 1, cfg, spawn=spawn)
                _log_run(f"[{rep + 1}] guard {label}", run)
                rates[label].append(run.get("e2e_rate", 0.0))
                cpu = cpu_per_message(run)["router"]
                if cpu is not None:
                    router_us[label].append(cpu)
    finally:
        h.close()
    off, on = statistics.median(rates["off"]), statistics.median(rates["on"])
    print(f"median msg/s: guard off {off:,.0f}, guard on {on:,.0f}; "
          f"ratio on/off {on / off:.3f}" if off else "no figures")
    if router_us["off"] and router_us["on"]:
        cpu_off, cpu_on = statistics.median(router_us["off"]), statistics.median(router_us["on"])
        print(f"median broker CPU us/msg: guard off {cpu_off:.2f}, guard on {cpu_on:.2f}; "
              f"ratio on/off {cpu_on / cpu_off:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
