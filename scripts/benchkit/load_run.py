"""load_sessions.py run state: its broker, worker processes, sessions, rows and problems.

:class:`Run` starts the broker in a fresh short /tmp directory (ipc sockets only, HOME
pointed there so no user config is read), connects the watcher and probe sessions,
starts worker processes (``load_sessions.py --role worker``), and at the end stops
the broker by PID, scans its log and prints the table. The measured phases are in
:mod:`benchkit.load_phases`; every step raises :class:`LoadError` when it fails or
times out.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchkit import LOAD_SCRIPT, ROOT
from benchkit.load_observers import Watcher
from benchkit.procs import Proc, broker_argv, proc_stats, spawn, wait_for_bind
from benchkit.report import print_load_table

GROUP_ENV = ("ATOMIC_INTERCOM_GROUP", "PI_INTERCOM_GROUP")
ENDPOINT_ENV = ("INTERCOM_ENDPOINT", "INTERCOM_PUB_ENDPOINT", "INTERCOM_DATA_DIR")


class LoadError(RuntimeError):
    """A step of the run failed or timed out; the message says which."""


def log(msg: str) -> None:
    print(f"[load {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


class LoadProc(Proc):
    """A broker or worker process of the load run; its failures raise :class:`LoadError`."""

    def send(self, **cmd: Any) -> None:
        self.popen.stdin.write((json.dumps(cmd) + "\n").encode())
        self.popen.stdin.flush()

    def stderr_tail(self, n: int = 600) -> str:
        return self.log_tail(n)

    def silent_error(self, event: str, timeout: float) -> Exception:
        return LoadError(f"{self.name} (pid {self.pid}): no '{event}' within {timeout:g} s")

    def ended_error(self, event: str) -> Exception:
        rc = self.popen.poll()
        return LoadError(f"{self.name} (pid {self.pid}) ended (rc {rc}) before '{event}'; "
                         f"stderr tail: {self.stderr_tail()!r}")


class Run:
    """One load run: what it started, what it measured, what went wrong."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.n = args.sessions
        self.p = max(1, min(args.workers, self.n))
        self.shares = [self.n // self.p + (1 if i < self.n % self.p else 0) for i in range(self.p)]
        self.rows: list[tuple[str, str]] = []
        self.problems: list[str] = []
        self.rss: list[tuple[str, dict]] = []
        self.dir: Path | None = None
        self.broker: LoadProc | None = None
        self.workers: list[LoadProc] = []
        self.sessions: list = []
        self.watcher: Watcher | None = None
        self.connected: dict[int, int] = {}      # worker index -> sessions it holds
        self.ids: dict[str, str] = {}            # session id -> name
        self.broker_rc: int | None = None
        self.n_victim = 0

    # -- reporting ---------------------------------------------------------------------

    def row(self, label: str, value: str) -> None:
        self.rows.append((label, value))
        log(f"{label}: {value}")

    def problem(self, text: str) -> None:
        self.problems.append(text)
        log(f"PROBLEM: {text}")

    def alive(self) -> None:
        """Raise LoadError when the broker is gone: nothing after that is meaningful."""
        if self.broker is not None and self.broker.popen.poll() is not None:
            raise LoadError(f"broker (pid {self.broker.pid}) exited with status "
                            f"{self.broker.popen.returncode} during the run")

    def sample(self, label: str) -> dict:
        stats = proc_stats(self.broker.pid) if self.broker else {}
        self.rss.append((label, stats))
        return stats

    # -- setup ---------------------------------------------------------------------------

    def child_env(self) -> dict:
        env = {k: v for k, v in os.environ.items() if k not in GROUP_ENV + ENDPOINT_ENV}
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
        env["HOME"] = str(self.dir)         # no user intercom config
        return env

    def start_broker(self) -> None:
        assert self.dir is not None
        data = self.dir
        self.endpoint = f"ipc://{data}/broker.sock"
        self.pub = f"ipc://{data}/presence.sock"
        argv = broker_argv(data, self.endpoint, self.pub)
        self.broker = spawn("broker", argv, self.child_env(), data / "broker.log", pipes=False,
                            cls=LoadProc)
        state = wait_for_bind(self.broker, data / "broker.sock", 20, 0.05)
        if state == "exited":
            raise LoadError(f"broker exited (rc {self.broker.popen.returncode}): "
                            f"{self.broker.stderr_tail()!r}")
        if state == "timeout":
            raise LoadError("broker socket did not appear within 20 s")

    def connect_local(self, name: str):
        from client import Client
        from schemas.config import DEFAULT_CONFIG
        s = Client.connect(name=name, endpoint=self.endpoint, config=DEFAULT_CONFIG, timeout=20)
        self.sessions.append(s)
        return s

    def spawn_worker(self, index: int, count: int) -> LoadProc:
        role_args = {"index": index, "count": count, "endpoint": self.endpoint,
                     "connect_timeout": 30.0, "phase_timeout": self.connect_timeout,
                     "lifetime": self.args.max_seconds + 60}
        argv = [sys.executable, str(LOAD_SCRIPT), "--role", "worker", "--role-args",
                json.dumps(role_args)]
        proc = spawn(f"worker{index}", argv, self.child_env(), self.dir / f"worker{index}.log",
                     pipes=True, cls=LoadProc)
        proc.check = self.alive
        self.workers.append(proc)
        return proc

    def setup(self) -> None:
        """Tmp dir, broker, watcher and probe sessions; the idle /proc sample."""
        for name in GROUP_ENV:                  # our own sessions: default group as well
            os.environ.pop(name, None)
        self.connect_timeout = max(60.0, self.n * 0.15)
        self.dir = Path(tempfile.mkdtemp(prefix="icl-", dir="/tmp"))
        log(f"dir {self.dir}; {self.n} sessions in {self.p} workers {self.shares}")
        self.start_broker()
        log(f"broker pid {self.broker.pid}")
        watcher_session = self.connect_local("load-watcher")
        self.watcher = Watcher(watcher_session)
        self.watcher.check = self.alive
        self.watcher.start()
        self.probe = self.connect_local("load-probe")
        time.sleep(0.3)
        self.sample("idle (watcher+probe)")

    def poll_counts(self, workers: list[LoadProc], timeout: float) -> list[dict]:
        for w in workers:
            w.send(cmd="counts")
        return [w.expect("counts", timeout) for w in workers]

    # -- shutdown --------------------------------------------------------------------------

    def stop_broker(self) -> None:
        if self.broker is None or self.broker.popen.poll() is not None:
            if self.broker is not None:
                self.problem(f"broker had already exited (rc {self.broker.popen.returncode})")
                self.broker_rc = self.broker.popen.returncode
            return
        t = time.monotonic()
        self.broker_rc = self.broker.stop(signal.SIGTERM, 20)
        self.row("broker SIGTERM", f"exit status {self.broker_rc} after {time.monotonic() - t:.2f} s")
        if self.broker_rc != 0:
            self.problem(f"broker exit status {self.broker_rc} after SIGTERM (expected 0)")

    def scan_broker_log(self) -> None:
        if self.dir is None:
            return
        path = self.dir / "broker.log"
        try:
            lines = path.read_text(errors="replace").splitlines()
        except OSError:
            return
        levels: dict[str, int] = {}
        notable: list[str] = []
        noise: list[str] = []
        stats: dict | None = None
        for line in lines:
            try:
                rec = json.loads(line)
            except ValueError:
                noise.append(line)
                continue
            level = rec.get("level", "?")
            levels[level] = levels.get(level, 0) + 1
            if level not in ("info", "debug"):
                notable.append(f"{level}: {rec.get('event')} {rec.get('error', '')}".strip())
            if rec.get("event") == "broker_stopping":
                stats = rec
        self.row("broker log lines", ", ".join(f"{k} {v}" for k, v in sorted(levels.items()))
                 + (f", non-JSON {len(noise)}" if noise else ""))
        if stats:
            keep = {k: v for k, v in stats.items() if k not in ("event", "level", "timestamp")}
            self.row("broker final stats", " ".join(f"{k}={v}" for k, v in sorted(keep.items())))
            bad = {k: v for k, v in keep.items()
                   if k.startswith(("dropped.peer_full", "internal_error", "persist.failed",
                                    "bad_frame"))}
            # Only the SIGKILLed worker's sessions should have expired (heartbeat).
            if keep.get("sessions.expired", 0) != self.n_victim:
                bad["sessions.expired"] = f"{keep.get('sessions.expired', 0)} (expected {self.n_victim})"
            if bad:
                self.problem(f"broker stats: {bad}")
        elif self.broker_rc is not None:
            self.problem("broker log has no broker_stopping line")
        if notable:
            self.problem(f"broker log: {len(notable)} warning/error records, e.g. {notable[:3]}")
        if noise:
            self.problem(f"broker log: {len(noise)} non-JSON lines, e.g. {noise[:3]}")

    def cleanup(self) -> None:
        """Stop whatever is still running, by PID; close our sessions."""
        if self.watcher is not None:
            self.watcher.halt.set()
        for s in self.sessions:
            try:
                s.close()
            except Exception:
                pass
        self.sessions.clear()
        for w in self.workers:
            rc = w.stop(signal.SIGTERM, 5)
            log(f"stopped {w.name} (pid {w.pid}), rc {rc}")
        self.workers.clear()
        if self.broker is not None:
            if self.broker.popen.poll() is None:
                self.stop_broker()
            elif self.broker_rc is None:
                self.broker_rc = self.broker.popen.returncode
                self.problem(f"broker (pid {self.broker.pid}) died on its own, status {self.broker_rc}")

    # -- table -----------------------------------------------------------------------------

    def print_table(self) -> None:
        print_load_table(self.n, self.p, self.rows, self.rss, self.problems)
