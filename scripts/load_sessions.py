#!/usr/bin/env python3
"""Load run: how one broker holds up with many sessions connected at once.

    python3 scripts/load_sessions.py                      # 1000 sessions in 4 worker processes
    python3 scripts/load_sessions.py --quick              # 200 sessions
    python3 scripts/load_sessions.py --sessions 2000 --workers 8

What it does, in order (every step bounded by a timeout; the script stops by itself):

1. Starts its own ``python -m broker`` in a fresh short directory under /tmp, on ipc
   sockets only (``--endpoint ipc://D/broker.sock --pub-endpoint ipc://D/presence.sock``),
   with HOME pointed at that directory so no user config is read.
2. Connects a *watcher* session (records every in-band presence event with its
   arrival time) and a *probe* session (makes the measured calls), both in the
   default group.
3. Starts P worker processes (this file with ``--role worker``); once all are up it
   tells them to go, and each opens its share of the N sessions with
   ``Client.connect(name=f"w{p}-s{i}", endpoint=...)`` in the default group, one
   after another. Reported: total connect time (go -> last worker done), connects/s,
   per-connect latency, and how long until the watcher had every ``session_joined``;
   the broker's RSS per session, just connected and again after ``--idle-s`` idle.
4. With all N connected: p50/p99 of ``intercom(action="list")`` and of
   ``intercom(action="status")`` from the probe (``--calls`` each, after a warm-up).
5. Fan-out: the probe sends one message to each of 100 random worker sessions by
   full id; the workers (which drain every session's inbox and events continuously)
   report per-session counts until every recipient has exactly one.
6. Presence: the last worker process is SIGKILLed; the watcher must get one
   ``session_left`` per session of that worker, within liveness (3 s) + sweep +
   margin. Time to the first and the last one is reported.
7. Broker VmRSS (and peak VmHWM, fds, threads, CPU) from /proc at each phase.
8. Closes everything: the workers close their sessions and exit 0, the watcher must
   see every worker session leave, then the broker gets SIGTERM by PID and must
   exit 0. Its log is scanned for warnings, errors and the final statistics line.

Every process is started and stopped by PID inside try/finally (SIGTERM, then
SIGKILL); children also get PR_SET_PDEATHSIG and workers a lifetime watchdog, so none
outlives the run. Exit status: 0 when every check passed, 1 otherwise.

Layout: this file parses the command line and runs the phases in order; the pieces
live in ``scripts/benchkit/`` (``load_run``, ``load_phases``, ``load_worker``,
``load_observers``, and the shared ``procs`` and ``report``).
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import sys
import traceback
from pathlib import Path
from typing import Any

SCRIPTS_DIR = Path(__file__).resolve().parent
ROOT = SCRIPTS_DIR.parent
for _path in (ROOT, SCRIPTS_DIR):          # benchkit, and the project's packages
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from benchkit.load_phases import (  # noqa: E402
    phase_close,
    phase_connect,
    phase_fanout,
    phase_latency,
    phase_presence,
)
from benchkit.load_run import LoadError, Run, log  # noqa: E402
from benchkit.load_worker import worker_main  # noqa: E402

PHASES = (phase_connect, phase_latency, phase_fanout, phase_presence, phase_close)


def run_phases(run: Run) -> None:
    """Broker, watcher and probe first, then every phase in order (steps 1-8 above)."""
    run.setup()
    for phase in PHASES:
        phase(run)


def parent_main(args: argparse.Namespace) -> int:
    if args.quick:
        args.sessions = 200
    run = Run(args)

    def on_alarm(*_: Any) -> None:
        raise LoadError(f"whole run exceeded --max-seconds {args.max_seconds:g}")

    signal.signal(signal.SIGALRM, on_alarm)
    def on_term(*_: Any) -> None:
        raise KeyboardInterrupt("SIGTERM")

    signal.signal(signal.SIGTERM, on_term)
    signal.alarm(int(args.max_seconds))
    try:
        run_phases(run)
        signal.alarm(0)
        run.stop_broker()
    except (KeyboardInterrupt, Exception) as exc:   # report every failure, then clean up
        run.problem(f"run aborted: {type(exc).__name__}: {exc}")
        if not isinstance(exc, (LoadError, KeyboardInterrupt)):
            traceback.print_exc()
    finally:
        signal.alarm(0)
        try:
            run.cleanup()
        finally:
            run.scan_broker_log()
            if run.dir is not None:
                if args.keep or (run.problems and not args.no_keep_on_failure):
                    log(f"kept {run.dir} (broker.log, worker*.log)")
                else:
                    shutil.rmtree(run.dir, ignore_errors=True)
    run.print_table()
    return 1 if run.problems else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=1000, help="sessions in total (default 1000)")
    parser.add_argument("--workers", type=int, default=4, help="worker processes (default 4)")
    parser.add_argument("--quick", action="store_true", help="200 sessions")
    parser.add_argument("--calls", type=int, default=300, help="measured list/status calls each")
    parser.add_argument("--fanout", type=int, default=100, help="fan-out recipients")
    parser.add_argument("--idle-s", type=float, default=10.0,
                        help="seconds idle after connecting before RSS is read again (default 10)")
    parser.add_argument("--seed", type=int, default=None, help="seed for the fan-out sample")
    parser.add_argument("--max-seconds", type=float, default=900.0,
                        help="abort the whole run after this long (default 900)")
    parser.add_argument("--keep", action="store_true", help="keep the tmp dir and logs")
    parser.add_argument("--no-keep-on-failure", action="store_true",
                        help="remove the tmp dir even when a check failed")
    parser.add_argument("--role", help=argparse.SUPPRESS)
    parser.add_argument("--role-args", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.role == "worker":
        return worker_main(json.loads(args.role_args))
    if args.role:
        parser.error(f"unknown role {args.role}")
    if args.sessions < 2 or args.workers < 1:
        parser.error("--sessions must be >= 2 and --workers >= 1")
    return parent_main(args)


if __name__ == "__main__":
    sys.exit(main())
