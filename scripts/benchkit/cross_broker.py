"""bench.py section ``cross_broker``: two brokers on one database, against one broker.

Two ``python -m broker`` processes share one SQLite file (``--db``). In each repeat,
interleaved: pipelined ``send_nowait`` throughput (one sender process) and the
ask/reply round trip, first with both sessions on broker A (the baseline), then with
the receiver (responder) on broker B and the sender (asker) on A, so every message
crosses the link A -> B (forwarded, handled on B) and every answer comes back
(relayed B -> A). The ratio says what the second broker costs.
"""

from __future__ import annotations

import time

from benchkit.config import Config
from benchkit.live_sections import _log_run, measure_ask, measure_bus_throughput
from benchkit.procs import Harness, RoleError
from benchkit.report import Results, Row


def _wait_mirrored(endpoint: str, session_id: str, timeout: float = 20.0) -> None:
    """Until a session on ``endpoint``'s broker lists ``session_id`` (held by the other)."""
    from client import Client   # noqa: PLC0415  (the parent's own client, for one wait)
    with Client.connect(name="bench-watch", endpoint=endpoint, timeout=15) as watch:
        deadline = time.monotonic() + timeout
        while not any(row["id"] == session_id for row in watch.intercom(action="list")["sessions"]):
            if time.monotonic() > deadline:
                raise RoleError(f"session {session_id} never showed on {endpoint}")
            time.sleep(0.05)


def section_cross_broker(h: Harness, cfg: Config, results: Results) -> None:
    print(f"cross_broker: one sender, {cfg.count:,} messages; {cfg.ask_n:,} asks; "
          f"{cfg.repeats} repeat(s); sessions on one broker vs on two sharing one database",
          flush=True)
    db = h.dir / "shared.db"
    a, ep_a = h.start_broker(None, "--db", str(db))
    b, ep_b = h.start_broker(None, "--db", str(db))
    same_send, cross_send, same_ask, cross_ask = [], [], [], []
    wait_a = lambda session_id: _wait_mirrored(ep_a.router, session_id)  # noqa: E731
    try:
        for rep in range(cfg.repeats):
            run = measure_bus_throughput(h, a, ep_a, 1, cfg)
            _log_run(f"[{rep + 1}] one broker", run)
            same_send.append(run.get("e2e_rate", 0.0))
            run = measure_bus_throughput(h, a, ep_b, 1, cfg, sender_endpoint=ep_a.router,
                                         before_senders=wait_a)
            _log_run(f"[{rep + 1}] sender on A, receiver on B", run)
            cross_send.append(run.get("e2e_rate", 0.0))
            one = measure_ask(h, a, "bus_ask_responder", "bus_ask_probe", cfg,
                              endpoint=ep_a.router)
            two = measure_ask(h, a, "bus_ask_responder", "bus_ask_probe", cfg,
                              endpoint=ep_b.router, probe_endpoint=ep_a.router,
                              before_probe=wait_a)
            print(f"  [{rep + 1}] ask p50 one broker {one['p50_us']:6.0f} us, "
                  f"A->B {two['p50_us']:6.0f} us (p99 {one['p99_us']:.0f} / {two['p99_us']:.0f})",
                  flush=True)
            same_ask.append(one["p50_us"])
            cross_ask.append(two["p50_us"])
    finally:
        h.stop(a, timeout=30)
        h.stop(b, timeout=30)
    results.add(Row("cross_broker", "send across two brokers, 1 sender", "msg/s", cross_send,
                    same_send, base_label="the same with both sessions on one broker"))
    results.add(Row("cross_broker", "ask/reply across two brokers p50", "us", cross_ask,
                    same_ask, base_label="the same with both sessions on one broker; "
                    "ratio = how many times slower"))
