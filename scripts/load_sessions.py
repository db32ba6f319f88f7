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
   per-connect latency, and how long until the watcher had every ``session_joined``.
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
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import uuid
from pathlib import Path
from typing import Any

SCRIPT = Path(__file__).resolve()
ROOT = SCRIPT.parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

FANOUT_MARK = "fanout-"
GROUP_ENV = ("ATOMIC_INTERCOM_GROUP", "PI_INTERCOM_GROUP")
ENDPOINT_ENV = ("INTERCOM_ENDPOINT", "INTERCOM_PUB_ENDPOINT", "INTERCOM_DATA_DIR")


class LoadError(RuntimeError):
    """A step of the run failed or timed out; the message says which."""


# =====================================================================================
# Small helpers
# =====================================================================================

def pct(values: list[float], q: float) -> float:
    """Percentile ``q`` (0..100) with linear interpolation; nan for no values."""
    if not values:
        return float("nan")
    s = sorted(values)
    if len(s) == 1:
        return s[0]
    pos = (len(s) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def proc_stats(pid: int) -> dict[str, Any]:
    """VmRSS / VmHWM (MiB), threads, open fds and CPU seconds of a live process."""
    out: dict[str, Any] = {}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key in ("VmRSS", "VmHWM"):
                    out[key] = int(value.split()[0]) / 1024.0
                elif key == "Threads":
                    out["threads"] = int(value)
        out["fds"] = len(os.listdir(f"/proc/{pid}/fd"))
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        tick = os.sysconf("SC_CLK_TCK")
        out["cpu_s"] = (int(fields[11]) + int(fields[12])) / tick
    except (OSError, ValueError, IndexError):
        pass
    return out


def _load_prctl():
    try:
        import ctypes
        return ctypes.CDLL("libc.so.6", use_errno=True).prctl
    except (ImportError, OSError, AttributeError):
        return None


# Resolved here, not after fork: the parent has threads when it starts workers, so
# the child must not import anything between fork and exec.
_PRCTL = _load_prctl()


def _pdeathsig() -> None:
    """In the child before exec: get SIGTERM when the parent dies (Linux)."""
    if _PRCTL is not None:
        _PRCTL(1, signal.SIGTERM)    # PR_SET_PDEATHSIG


def log(msg: str) -> None:
    print(f"[load {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# =====================================================================================
# Worker role (a separate interpreter: this file with --role worker)
# =====================================================================================

def worker_main(args: dict) -> int:
    index, count, endpoint = args["index"], args["count"], args["endpoint"]
    connect_timeout = args["connect_timeout"]
    # Watchdog: whatever happens, this process does not outlive the run.
    watchdog = threading.Timer(args["lifetime"], lambda: os._exit(3))
    watchdog.daemon = True
    watchdog.start()
    out_lock = threading.Lock()

    def emit(event: str, **fields: Any) -> None:
        line = json.dumps({"event": event, **fields})
        with out_lock:
            sys.stdout.write(line + "\n")
            sys.stdout.flush()

    import zmq

    from client import Client

    ctx = zmq.Context.instance()
    if count + 64 > ctx.max_sockets:
        # libzmq's default is 1023 sockets per context and every session is one socket.
        ctx.max_sockets = count + 64
    emit("started", pid=os.getpid())
    line = sys.stdin.readline()
    if json.loads(line or "{}").get("cmd") != "go":
        return 0

    sessions: list = []
    lock = threading.Lock()
    fanout: dict[str, int] = {}
    other_msgs = 0
    events: dict[str, int] = {}
    stop = threading.Event()

    def drain() -> None:
        # What a runtime does: take every inbound message and presence event.
        nonlocal other_msgs
        while not stop.is_set():
            with lock:
                current = list(sessions)
            for s in current:
                while (msg := s.receive(0)) is not None:
                    text = msg.get("message") or ""
                    if text.startswith(FANOUT_MARK):
                        fanout[s.id] = fanout.get(s.id, 0) + 1
                    else:
                        other_msgs += 1
                while (ev := s.next_event(0)) is not None:
                    name = str(ev.get("event"))
                    events[name] = events.get(name, 0) + 1
            stop.wait(0.1)

    drainer = threading.Thread(target=drain, name="drain", daemon=True)
    drainer.start()

    latencies: list[float] = []
    errors: list[str] = []
    t0 = time.perf_counter()
    deadline = time.monotonic() + args["phase_timeout"]
    for i in range(count):
        if time.monotonic() > deadline:
            errors.append(f"connect phase deadline passed after {i} sessions")
            break
        t = time.perf_counter()
        try:
            s = Client.connect(name=f"w{index}-s{i}", endpoint=endpoint, timeout=connect_timeout)
        except Exception as exc:   # ConnectError and anything else: report, keep going
            errors.append(f"w{index}-s{i}: {type(exc).__name__}: {exc}")
            continue
        latencies.append(time.perf_counter() - t)
        with lock:
            sessions.append(s)
    emit("connected", n=len(sessions), elapsed=time.perf_counter() - t0,
         latencies=[round(x, 6) for x in latencies], errors=errors[:10], n_errors=len(errors))

    try:
        for line in sys.stdin:          # EOF (parent gone or done) ends the loop
            cmd = json.loads(line).get("cmd")
            if cmd == "ids":
                emit("ids", ids=[[s.name, s.id] for s in sessions])
            elif cmd == "counts":
                emit("counts", fanout=dict(fanout), other_msgs=other_msgs, events=dict(events),
                     disconnected=sum(1 for s in sessions if not s.connected))
            elif cmd == "close":
                break
    finally:
        stop.set()
        drainer.join(5)
        t = time.perf_counter()
        close_errors = 0
        # A session not connected at close says no bye: the broker only expires it.
        not_connected = sum(1 for s in sessions if not s.connected)
        for s in sessions:
            try:
                s.close()
            except Exception:
                close_errors += 1
        emit("closed", elapsed=time.perf_counter() - t, errors=close_errors, events=dict(events),
             not_connected=not_connected)
    return 0


# =====================================================================================
# Parent side: processes
# =====================================================================================

class Proc:
    """A child process we started, by PID; JSON lines from its stdout go to ``events``."""

    def __init__(self, name: str, argv: list[str], env: dict, log_path: Path,
                 pipes: bool) -> None:
        self.name = name
        self.log_path = log_path
        self.events: queue.Queue = queue.Queue()
        self.check = None          # called while waiting: raises when the run is lost
        with open(log_path, "wb") as log_file:
            self.popen = subprocess.Popen(
                argv, cwd=ROOT, env=env, preexec_fn=_pdeathsig,
                stdin=subprocess.PIPE if pipes else subprocess.DEVNULL,
                stdout=subprocess.PIPE if pipes else log_file,
                stderr=log_file)
        if pipes:
            threading.Thread(target=self._read, name=f"read-{name}", daemon=True).start()

    @property
    def pid(self) -> int:
        return self.popen.pid

    def _read(self) -> None:
        for raw in self.popen.stdout:
            try:
                self.events.put(json.loads(raw))
            except ValueError:
                self.events.put({"event": "noise", "line": raw.decode(errors="replace")})
        self.events.put({"event": "eof"})

    def send(self, **cmd: Any) -> None:
        self.popen.stdin.write((json.dumps(cmd) + "\n").encode())
        self.popen.stdin.flush()

    def expect(self, event: str, timeout: float) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise LoadError(f"{self.name} (pid {self.pid}): no '{event}' within {timeout:g} s")
            if self.check is not None:
                self.check()
            try:
                item = self.events.get(timeout=min(left, 0.5))
            except queue.Empty:
                continue
            if item.get("event") == event:
                return item
            if item.get("event") == "eof":
                rc = self.popen.poll()
                raise LoadError(f"{self.name} (pid {self.pid}) ended (rc {rc}) before '{event}'; "
                                f"stderr tail: {self.stderr_tail()!r}")

    def stderr_tail(self, n: int = 600) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-n:]
        except OSError:
            return ""

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 10.0) -> int | None:
        """Stop by PID (``sig``, then SIGKILL); returns the exit status."""
        popen = self.popen
        if popen.poll() is None:
            try:
                os.kill(popen.pid, sig)
            except ProcessLookupError:
                pass
            try:
                popen.wait(timeout)
            except subprocess.TimeoutExpired:
                os.kill(popen.pid, signal.SIGKILL)
                popen.wait(5)
        for stream in (popen.stdin, popen.stdout):
            if stream is not None:
                try:
                    stream.close()
                except OSError:
                    pass
        return popen.returncode


