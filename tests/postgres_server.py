"""A real, throwaway PostgreSQL server for the tests (never a mock).

``initdb`` makes a cluster in a temporary directory and ``pg_ctl`` serves it on
127.0.0.1 at a free port, with its unix socket in the same directory; ``fsync`` stays
on. The server refuses to run as root, so a root test run starts it as the
``postgres`` user (``runuser -u postgres --``). The xdist workers of one run share one server
(:func:`shared_server`: the first starts it, about 1.5 s, the last stops it); each test
takes a schema of its own on it.

A missing ``initdb``/``pg_ctl``, or a root run without a ``postgres`` user, is a
failure with a message that says what to install, never a silent skip.
"""

from __future__ import annotations

import fcntl
import glob
import json
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import uuid
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterator

SEARCHED = ["/usr/local/bin", *sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True)]
SERVER_USER = "postgres"
START_TIMEOUT_S = 30


class PostgresMissing(RuntimeError):
    """The machine cannot run a PostgreSQL server for the tests; the text says why."""


def find_tool(name: str) -> str:
    """The path of PostgreSQL's ``name`` program. Raises PostgresMissing."""
    found = shutil.which(name) or next(
        (path for path in (os.path.join(d, name) for d in SEARCHED) if os.access(path, os.X_OK)), None)
    if found is None:
        raise PostgresMissing(
            f"PostgreSQL's {name} was not found on PATH nor in {', '.join(SEARCHED)}: the "
            "PostgreSQL store's tests need a real server (install PostgreSQL 15, e.g. "
            "'apt-get install postgresql', or put its bin directory on PATH)")
    return found


def _as_server_user() -> list[str]:
    """The command prefix that runs a program as the server's user (root only)."""
    if os.geteuid() != 0:
        return []
    try:
        pwd.getpwnam(SERVER_USER)
    except KeyError:
        raise PostgresMissing(f"the tests run as root and PostgreSQL refuses root, but there is "
                              f"no '{SERVER_USER}' user to run it as; create one "
                              f"('useradd --system {SERVER_USER}') or run the tests as "
                              "another user") from None
    runuser = shutil.which("runuser")
    if runuser is None:
        raise PostgresMissing("the tests run as root and need 'runuser' to start PostgreSQL "
                              f"as '{SERVER_USER}'; install util-linux")
    return [runuser, "-u", SERVER_USER, "--"]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@dataclass
