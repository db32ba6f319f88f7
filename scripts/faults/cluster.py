"""The system under test: PostgreSQL on a host of its own, brokers on theirs.

What it owns: the PostgreSQL cluster (``initdb`` and ``pg_ctl`` as the ``postgres``
user, as tests/postgres_server.py does, listening on its host's address with trust
for the run's subnet, ``fsync`` on), the CURVE key directory every broker and client
shares, and every broker process (``python3 -m broker`` inside its host's namespace).

Invariants:

- Every process it starts is known by its own PID and ended by that PID; PostgreSQL's
  postmaster by the PID in its ``postmaster.pid``. :meth:`Cluster.close` ends all of
  them and is safe to call twice.
- A broker counts as started once its log says ``broker_started`` (its own answer,
  with its broker id); a broker restarted keeps its data directory and endpoint.
- The agents a broker is given have ``invoke = true`` in its data directory
  (``agents/<agent>/config/tools.toml``) before it starts: the broker reads them then.
- Each round of the harness gets a schema of its own (``?schema=``) on the one server,
  so rounds do not see each other's rows.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.postgres_server import SERVER_USER, _as_server_user, find_tool

from .net import Host

ROOT = Path(__file__).resolve().parents[2]
PG_PORT = 5432
ROUTER_PORT = 5555
PUB_PORT = 5556
LEASE_S = 12
LIVENESS_S = 3
FAKETIME_LIB = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"
START_TIMEOUT_S = 40


def child_env(home: Path, extra: dict | None = None) -> dict:
    env = dict(os.environ, PYTHONPATH=str(ROOT), HOME=str(home), PYTHONUNBUFFERED="1")
    env.update(extra or {})
    return env


def wait_for(condition, timeout: float, what: str, step: float = 0.05):
    """Poll ``condition`` until truthy; raises TimeoutError naming ``what``."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"not within {timeout:g} s: {what}")
        time.sleep(step)        # polling for an answer (a file, a process), not a settle


@dataclass
class Postgres:
    host: Host
    root: Path
    prefix: list[str] = field(default_factory=list)

    @property
    def data(self) -> Path:
        return self.root / "data"

    def url(self, schema: str) -> str:
        return f"postgresql://{SERVER_USER}@{self.host.address}:{PG_PORT}/postgres?schema={schema}"

    def init(self) -> None:
        """initdb, trust for the run's subnet. Raises RuntimeError."""
        self.prefix = _as_server_user()
        self.root.mkdir(parents=True)
        if self.prefix:
            shutil.chown(self.root, SERVER_USER, SERVER_USER)
        done = subprocess.run([*self.prefix, find_tool("initdb"), "-D", str(self.data), "-A", "trust",
                               "-U", SERVER_USER, "-E", "UTF8", "--locale=C", "--no-sync"],
                              capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            raise RuntimeError(f"initdb failed: {done.stderr.strip()}")
        subnet = self.host.address.rsplit(".", 1)[0] + ".0/24"
        with open(self.data / "pg_hba.conf", "a") as hba:
            hba.write(f"host all all {subnet} trust\n")

    def start(self) -> None:
        """pg_ctl start inside the host's namespace, waiting until it accepts.
        Raises RuntimeError."""
        options = (f"-p {PG_PORT} -k {self.root} -c listen_addresses={self.host.address} "
                   "-c fsync=on -c shared_buffers=16MB -c max_connections=100")
        done = subprocess.run([*self.host.prefix(), *self.prefix, find_tool("pg_ctl"), "start", "-w",
                               "-t", "60", "-D", str(self.data), "-l", str(self.root / "log"),
                               "-o", options], capture_output=True, text=True, timeout=90)
        if done.returncode != 0:
            raise RuntimeError(f"pg_ctl start failed: {done.stderr.strip()}")

    def postmaster_pid(self) -> int | None:
        try:
            return int((self.data / "postmaster.pid").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None

    def children(self, pid: int) -> list[int]:
        """The postmaster's child processes (its backends), by their PIDs."""
        try:
            text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
        except OSError:
            return []
        return [int(p) for p in text.split()]

    def kill9_and_restart(self) -> float:
        """kill -9 the postmaster, wait until its backends are gone (they leave when
        they notice), start it again on the same data; the seconds it was down."""
        pid = self.postmaster_pid()
        backends = self.children(pid) if pid else []
        began = time.monotonic()
        if pid:
            os.kill(pid, signal.SIGKILL)
        # Gone, not a zombie: the server's next start takes a zombie's PID in its
        # postmaster.pid for a running server (an orphan waits for init to reap it).
        wait_for(lambda: not any(_exists(p) for p in [pid, *backends] if p), 30,
                 "the postmaster and its backends gone")
        self.start()
        return time.monotonic() - began

    def stop(self) -> None:
        pid = self.postmaster_pid()
        if pid and _alive(pid):
            subprocess.run([*self.prefix, find_tool("pg_ctl"), "stop", "-w", "-m", "immediate",
                            "-D", str(self.data)], capture_output=True, timeout=60)
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)


def _exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:   # a zombie child of ours counts as gone
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][0] != "Z"
    except (OSError, IndexError):
        return False


