"""Parent side of every benchmark process: start, talk to, and stop children by PID.

A child is started with :func:`spawn` (PR_SET_PDEATHSIG, cwd at the project root, its
stderr in a log file); JSON lines on its stdout arrive on :attr:`Proc.events`, where
:meth:`Proc.expect` waits for ``ready``/``result`` and :meth:`Proc.tell` says ``go``.
:meth:`Proc.stop` ends it by PID: SIGTERM (or the given signal), then SIGKILL.
:class:`Harness` owns a tmp dir and every process of one bench run. Also here: broker
start helpers and readers of /proc and of the broker's log.
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchkit import BENCH_SCRIPT, ROOT

# =====================================================================================
# Starting and stopping by PID
# =====================================================================================


def _load_prctl():
    try:
        import ctypes
        return ctypes.CDLL("libc.so.6", use_errno=True).prctl
    except (ImportError, OSError, AttributeError):
        return None


# Resolved here, not after fork: the parent has threads when it starts children, so
# the child must not import anything between fork and exec.
_PRCTL = _load_prctl()


def pdeathsig() -> None:
    """In the child before exec: get SIGTERM when the parent dies (Linux)."""
    if _PRCTL is not None:
        _PRCTL(1, signal.SIGTERM)    # PR_SET_PDEATHSIG


class RoleError(RuntimeError):
    pass


class Proc:
    """A child process we started, by PID; JSON lines from its stdout arrive on ``events``."""

    def __init__(self, name: str, popen: subprocess.Popen, log: Path) -> None:
        self.name = name
        self.popen = popen
        self.log = log
        self.events: queue.Queue[dict] = queue.Queue()
        self.check = None          # called while waiting: raises when the run is lost
        if popen.stdout is not None:
            threading.Thread(target=self._read, name=f"read-{name}", daemon=True).start()

    @property
    def pid(self) -> int:
        return self.popen.pid

    def _read(self) -> None:
        for raw in self.popen.stdout:
            line = raw.decode(errors="replace").strip()
            if line.startswith("{"):
                try:
                    self.events.put(json.loads(line))
                    continue
                except ValueError:
                    pass
            if line:
                self.events.put({"event": "output", "line": line})
        self.events.put({"event": "eof"})

    # -- the handshake --------------------------------------------------------------------

    def expect(self, event: str, timeout: float) -> dict:
        """The next ``event`` line; raises when the child fails, ends or stays silent."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise self.silent_error(event, timeout)
            if self.check is not None:
                self.check()
            try:
                msg = self.events.get(timeout=min(left, 0.5))
            except queue.Empty:
                continue
            kind = msg.get("event")
            if kind == event:
                return msg
            if kind == "error":
                raise RoleError(f"{self.name} (pid {self.pid}) failed:\n{msg.get('error')}")
            if kind == "eof":
                raise self.ended_error(event)

    def silent_error(self, event: str, timeout: float) -> Exception:
        return RoleError(f"{self.name} (pid {self.pid}): no {event!r} within {timeout:g} s"
                         f"{self.tail_note()}")

    def ended_error(self, event: str) -> Exception:
        self.popen.wait(5)
        return RoleError(f"{self.name} (pid {self.pid}) exited with "
                         f"{self.popen.returncode} before {event!r}{self.tail_note()}")

    def tell(self, line: str) -> None:
        try:
            self.popen.stdin.write(line.encode() + b"\n")
            self.popen.stdin.flush()
        except (BrokenPipeError, OSError):
            pass

    # -- its log --------------------------------------------------------------------------

    def log_tail(self, n: int) -> str:
        try:
            return self.log.read_text(errors="replace")[-n:]
        except OSError:
            return ""

    def tail_note(self) -> str:
        """The log's last 2000 characters as a block to append to an error message."""
        text = self.log_tail(2000)
        return f"\n--- {self.log} (tail) ---\n{text}" if text.strip() else ""

    # -- stopping -------------------------------------------------------------------------

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


def spawn(name: str, argv: list[str], env: dict, log: Path, *, pipes: bool = True,
          cls: type[Proc] = Proc, cwd: Path = ROOT) -> Proc:
    """Start ``argv`` in ``cwd`` (the project root); stderr (and stdout unless ``pipes``) to ``log``."""
    with open(log, "wb") as log_file:
        popen = subprocess.Popen(
            argv, cwd=cwd, env=env, preexec_fn=pdeathsig,
            stdin=subprocess.PIPE if pipes else subprocess.DEVNULL,
            stdout=subprocess.PIPE if pipes else log_file,
            stderr=log_file)
    return cls(name, popen, log)


# =====================================================================================
# The broker
# =====================================================================================

# The bounds a benchmark raises out of its way, so it measures routing, not refusals:
# four senders outrun one receiver by more than the default 8 MiB backlog (the bound
# then refuses sends, as it should), and the durable and scaling sections host many
# runs (each a group) from one session. scripts/bench_backlog.py measures the backlog bound itself.
BENCH_BOUNDS = ("--max-backlog-bytes", str(1 << 30), "--max-runs-per-session", "100000",
                "--max-groups", "100000")


def broker_argv(data: Path, endpoint: str, pub: str, *extra: str,
                profile: Path | None = None) -> list[str]:
    """``python -m broker`` on ipc endpoints, optionally under cProfile."""
    prefix = [sys.executable]
    if profile is not None:
        prefix += ["-m", "cProfile", "-o", str(profile)]
    return prefix + ["-m", "broker", "--data-dir", str(data), "--endpoint", endpoint,
                     "--pub-endpoint", pub, *extra]


