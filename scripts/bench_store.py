"""The PostgreSQL store against SQLite on this machine: durable sends, failover, restarts.

Prints, each measured in this run:

``durable``   sticky sends confirmed per second (``queued`` answers, each sent after
              its row is committed) by one broker with one sender process, and by three
              brokers on one database with one sender each; on SQLite (one file, WAL,
              synchronous=FULL) and on PostgreSQL (a throwaway local server, fsync on,
              synchronous_commit as the server has it). Baselines: a raw loop of one
              row per transaction into a table of the same shape: psycopg for
              PostgreSQL, apsw for SQLite. Ratios are broker / its own raw baseline.
``failover``  scripts/failover_times.py's kill -9 of the run's broker, on each store:
              when the host was welcomed on the other broker and when a sticky send
              was answered ``queued`` again, and whether anything answered was lost.
``restart``   a sender sending sticky sends one at a time to one broker on PostgreSQL
              while the server is restarted (``pg_ctl stop -m fast`` then ``start``):
              how long sends were refused ``store_unavailable``, measured from the
              stop and from the moment the server accepted connections again.

With ``--tree DIR`` (another checkout, e.g. ``git worktree add /tmp/before 0be1c11``) the
``durable`` section measures DIR's brokers against this checkout's, interleaved, and
prints median rates and after/before per store and broker count (benchkit.tree_compare).

Usage: python scripts/bench_store.py [--count 3000] [--repeats 1] [--skip failover]
                                     [--tree DIR]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import uuid
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from benchkit.durable_section import measure_durable, measure_raw_apsw  # noqa: E402
from benchkit.procs import Harness  # noqa: E402
from benchkit.role_io import MESSAGE_BYTES  # noqa: E402
from benchkit.tmp_broker import TmpBroker  # noqa: E402
from benchkit.tree_compare import compare_durable  # noqa: E402
from tests.postgres_server import PostgresServer, start_server  # noqa: E402

RAW_TABLE = """
CREATE TABLE raw_sticky (seq BIGINT PRIMARY KEY, run_id TEXT NOT NULL, target TEXT NOT NULL,
    sender_id TEXT NOT NULL, sender_name TEXT NOT NULL, message_id TEXT NOT NULL,
    message TEXT NOT NULL, attachments BYTEA NOT NULL, sent_at DOUBLE PRECISION NOT NULL,
    ack BOOLEAN NOT NULL, position INTEGER, UNIQUE (sender_id, message_id))