class Watcher(threading.Thread):
    """Takes the watcher session's presence events as they come, with arrival times."""

    def __init__(self, session) -> None:
        super().__init__(name="watcher", daemon=True)
        self.session = session
        self.log: list[tuple[float, str, str, str]] = []   # (monotonic, event, name, id)
        self.lock = threading.Lock()
        self.halt = threading.Event()
        self.check = None          # called while waiting: raises when the run is lost

    def run(self) -> None:
        while not self.halt.is_set():
            ev = self.session.next_event(0.2)
            if ev is None:
                continue
            sess = ev.get("session") or {}
            with self.lock:
                self.log.append((time.monotonic(), str(ev.get("event")), str(sess.get("name")),
                                 str(sess.get("id"))))

    def snapshot(self, start: int = 0) -> list[tuple[float, str, str, str]]:
        with self.lock:
            return self.log[start:]

    def mark(self) -> int:
        with self.lock:
            return len(self.log)

    def wait_for(self, pred, timeout: float, start: int = 0, step: float = 0.05):
        """Poll until ``pred(events since start)`` is true or timeout; returns it."""
        deadline = time.monotonic() + timeout
        while True:
            ok = pred(self.snapshot(start))
            if ok or time.monotonic() >= deadline:
                return ok
            if self.check is not None:
                self.check()
            time.sleep(step)