class PostgresServer:
    root: Path            # the socket directory, holding the data directory and the log
    port: int
    prefix: list[str]     # how to run its programs (as the server's user)
    pg_ctl: str
    clean: list[str] = field(default_factory=list)   # bus schemas emptied for reuse

    @property
    def data(self) -> Path:
        return self.root / "data"

    def url(self, database: str = "postgres", schema: str | None = None) -> str:
        query = f"?schema={schema}" if schema else ""
        return f"postgresql://{SERVER_USER}@127.0.0.1:{self.port}/{database}{query}"

    def schema_url(self) -> str:
        """The URL of a new, empty bus schema (the broker creates it)."""
        return self.url(schema=f"t_{uuid.uuid4().hex[:16]}")

    def take_schema(self) -> str:
        """An empty bus schema's name: one given back before, else a new one (creating
        a schema costs a quarter of a second, emptying a used one a few milliseconds)."""
        return self.clean.pop() if self.clean else f"t_{uuid.uuid4().hex[:16]}"

    def give_back(self, schema: str) -> None:
        """Return ``schema`` for :meth:`take_schema`, emptied; one that cannot be emptied
        (never created, or a test holds a lock on it) is left as it is."""
        if self.empty(schema):
            self.clean.append(schema)

    def empty(self, schema: str, conn=None) -> bool:
        """Delete every row of the bus schema ``schema`` but its version, as a first
        broker found it (on ``conn``, else a connection of its own); False when that
        cannot be done."""
        import psycopg
        try:
            with (self.connect() if conn is None else _kept_open(conn)) as conn:
                conn.execute("SET lock_timeout = 2000")
                tables = [row[0] for row in conn.execute(
                    "SELECT tablename FROM pg_tables WHERE schemaname = %s AND tablename <> 'meta'",
                    [schema])]
                if not tables:
                    return False
                with conn.transaction():      # DELETE: TRUNCATE makes new files, slower here
                    for table in tables:
                        conn.execute(f"DELETE FROM {schema}.{table}")
                    conn.execute(f"DELETE FROM {schema}.meta WHERE key <> 'schema_version'")
        except psycopg.Error:
            return False
        return True

    def connect(self, database: str = "postgres"):
        import psycopg
        return psycopg.connect(self.url(database), autocommit=True)

    def start(self) -> None:
        options = (f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 "
                   "-c shared_buffers=16MB -c max_connections=100")
        self._ctl("start", "-w", "-t", str(START_TIMEOUT_S), "-l", str(self.root / "log"),
                  "-o", options)

    def stop(self, mode: str = "fast") -> None:
        """Stop the server (``immediate``: as a crash would, without a checkpoint)."""
        self._ctl("stop", "-w", "-m", mode)

    def running(self) -> bool:
        return subprocess.run([*self.prefix, self.pg_ctl, "status", "-D", str(self.data)],
                              capture_output=True).returncode == 0

    def destroy(self) -> None:
        if self.running():
            self.stop("immediate")
        shutil.rmtree(self.root, ignore_errors=True)

    def _ctl(self, *args: str) -> None:
        done = subprocess.run([*self.prefix, self.pg_ctl, *args[:1], "-D", str(self.data), *args[1:]],
                              capture_output=True, text=True, timeout=START_TIMEOUT_S + 10)
        if done.returncode != 0:
            log = (self.root / "log").read_text()[-2000:] if (self.root / "log").exists() else ""
            raise RuntimeError(f"pg_ctl {args[0]} failed: {done.stderr.strip()}\n{log}")


def start_server() -> PostgresServer:
    """A new cluster, serving. Raises PostgresMissing, RuntimeError when it cannot start."""
    initdb, pg_ctl = find_tool("initdb"), find_tool("pg_ctl")
    prefix = _as_server_user()
    root = Path(tempfile.mkdtemp(prefix="pg-", dir="/tmp"))
    if prefix:
        shutil.chown(root, SERVER_USER, SERVER_USER)
    done = subprocess.run([*prefix, initdb, "-D", str(root / "data"), "-A", "trust", "-U", SERVER_USER,
                           "-E", "UTF8", "--locale=C", "--no-sync"],
                          capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        shutil.rmtree(root, ignore_errors=True)
        raise RuntimeError(f"initdb failed: {done.stderr.strip()}")
    for _ in range(5):          # a free port may be taken between the probe and the start
        server = PostgresServer(root, free_port(), prefix, pg_ctl)
        try:
            server.start()
            return server
        except RuntimeError as exc:
            problem = exc
    shutil.rmtree(root, ignore_errors=True)
    raise problem


@contextmanager
def shared_server(directory: Path) -> Iterator[PostgresServer]:
    """The server the processes using ``directory`` share: started by the first, stopped
    by the last to leave (a file lock and a list of users in ``directory``)."""
    state = directory / "postgres.json"
    with _locked(directory / "postgres.lock"):
        if state.exists():
            shared = json.loads(state.read_text())
            server = PostgresServer(**shared["server"])
        else:
            server, shared = start_server(), {"users": []}
            shared["server"] = {k: v for k, v in asdict(server).items() if k != "clean"}
            shared["server"]["root"] = str(server.root)
        server.root = Path(server.root)
        shared["users"].append(os.getpid())
        state.write_text(json.dumps(shared))
    try:
        yield server
    finally:
        with _locked(directory / "postgres.lock"):
            shared = json.loads(state.read_text())
            shared["users"].remove(os.getpid())
            if shared["users"]:
                state.write_text(json.dumps(shared))
            else:
                server.destroy()
                state.unlink()


@contextmanager
def _kept_open(conn):
    yield conn


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