def wait_for_bind(proc: Proc, sock: Path, timeout: float, step: float) -> str:
    """Poll until the broker's ipc socket file exists: ``bound``, ``exited`` or ``timeout``."""
    deadline = time.monotonic() + timeout
    while not sock.exists():
        if proc.popen.poll() is not None:
            return "exited"
        if time.monotonic() > deadline:
            return "timeout"
        time.sleep(step)
    return "bound"


def broker_stats(proc: Proc) -> dict:
    """The counters the broker logs when it stops (``broker_stopping``)."""
    try:
        for line in proc.log.read_text(errors="replace").splitlines():
            if '"broker_stopping"' in line:
                return json.loads(line)
    except (OSError, ValueError):
        pass
    return {}


# =====================================================================================
# /proc readers
# =====================================================================================

def _stat_cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def proc_cpu_s(pid: int) -> float | None:
    """User + system CPU seconds of a process (all threads), from /proc."""
    try:
        return _stat_cpu_s(pid)
    except (OSError, IndexError, ValueError):
        return None


def proc_run_s(pid: int) -> float | None:
    """Seconds on CPU of a process's live threads, to the nanosecond (schedstat).

    Finer than :func:`proc_cpu_s` (clock ticks) for short windows; threads that have
    already exited are not counted.
    """
    try:
        total = 0
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                total += int(f.read().split()[0])
        return total / 1e9
    except (OSError, IndexError, ValueError):
        return None


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
        out["cpu_s"] = _stat_cpu_s(pid)
    except (OSError, ValueError, IndexError):
        pass
    return out


# =====================================================================================
# One bench run's processes
# =====================================================================================

@dataclass
class Endpoints:
    router: str
    pub: str = ""
    data_dir: Path | None = None


class Harness:
    """Owns the tmp dir and every process of the run; ``close`` stops them by PID."""

    def __init__(self, keep: bool = False) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="icb-", dir="/tmp"))
        self.keep = keep
        self.procs: list[Proc] = []
        self._seq = 0
        self.env = dict(os.environ, PYTHONPATH=str(ROOT), HOME=str(self.dir),
                        PYTHONDONTWRITEBYTECODE="1")
        for var in ("ATOMIC_INTERCOM_GROUP", "PI_INTERCOM_GROUP"):
            self.env.pop(var, None)

    def _next(self, prefix: str) -> str:
        self._seq += 1
        return f"{prefix}{self._seq}"

    # -- starting -------------------------------------------------------------------------

    def spawn(self, name: str, argv: list[str], *, pipes: bool = True,
              tree: Path | None = None) -> Proc:
        """``tree``: another checkout to run in (cwd and PYTHONPATH), e.g. an older commit."""
        log = self.dir / f"{self._next(name + '-')}.log"
        env = self.env if tree is None else dict(self.env, PYTHONPATH=str(tree))
        proc = spawn(name, argv, env, log, pipes=pipes, cwd=tree or ROOT)
        self.procs.append(proc)
        return proc

    def spawn_role(self, role: str, **args: Any) -> Proc:
        """Re-execute bench.py as ``--role role`` (see :mod:`benchkit.roles`)."""
        return self.spawn(role, [sys.executable, str(BENCH_SCRIPT), "--role", role,
                                 "--role-args", json.dumps(args)])

    def start_forwarder(self) -> tuple[Proc, Endpoints]:
        ep = Endpoints(router=f"ipc://{self.dir}/{self._next('fwd')}.sock")
        proc = self.spawn_role("raw_forwarder", endpoint=ep.router)
        proc.expect("ready", 20)
        return proc, ep

    def start_broker(self, profile: Path | None = None, *extra: str,
                     bounds: tuple[str, ...] = BENCH_BOUNDS,
                     tree: Path | None = None) -> tuple[Proc, Endpoints]:
        """``python -m broker`` of this checkout, or of ``tree`` (imported from there)."""
        data = self.dir / self._next("b")
        data.mkdir()
        ep = Endpoints(router=f"ipc://{data}/broker.sock", pub=f"ipc://{data}/presence.sock",
                       data_dir=data)
        argv = broker_argv(data, ep.router, ep.pub, "--log-level", "info", *bounds,
                           *extra, profile=profile)
        proc = self.spawn("broker", argv, pipes=False, tree=tree)
        state = wait_for_bind(proc, Path(ep.router[len("ipc://"):]), 20, 0.02)
        if state == "exited":
            raise RoleError(f"broker exited with {proc.popen.returncode}{proc.tail_note()}")
        if state == "timeout":
            raise RoleError(f"broker did not bind {ep.router}{proc.tail_note()}")
        return proc, ep

    # -- stopping -------------------------------------------------------------------------

    def stop(self, proc: Proc, timeout: float = 10.0) -> int | None:
        rc = proc.stop(signal.SIGTERM, timeout)
        if proc in self.procs:
            self.procs.remove(proc)
        return rc

    def reap(self, procs: list[Proc], timeout: float = 10.0) -> None:
        """Let processes that are done exit by themselves; stop the rest."""
        deadline = time.monotonic() + timeout
        for proc in procs:
            try:
                proc.popen.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
            self.stop(proc)

    def close(self) -> None:
        for proc in reversed(list(self.procs)):
            try:
                self.stop(proc)
            except Exception as exc:   # keep stopping the others
                print(f"bench: could not stop {proc.name} pid {proc.pid}: {exc}", file=sys.stderr)
        if not self.keep:
            shutil.rmtree(self.dir, ignore_errors=True)


def measure_probe(h: Harness, role: str, **args: Any) -> dict:
    """Start one role, wait for it to be ready, and return its result."""
    proc = h.spawn_role(role, **args)
    try:
        proc.expect("ready", 60)
        return proc.expect("result", 120)
    finally:
        h.reap([proc], timeout=10)