@dataclass
class Broker:
    name: str                     # "b1"
    host: Host
    data_dir: Path
    db: str
    keys: Path
    faketime: str | None = None   # FAKETIME value ("+5s"): this broker's clock is skewed
    extra: list[str] = field(default_factory=list)    # windows: lease, liveness, grace
    agents: tuple[str, ...] = ()  # agents allowed to invoke (the workload's invoke role)
    proc: subprocess.Popen | None = None
    broker_id: str | None = None
    ids: list[str] = field(default_factory=list)      # its broker id at every start
    log: Path | None = None
    starts: int = 0

    @property
    def endpoint(self) -> str:
        return f"tcp://{self.host.address}:{ROUTER_PORT}"

    def start(self) -> None:
        """Start (or restart on the same data dir and endpoint) and wait for its
        ``broker_started`` line. Raises RuntimeError."""
        self.data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        for agent in self.agents:
            config = self.data_dir / "agents" / agent / "config"
            config.mkdir(parents=True, exist_ok=True)
            (config / "tools.toml").write_text("invoke = true\n")
        self.starts += 1
        self.log = self.data_dir / f"broker-{self.starts}.log"
        if self.faketime and not Path(FAKETIME_LIB).exists():
            raise RuntimeError(f"clock skew needs {FAKETIME_LIB}: apt-get install libfaketime")
        skew = ["env", f"LD_PRELOAD={FAKETIME_LIB}", f"FAKETIME={self.faketime}",
                "FAKETIME_DONT_FAKE_MONOTONIC=1"] if self.faketime else []
        command = [*self.host.prefix(), *skew, sys.executable, "-m", "broker",
                   "--data-dir", str(self.data_dir), "--db", self.db,
                   "--endpoint", self.endpoint, "--pub-endpoint",
                   f"tcp://{self.host.address}:{PUB_PORT}", "--advertise", self.endpoint,
                   "--curve", str(self.keys),
                   *(self.extra or ["--broker-lease-s", str(LEASE_S), "--liveness-s", str(LIVENESS_S)])]
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(command, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
                                         env=child_env(self.data_dir))
        try:
            started = wait_for(self._started, START_TIMEOUT_S, f"broker {self.name} started")
        except TimeoutError:
            raise RuntimeError(f"broker {self.name} did not start: {self.log.read_text()[-1500:]}")
        self.broker_id = started["broker_id"]
        self.ids.append(self.broker_id)

    def _started(self) -> dict | None:
        if self.proc.poll() is not None:
            raise RuntimeError(f"broker {self.name} exited {self.proc.returncode}: "
                               f"{self.log.read_text()[-1500:]}")
        for line in self.log.read_text(errors="replace").splitlines():
            if '"broker_started"' in line:
                return json.loads(line)
        return None

    def linked(self) -> set[str]:
        """The broker ids its log says it linked with (both ways) since its start."""
        found = set()
        for line in self.log.read_text(errors="replace").splitlines():
            if '"broker_linked"' in line:
                found.add(json.loads(line).get("peer"))
        return found

    @property
    def pid(self) -> int:
        return self.proc.pid

    def signal(self, sig: int) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, sig)

    def kill(self) -> None:
        """kill -9 and reap."""
        self.signal(signal.SIGCONT)      # a paused broker must not stay a stopped zombie-to-be
        self.signal(signal.SIGKILL)
        if self.proc is not None:
            self.proc.wait(30)

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.signal(signal.SIGCONT)
        self.signal(signal.SIGTERM)
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.kill()


def make_keys(directory: Path) -> Path:
    """One CURVE key directory for every broker and the client ``alice``."""
    subprocess.run([sys.executable, "-m", "broker", "keys", "--dir", str(directory),
                    "--client", "alice"], cwd=ROOT, env=child_env(directory.parent),
                   check=True, capture_output=True, timeout=60)
    return directory