class Prober(threading.Thread):
    """Calls ``status`` every 50 ms while a busy phase runs: does the broker stay responsive?"""

    def __init__(self, session, interval: float = 0.05) -> None:
        super().__init__(name="prober", daemon=True)
        self.session = session
        self.interval = interval
        self.times: list[float] = []
        self.bad = 0
        self.halt = threading.Event()

    def run(self) -> None:
        while True:
            t = time.perf_counter()
            res = self.session.intercom(action="status")
            self.times.append(time.perf_counter() - t)
            if not res.get("ok"):
                self.bad += 1
            if self.halt.wait(self.interval):
                return

    def __enter__(self) -> Prober:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.halt.set()
        self.join(15)

    def summary(self) -> str:
        t = self.times
        text = (f"p50 {pct(t, 50) * 1e3:.1f} ms  p99 {pct(t, 99) * 1e3:.1f} ms  "
                f"max {max(t, default=float('nan')) * 1e3:.1f} ms  ({len(t)} calls)")
        return text + (f", {self.bad} FAILED" if self.bad else "")


# =====================================================================================
# Parent side: the run
# =====================================================================================

class Run:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.n = args.sessions
        self.p = max(1, min(args.workers, self.n))
        self.shares = [self.n // self.p + (1 if i < self.n % self.p else 0) for i in range(self.p)]
        self.rows: list[tuple[str, str]] = []
        self.problems: list[str] = []
        self.rss: list[tuple[str, dict]] = []
        self.dir: Path | None = None
        self.broker: Proc | None = None
        self.workers: list[Proc] = []
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
        argv = [sys.executable, "-m", "broker", "--data-dir", str(data), "--endpoint",
                self.endpoint, "--pub-endpoint", self.pub]
        self.broker = Proc("broker", argv, self.child_env(), data / "broker.log", pipes=False)
        sock = data / "broker.sock"
        deadline = time.monotonic() + 20
        while not sock.exists():
            if self.broker.popen.poll() is not None:
                raise LoadError(f"broker exited (rc {self.broker.popen.returncode}): "
                                f"{self.broker.stderr_tail()!r}")
            if time.monotonic() > deadline:
                raise LoadError("broker socket did not appear within 20 s")
            time.sleep(0.05)

    def connect_local(self, name: str):
        from client import Client
        from schemas.config import DEFAULT_CONFIG
        s = Client.connect(name=name, endpoint=self.endpoint, config=DEFAULT_CONFIG, timeout=20)
        self.sessions.append(s)
        return s

    def spawn_worker(self, index: int, count: int) -> Proc:
        role_args = {"index": index, "count": count, "endpoint": self.endpoint,
                     "connect_timeout": 30.0, "phase_timeout": self.connect_timeout,
                     "lifetime": self.args.max_seconds + 60}
        argv = [sys.executable, str(SCRIPT), "--role", "worker", "--role-args",
                json.dumps(role_args)]
        proc = Proc(f"worker{index}", argv, self.child_env(), self.dir / f"worker{index}.log",
                    pipes=True)
        proc.check = self.alive
        self.workers.append(proc)
        return proc

    # -- phases --------------------------------------------------------------------------

    def run(self) -> None:
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

        self.phase_connect()
        self.phase_latency()
        self.phase_fanout()
        self.phase_presence()
        self.phase_close()

    def phase_connect(self) -> None:
        for i, share in enumerate(self.shares):
            self.spawn_worker(i, share)
        for w in self.workers:
            w.expect("started", 60)
        mark = self.watcher.mark()
        prober = Prober(self.probe).__enter__()
        t0 = time.monotonic()
        for w in self.workers:
            w.send(cmd="go")
        latencies: list[float] = []
        t_last = t0
        for i, w in enumerate(self.workers):
            res = w.expect("connected", self.connect_timeout + 30)
            t_last = max(t_last, time.monotonic())
            self.connected[i] = res["n"]
            latencies += res["latencies"]
            if res["n_errors"]:
                self.problem(f"worker{i}: {res['n_errors']} connect failures, e.g. {res['errors'][:3]}")
        total = time.monotonic() - t0
        n_ok = sum(self.connected.values())
        self.row("sessions connected", f"{n_ok}/{self.n} (+ watcher, probe)")
        self.row("connect: total time", f"{total:.2f} s  ({n_ok / total:.0f} connects/s, "
                                        f"{self.p} workers in parallel)")
        self.row("connect: per-connect latency",
                 f"p50 {pct(latencies, 50) * 1e3:.1f} ms  p99 {pct(latencies, 99) * 1e3:.1f} ms  "
                 f"max {max(latencies, default=float('nan')) * 1e3:.1f} ms")
        if n_ok != self.n:
            self.problem(f"only {n_ok} of {self.n} sessions connected")

        # Presence catch-up: the watcher must see every worker session join.
        for w in self.workers:
            w.send(cmd="ids")
        for w in self.workers:
            for name, sid in w.expect("ids", 30)["ids"]:
                self.ids[sid] = name

        def all_joined(evs):
            return {sid for _, e, _, sid in evs if e == "session_joined"} >= set(self.ids)

        ok = self.watcher.wait_for(all_joined, 60, mark)
        prober.__exit__()
        evs = self.watcher.snapshot(mark)
        joins = [t for t, e, _, sid in evs if e == "session_joined" and sid in self.ids]
        if ok and joins:
            self.row("presence: watcher saw all joins",
                     f"{max(joins) - t0:.2f} s after go ({max(0.0, max(joins) - t_last):.2f} s "
                     f"after the last worker finished)")
        else:
            self.problem(f"watcher saw {len(set(joins))} of {len(self.ids)} session_joined in 60 s")
        self.row("status latency during connect storm", prober.summary())
        if prober.bad:
            self.problem(f"{prober.bad} status calls failed during the connect storm")
        st = self.sample(f"{n_ok} connected")
        self.broker_cpu_connect = st.get("cpu_s", 0.0) - self.rss[0][1].get("cpu_s", 0.0)
        self.row("broker CPU during connect phase", f"{self.broker_cpu_connect:.2f} s")

    def phase_latency(self) -> None:
        calls = self.args.calls
        expected_visible = sum(self.connected.values()) + 1        # workers' + watcher
        for action in ("list", "status"):
            for _ in range(max(10, calls // 10)):            # warm-up
                self.alive()
                self.probe.intercom(action=action)
            times: list[float] = []
            bad: list[dict] = []
            size = None
            for _ in range(calls):
                self.alive()
                t = time.perf_counter()
                res = self.probe.intercom(action=action)
                times.append(time.perf_counter() - t)
                if not res.get("ok"):
                    bad.append(res)
                elif action == "list":
                    size = len(res.get("sessions", []))
                else:
                    size = res.get("visibleSessions")
            what = "rows" if action == "list" else "visibleSessions"
            self.row(f"{action}: latency ({calls} calls)",
                     f"p50 {pct(times, 50) * 1e3:.2f} ms  p99 {pct(times, 99) * 1e3:.2f} ms  "
                     f"max {max(times) * 1e3:.2f} ms  [{what}={size}]")
            if bad:
                self.problem(f"{action}: {len(bad)} failed calls, e.g. {bad[0]}")
            if size != expected_visible:
                self.problem(f"{action}: {what}={size}, expected {expected_visible}")

    def poll_counts(self, workers: list[Proc], timeout: float) -> list[dict]:
        for w in workers:
            w.send(cmd="counts")
        return [w.expect("counts", timeout) for w in workers]

    def phase_fanout(self) -> None:
        k = min(self.args.fanout, len(self.ids))
        rng = random.Random(self.args.seed)
        targets = rng.sample(sorted(self.ids), k)
        mark = FANOUT_MARK + uuid.uuid4().hex[:8]
        send_times: list[float] = []
        send_bad: list[dict] = []
        t0 = time.monotonic()
        for j, sid in enumerate(targets):
            self.alive()
            t = time.perf_counter()
            res = self.probe.intercom(action="send", to=sid, message=f"{mark} #{j}")
            send_times.append(time.perf_counter() - t)
            if not (res.get("ok") and res.get("delivered", True)):
                send_bad.append(res)
        t_sent = time.monotonic()
        target_set = set(targets)
        deadline = time.monotonic() + 20
        while True:
            counts = self.poll_counts(self.workers, 10)
            got: dict[str, int] = {}
            for c in counts:
                got.update(c["fanout"])
            received = sum(1 for sid in targets if got.get(sid, 0) >= 1)
            if received == k or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        t_done = time.monotonic()
        dupes = sum(max(0, got.get(sid, 0) - 1) for sid in targets)
        stray = sum(n for sid, n in got.items() if sid not in target_set)
        self.row(f"fan-out: 1 sender -> {k} random sessions",
                 f"{received}/{k} received, {dupes} duplicates, {stray} misdirected; "
                 f"sends {t_sent - t0:.2f} s (p50 {pct(send_times, 50) * 1e3:.2f} ms, "
                 f"p99 {pct(send_times, 99) * 1e3:.2f} ms), all in by {t_done - t0:.2f} s")
        if send_bad:
            self.problem(f"fan-out: {len(send_bad)} sends failed, e.g. {send_bad[0]}")
        if received != k or dupes or stray:
            self.problem(f"fan-out: {received}/{k} received, {dupes} duplicates, {stray} misdirected")
        per_worker = [sum(n for sid, n in c["fanout"].items()) for c in counts]
        self.row("fan-out: received per worker", " + ".join(map(str, per_worker)))
        disc = sum(c["disconnected"] for c in counts)
        if disc:
            self.problem(f"{disc} worker sessions report not connected (transport reconnecting)")
        self.sample("after fan-out")

    def phase_presence(self) -> None:
        victim_i = len(self.workers) - 1
        victim = self.workers[victim_i]
        prefix = f"w{victim_i}-"
        n_victim = self.n_victim = self.connected.get(victim_i, 0)
        mark = self.watcher.mark()
        # Spurious departures so far: a worker session left before anything was killed.
        early = [(name, sid) for _, e, name, sid in self.watcher.snapshot()
                 if e == "session_left"]
        if early:
            self.problem(f"{len(early)} session_left before the kill (sessions expired under "
                         f"load?), e.g. {early[:3]}")
        liveness = 3.0
        budget = liveness + 0.5 + 1.5        # liveness + broker sweep interval + margin

        def victim_lefts(evs):
            return [t for t, e, name, _ in evs if e == "session_left" and name.startswith(prefix)]

        with Prober(self.probe) as prober:
            t_kill = time.monotonic()
            os.kill(victim.pid, signal.SIGKILL)
            self.watcher.wait_for(lambda evs: len(victim_lefts(evs)) >= n_victim,
                                  liveness + 12, mark)
            time.sleep(0.5)       # anything extra arriving right after
        evs = self.watcher.snapshot(mark)
        lefts = victim_lefts(evs)
        others = [name for _, e, name, _ in evs if e == "session_left" and not name.startswith(prefix)]
        rc = victim.stop(signal.SIGKILL, 5)
        self.workers.remove(victim)
        if lefts:
            first, last = min(lefts) - t_kill, max(lefts) - t_kill
            within = sum(1 for t in lefts if t - t_kill <= budget)
            self.row(f"presence: SIGKILL worker{victim_i} ({n_victim} sessions)",
                     f"{len(lefts)}/{n_victim} session_left, first {first:.2f} s, "
                     f"last {last:.2f} s after kill; {within} within {budget:g} s")
            if len(lefts) != n_victim:
                self.problem(f"presence: {len(lefts)}/{n_victim} session_left after SIGKILL")
            if last > budget:
                self.problem(f"presence: last session_left {last:.2f} s after kill (> {budget:g} s)")
        else:
            self.problem(f"presence: no session_left within {liveness + 12:g} s of SIGKILL")
        if others:
            self.problem(f"presence: {len(others)} session_left for sessions not killed: {others[:5]}")
        self.row("status latency during mass expiry", prober.summary())
        if prober.bad:
            self.problem(f"{prober.bad} status calls failed during the mass expiry")
        if rc != -signal.SIGKILL:
            self.problem(f"killed worker exit status {rc}, expected -9")
        for sid in [sid for sid, name in self.ids.items() if name.startswith(prefix)]:
            del self.ids[sid]
        res = self.probe.intercom(action="status")
        expected = len(self.ids) + 1
        if res.get("visibleSessions") != expected:
            self.problem(f"after kill: status visibleSessions={res.get('visibleSessions')}, "
                         f"expected {expected}")
        self.sample("after SIGKILL")

    def phase_close(self) -> None:
        mark = self.watcher.mark()
        t0 = time.monotonic()
        counts = self.poll_counts(self.workers, 10)
        for c in counts:
            if c["other_msgs"]:
                self.problem(f"a worker received {c['other_msgs']} unexpected messages")
        prober = Prober(self.probe).__enter__()
        for w in self.workers:
            w.send(cmd="close")
        ev_total: dict[str, int] = {}
        close_s: list[float] = []
        for w in self.workers:
            res = w.expect("closed", 60 + self.n * 0.05)
            close_s.append(res["elapsed"])
            for k, v in res["events"].items():
                ev_total[k] = ev_total.get(k, 0) + v
            if res["errors"]:
                self.problem(f"{w.name}: {res['errors']} errors while closing sessions")
            if res["not_connected"]:
                self.problem(f"{w.name}: {res['not_connected']} sessions were not connected at "
                             f"close (reconnecting after the broker dropped them)")
        for w in list(self.workers):
            try:
                w.popen.wait(20)
            except subprocess.TimeoutExpired:
                self.problem(f"{w.name} (pid {w.pid}) did not exit within 20 s after closing")
            rc = w.stop()
            if rc != 0:
                self.problem(f"{w.name} exit status {rc}; stderr tail {w.stderr_tail()!r}")
            elif w.stderr_tail().strip():
                self.problem(f"{w.name} wrote to stderr: {w.stderr_tail(300)!r}")
            self.workers.remove(w)
        remaining = set(self.ids)
        ok = self.watcher.wait_for(
            lambda evs: {sid for _, e, _, sid in evs if e == "session_left"} >= remaining, 30, mark)
        prober.__exit__()
        left = {sid for _, e, _, sid in self.watcher.snapshot(mark) if e == "session_left"}
        self.row("close: worker sessions",
                 f"{len(remaining)} closed in {max(close_s, default=0):.2f} s (slowest worker); "
                 f"watcher saw {len(left & remaining)}/{len(remaining)} leave "
                 f"by {time.monotonic() - t0:.2f} s")
        self.row("status latency during mass close", prober.summary())
        if prober.bad:
            self.problem(f"{prober.bad} status calls failed during the mass close")
        if not ok:
            self.problem(f"close: watcher saw only {len(left & remaining)}/{len(remaining)} leave")
        self.row("presence events taken (surviving workers)",
                 ", ".join(f"{k} {v}" for k, v in sorted(ev_total.items())) or "none")
        # Whole-run check on the watcher: each worker session joined once and left once.
        all_evs = self.watcher.snapshot()
        joins = [sid for _, e, name, sid in all_evs if e == "session_joined" and name.startswith("w")]
        if len(joins) != len(set(joins)):
            self.problem(f"watcher: {len(joins) - len(set(joins))} repeated session_joined "
                         f"(sessions expired and came back)")
        self.watcher.halt.set()
        self.watcher.join(2)
        for s in self.sessions:
            s.close()
        self.sessions.clear()
        time.sleep(1.0)
        self.sample("all closed")

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
        print()
        print(f"Intercom load run: {self.n} sessions, {self.p} worker processes, "
              f"{os.cpu_count()} CPUs, python {sys.version.split()[0]}")
        width = max((len(k) for k, _ in self.rows), default=10)
        print("-" * (width + 60))
        for label, value in self.rows:
            print(f"{label:<{width}}  {value}")
        print("-" * (width + 60))
        print(f"{'broker process':<{width}}  {'VmRSS':>9} {'VmHWM':>9} {'fds':>6} {'thr':>4} {'cpu s':>7}")
        for label, st in self.rss:
            print(f"{label:<{width}}  {st.get('VmRSS', float('nan')):>7.1f}Mi "
                  f"{st.get('VmHWM', float('nan')):>7.1f}Mi {st.get('fds', 0):>6} "
                  f"{st.get('threads', 0):>4} {st.get('cpu_s', float('nan')):>7.2f}")
        print("-" * (width + 60))
        if self.problems:
            print(f"PROBLEMS ({len(self.problems)}):")
            for p in self.problems:
                print(f"  - {p}")
        else:
            print("all checks passed")


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
        run.run()
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