"""


def raw_psycopg(server: PostgresServer, rows: int) -> float:
    """Rows per second, one INSERT per transaction (autocommit), as the baseline."""
    import psycopg
    schema = f"raw_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(server.url(), autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
        conn.execute(f"SET search_path = {schema}")
        conn.execute(RAW_TABLE)
        text = "x" * MESSAGE_BYTES
        insert = ("INSERT INTO raw_sticky VALUES (%s, 'run', 'workflow:run/a', 's-1', 'sender', "
                  "%s, %s, '\\x90', %s, false, 1)")
        started = time.perf_counter()
        for n in range(rows):
            conn.execute(insert, (n, f"m{n}", text, time.time()))
        rate = rows / (time.perf_counter() - started)
        conn.execute(f"DROP SCHEMA {schema} CASCADE")
    return rate


def durable(h: Harness, server: PostgresServer, cfg, brokers: int, store: str,
            tree: Path | None = None) -> dict:
    """Sticky sends confirmed per second by ``brokers`` brokers (of ``tree``, default this
    checkout) on one new database."""
    db = server.schema_url() if store == "postgres" else str(h.dir / f"{uuid.uuid4().hex[:8]}.db")
    started = []
    try:
        for _ in range(brokers):
            started.append(h.start_broker(None, "--db", db, tree=tree))
        broker, ep = started[0]
        return measure_durable(h, broker, ep, brokers, cfg,
                               routers=[e.router for _, e in started])
    finally:
        for proc, _ in started:
            h.stop(proc)


def section_durable(server: PostgresServer, args) -> None:
    cfg = SimpleNamespace(durable_count=args.count, durable_warm=args.count // 10,
                          durable_window=1000, run_timeout_s=120.0, raw_rows=args.raw_rows)
    h = Harness()
    try:
        if args.tree is not None:
            compare_durable(args.tree.resolve(), args.repeats,
                            lambda brokers, store, tree: durable(h, server, cfg, brokers, store, tree))
            return
        for rep in range(args.repeats):
            raw_pg = raw_psycopg(server, args.raw_rows)
            raw_lite = measure_raw_apsw(h, cfg, "FULL")["rate"]
            print(f"[{rep + 1}] baselines, one row per transaction: psycopg {raw_pg:>8,.0f} rows/s, "
                  f"apsw (WAL, FULL) {raw_lite:>8,.0f} rows/s", flush=True)
            for brokers in (1, 3):
                rates = {}
                for store, raw in (("sqlite", raw_lite), ("postgres", raw_pg)):
                    r = durable(h, server, cfg, brokers, store)
                    rates[store] = r["rate"]
                    problems = {**r["not_ok"], **({"ok_not_queued": r["ok_not_queued"]}
                                                   if r["ok_not_queued"] else {})}
                    print(f"    {brokers} broker(s), {brokers} sender(s), {store:<8} "
                          f"{r['rate']:>8,.0f} sends/s confirmed  ({r['rate'] / raw:4.1f}x its raw "
                          f"baseline; queued {r['queued']:,}/{r['sent']:,}"
                          + (f"; not queued: {problems}" if problems else "") + ")", flush=True)
                print(f"    {brokers} broker(s): PostgreSQL / SQLite = "
                      f"{rates['postgres'] / rates['sqlite']:.2f}", flush=True)
    finally:
        h.close()


def section_failover(server: PostgresServer, args) -> None:
    from failover_times import one_round
    for rep in range(args.repeats):
        for store in ("sqlite", "postgres"):
            r = one_round(6.0, db=server.schema_url() if store == "postgres" else None)
            print(f"[{rep + 1}] failover on {store:<8}: host welcomed on the other broker after "
                  f"{_s(r['host_moved_s'])}, first sticky send queued again after "
                  f"{_s(r['first_queued_after_s'])}; sticky {r['queued']} queued, "
                  f"{r['queued_lost']} lost, {r['queued_twice']} twice; refusals "
                  f"{r['refusals'] or 'none'}", flush=True)


def restart_round(server: PostgresServer) -> dict:
    from client import Client
    broker = TmpBroker.start("--db", server.schema_url())
    host = None
    try:
        host = Client.connect(name="host", endpoint=broker.endpoint, timeout=15)
        run = f"run-{uuid.uuid4().hex[:8]}"
        stages = [{"name": f"st{k}"} for k in range(40)]
        assert host.register_run(run, stages)["ok"]
        sent = refused = 0

        def send() -> dict:
            nonlocal sent
            sent += 1
            return host.intercom(action="send", to=f"workflow:{run}/st{sent % 40}",
                                 message=f"m{sent}")

        for _ in range(50):                       # warm: the connection is in use
            assert send().get("queued"), "a warm-up send was not queued"
        stopping = time.monotonic()
        server.stop("fast")
        stopped = time.monotonic()
        refused_during = send()
        server.start()
        accepting = time.monotonic()
        while True:
            answer = send()
            if answer.get("queued"):
                back = time.monotonic()
                break
            refused += 1
            if answer.get("code") != "store_unavailable":
                raise RuntimeError(f"unexpected answer while restarting: {answer}")
        return {"stop_s": stopped - stopping, "restart_s": accepting - stopping,
                "refused_while_down": refused_during.get("code"),
                "back_after_stop_s": back - stopping, "back_after_accepting_s": back - accepting,
                "refused_after_accepting": refused}
    finally:
        if host is not None:
            host.close()
        broker.stop()


def section_restart(server: PostgresServer, args) -> None:
    for rep in range(args.repeats):
        r = restart_round(server)
        print(f"[{rep + 1}] PostgreSQL restart under a sender: the server was down "
              f"{r['restart_s']:.2f} s (stop {r['stop_s']:.2f} s); a send meanwhile: "
              f"{r['refused_while_down']}; sends queued again {r['back_after_stop_s']:.2f} s "
              f"after the stop began, {r['back_after_accepting_s'] * 1000:.0f} ms after the "
              f"server accepted connections ({r['refused_after_accepting']} send(s) refused "
              f"in between)", flush=True)


def _s(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f} s"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=3000,
                        help="measured sticky sends per durable run, all senders (default 3000)")
    parser.add_argument("--raw-rows", type=int, default=2000, help="rows per raw baseline loop")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--skip", action="append", default=[],
                        choices=["durable", "failover", "restart"])
    parser.add_argument("--tree", type=Path, metavar="DIR",
                        help="durable section: measure DIR's brokers (another checkout) "
                             "against this checkout's, interleaved")
    args = parser.parse_args()
    print(f"loadavg {os.getloadavg()[0]:.1f}; {os.cpu_count()} cpus; message {MESSAGE_BYTES} bytes",
          flush=True)
    server = start_server()
    try:
        for name, section in (("durable", section_durable), ("failover", section_failover),
                              ("restart", section_restart)):
            if name not in args.skip:
                section(server, args)
    finally:
        server.destroy()


if __name__ == "__main__":
    main()
