#!/usr/bin/env python3
"""The Node client beside the Python client, through one broker, with the raw pyzmq
relay of ``scripts/bench.py`` as the baseline of both, measured in the same run.

    python3 scripts/bench_node.py            # 3 repeats (about 2 minutes)
    python3 scripts/bench_node.py --quick    # 2 short repeats

Rows: pipelined send throughput at one receiver (one sender; Python's
``send_nowait`` and Node's ``sendNowait``, each with its own client as the receiver;
baseline: the raw ROUTER forwarder with a DEALER sender and receiver), and the ask/reply
round trip p50 and p99 (asker and responder both of one client; baseline: DEALER A ->
ROUTER -> DEALER B -> ROUTER -> DEALER A). Each row's ratio is against the raw relay;
the ``node/python`` rows put the two clients side by side. Runs are interleaved (raw,
Python, Node, raw, ...) so a noisy neighbour hits all three alike. The Node roles are
``scripts/benchkit/node_roles.mjs`` (clients/node must have its dependencies: ``cd
clients/node && npm ci``).
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
from pathlib import Path

SCRIPTS_DIR = Path(__file__).resolve().parent
for _path in (SCRIPTS_DIR.parent, SCRIPTS_DIR):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from bench import parse_args as bench_args  # noqa: E402
from benchkit.config import make_config  # noqa: E402
from benchkit.live_sections import (measure_ask, measure_bus_throughput,  # noqa: E402
                                    measure_raw_throughput)
from benchkit.procs import Harness  # noqa: E402
from benchkit.report import Results, Row, print_table  # noqa: E402

NODE_ROLES = SCRIPTS_DIR / "benchkit" / "node_roles.mjs"


def node_spawner(h: Harness):
    """``spawn(role, **args)`` for benchkit's measure functions: the Node client's roles
    under the names of the Python client's."""
    names = {"bus_receiver": "receiver", "bus_sender": "sender",
             "bus_ask_responder": "ask_responder", "bus_ask_probe": "ask_probe"}
    return lambda role, **args: h.spawn(f"node-{role}", ["node", str(NODE_ROLES), names[role],
                                                         json.dumps(args)])


def rate(run: dict) -> float:
    return run.get("e2e_rate", run["rate"])


def run(cfg, results: Results) -> None:
    h = Harness()
    runs: dict[str, list[dict]] = {}
    try:
        fwd, raw_ep = h.start_forwarder()
        broker, bus_ep = h.start_broker()
        for rep in range(cfg.repeats):
            for name, measure in (
                    ("raw", lambda: measure_raw_throughput(h, fwd, raw_ep, 1, cfg)),
                    ("python", lambda: measure_bus_throughput(h, broker, bus_ep, 1, cfg)),
                    ("node", lambda: measure_bus_throughput(h, broker, bus_ep, 1, cfg,
                                                            spawn=node_spawner(h)))):
                result = measure()
                runs.setdefault(f"send-{name}", []).append(result)
                print(f"  [{rep + 1}] send, {name:6}  {rate(result):9,.0f} msg/s "
                      f"(received {result.get('received')})", flush=True)
            for name, measure in (
                    ("raw", lambda: measure_ask(h, fwd, "raw_ask_responder", "raw_ask_probe", cfg,
                                                endpoint=raw_ep.router)),
                    ("python", lambda: measure_ask(h, broker, "bus_ask_responder", "bus_ask_probe",
                                                   cfg, endpoint=bus_ep.router)),
                    ("node", lambda: measure_ask(h, broker, "bus_ask_responder", "bus_ask_probe",
                                                 cfg, endpoint=bus_ep.router,
                                                 spawn=node_spawner(h)))):
                result = measure()
                runs.setdefault(f"ask-{name}", []).append(result)
                print(f"  [{rep + 1}] ask,  {name:6}  p50 {result['p50_us']:6.0f} us  "
                      f"p99 {result['p99_us']:6.0f} us", flush=True)
    finally:
        h.close()
    results.extra["node"] = runs
    sends = {name: [rate(r) for r in runs[f"send-{name}"]] for name in ("raw", "python", "node")}
    for name in ("python", "node"):
        results.add(Row("send", f"{name} client, pipelined send, 1 sender", "msg/s", sends[name],
                        sends["raw"], base_label="raw ROUTER forwarder, 1 DEALER sender"))
    results.add(Row("send", "node/python pipelined send", "msg/s", sends["node"], sends["python"],
                    base_label="the Python client (ratio: Node / Python)"))
    for q in ("p50", "p99"):
        asks = {name: [r[f"{q}_us"] for r in runs[f"ask-{name}"]] for name in ("raw", "python", "node")}
        for name in ("python", "node"):
            results.add(Row("ask", f"{name} client, ask/reply {q}", "us", asks[name], asks["raw"],
                            base_label="raw DEALER A->ROUTER->B->ROUTER->A" if q == "p50" else ""))
        results.add(Row("ask", f"node/python ask/reply {q}", "us", asks["node"], asks["python"],
                        base_label="the Python client (ratio: Node / Python)" if q == "p50" else ""))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--repeats", type=int, default=None)
    p.add_argument("--count", type=int, default=None, help="measured messages per send run")
    args = p.parse_args(argv)
    forwarded = (["--quick"] if args.quick else []) + ["--senders", "1"]
    forwarded += ["--repeats", str(args.repeats or (2 if args.quick else 3))]
    forwarded += ["--count", str(args.count or (20_000 if args.quick else 100_000))]
    cfg = make_config(bench_args(forwarded))
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    print(f"Node client vs Python client: {cfg.count:,} sends per run, window {cfg.window}; "
          f"{cfg.ask_n:,} asks per run; {cfg.repeats} repeat(s)", flush=True)
    results = Results()
    run(cfg, results)
    print()
    print_table(results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
