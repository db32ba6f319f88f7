"""Helpers for the integration tests: real broker processes, real ipc sockets, real SQLite.

Waiting rules: nothing here sleeps to let things settle. Readiness is a reply to a
probe frame; in-band presence is synchronised with :func:`drain_events` (a request
round trip on the observer's own connection: the broker answers it only after
sending every event it owed that connection, and the client queues frames in order);
anything else is a loop on a reply or an event with a deadline.
"""

from __future__ import annotations

import importlib.util
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable

import msgpack
import pytest
import zmq

# Plain helper modules whose asserts should explain themselves like a test's do;
# registered here, before any test module imports them.
pytest.register_assert_rewrite("tests.integration.workflow_helpers")

ROOT = Path(__file__).resolve().parents[2]

# The shared helper lives in tests/conftest.py; load it by path so the two conftest
# modules (both called "conftest") cannot shadow each other.
_spec = importlib.util.spec_from_file_location("_intercom_root_conftest", ROOT / "tests" / "conftest.py")
_root = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = _root
_spec.loader.exec_module(_root)
start_broker = _root.start_broker
BrokerProcess = _root.BrokerProcess

CONNECT_TIMEOUT_S = 15.0
GROUP_ENV_VARS = ("ATOMIC_INTERCOM_GROUP", "PI_INTERCOM_GROUP")
PATH_ENV_VARS = ("INTERCOM_DATA_DIR", "INTERCOM_ENDPOINT", "INTERCOM_PUB_ENDPOINT")


def unique(prefix: str = "g") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def child_env(home: Path, **extra: str) -> dict[str, str]:
    """Environment for a child process: this checkout importable, a private HOME,
    no intercom variables inherited from whoever runs the tests."""
    env = {k: v for k, v in os.environ.items() if k not in GROUP_ENV_VARS + PATH_ENV_VARS}
    env.update(PYTHONPATH=str(ROOT), HOME=str(home), PYTHONUNBUFFERED="1")
    env.update(extra)
    return env


def make_tmp() -> Path:
    """A short directory under /tmp: ipc paths must stay under ~100 characters."""
    return Path(tempfile.mkdtemp(prefix="ic-", dir="/tmp"))


# -- waiting on the broker -------------------------------------------------------------

def probe_reply(endpoint: str, frames: list[bytes], timeout: float = 5.0) -> list[dict]:
    """Send ``frames`` as one message on a fresh DEALER; return the envelopes of the
    first reply frame, or [] when none arrives within ``timeout``."""
    ctx = zmq.Context.instance()
    sock = ctx.socket(zmq.DEALER)
    sock.linger = 0
    try:
        sock.connect(endpoint)
        sock.send_multipart(frames)
        if not sock.poll(timeout * 1000):
            return []
        value = msgpack.unpackb(sock.recv(), raw=False)
        return value if isinstance(value, list) else [value]
    finally:
        sock.close()


def wait_ready(endpoint: str, proc: subprocess.Popen | None = None, timeout: float = 15.0) -> None:
    """Return once a broker answers on ``endpoint`` (a malformed frame gets a reply)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"broker exited with {proc.returncode} before it was ready")
        if probe_reply(endpoint, [b"\xc1"], timeout=0.5):
            return
    raise AssertionError(f"no broker answered on {endpoint} within {timeout:g} s")


def stop_process(proc: subprocess.Popen, sig: int, timeout: float = 10.0) -> int:
    """Signal one process by its PID and wait for it; SIGKILL it if it hangs."""
    if proc.poll() is None:
        os.kill(proc.pid, sig)
    try:
        return proc.wait(timeout)
    except subprocess.TimeoutExpired:
        os.kill(proc.pid, 9)
        proc.wait(timeout)
        raise AssertionError(f"process {proc.pid} ignored signal {sig} for {timeout:g} s") from None


# -- sessions ------------------------------------------------------------------------

class Bus:
    """Opens sessions on one broker and closes them all at teardown.

    ``connect`` puts a session in this test's own group unless ``group`` is given
    (pass ``group=None`` for no explicit group), so tests sharing a broker never see
    each other's sessions.
    """

    def __init__(self, broker: BrokerProcess) -> None:
        self.broker = broker
        self.endpoint = broker.endpoint
        self.group = unique("t")
        self.opened: list = []

    def connect(self, name: str, **kwargs: Any):
        from client import Client

        kwargs.setdefault("group", self.group)
        kwargs.setdefault("timeout", CONNECT_TIMEOUT_S)
        session = Client.connect(name=name, endpoint=self.endpoint, **kwargs)
        self.opened.append(session)
        return session

    def connect_all(self, *specs: str | tuple[str, dict]) -> list:
        """Connect several sessions concurrently; each spec is a name or (name, kwargs).

        Results are in spec order; connection order is not defined.
        """
        def one(spec):
            name, kwargs = (spec, {}) if isinstance(spec, str) else spec
            return self.connect(name, **kwargs)

        with ThreadPoolExecutor(max_workers=len(specs)) as pool:
            return list(pool.map(one, specs))

    def close_all(self) -> None:
        for session in self.opened:
            session.close()


def drain_events(session) -> list[dict]:
    """Every in-band event the broker has sent ``session`` so far, in order.

    A status round trip on the session's own connection first: the broker answers
    it only after every earlier event for this connection, and the client queues
    frames in arrival order, so afterwards the event queue holds all of them.
    """
    result = session.intercom(action="status")
    assert result["ok"] and result["connected"], result    # the broker's answer, not the client's
    events = []
    while (event := session.next_event(0)) is not None:
        events.append(event)
    return events


def summary(events: list[dict]) -> list[tuple[str, str]]:
    """(event, session name) pairs, for readable comparisons."""
    return [(e["event"], e["session"]["name"]) for e in events]


def wait_for_event(session, predicate: Callable[[dict], bool], timeout: float) -> tuple[dict, list[dict]]:
    """Wait for the first event matching ``predicate``; return it and the ones before."""
    deadline = time.monotonic() + timeout
    seen: list[dict] = []
    while (left := deadline - time.monotonic()) > 0:
        event = session.next_event(left)
        if event is None:
            break
        if predicate(event):
            return event, seen
        seen.append(event)
    raise AssertionError(f"no matching event within {timeout:g} s; saw {seen}")


# -- child processes whose output is read line by line --------------------------------

class LineReader:
    """Reads a child's stdout on a thread so tests can wait for lines with a timeout."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self.proc = proc
        self.lines: queue.Queue[str | None] = queue.Queue()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        for line in self.proc.stdout:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def next_line(self, timeout: float) -> str | None:
        try:
            return self.lines.get(timeout=timeout)
        except queue.Empty:
            return None

    def wait_line(self, predicate: Callable[[str], bool], timeout: float) -> tuple[str, list[str]]:
        deadline = time.monotonic() + timeout
        seen: list[str] = []
        while (left := deadline - time.monotonic()) > 0:
            line = self.next_line(left)
            if line is None:
                break
            if predicate(line):
                return line, seen
            seen.append(line)
        raise AssertionError(f"no matching line within {timeout:g} s; saw {seen}")


# -- fixtures --------------------------------------------------------------------------

@pytest.fixture
def store_kind() -> str:
    """The store a test's brokers use; tests marked on_both_stores (see multi_broker.py)
    are parametrized over sqlite and postgres."""
    return "sqlite"


@pytest.fixture(autouse=True)
def isolated_client_env(monkeypatch, tmp_path_factory):
    """Sessions opened in this process read no real config file and no group variable."""
    for var in GROUP_ENV_VARS + PATH_ENV_VARS:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path_factory.mktemp("home")))


def module_broker(prepare: Callable[[Path], None] | None = None, *extra: str):
    """A broker in a fresh short dir, ready; ``prepare(dir)`` runs before it starts
    (to write config it reads at start); ``extra``: its flags. A generator: yields it,
    then stops it."""
    path = make_tmp()
    if prepare is not None:
        prepare(path)
    proc = start_broker(path, *extra)
    try:
        wait_ready(proc.endpoint, proc.proc)
        yield proc
    finally:
        proc.stop()
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def home():
    """A short directory of the test's own (a HOME, a data directory): ipc paths and
    the MCP server's hook socket go beside what it holds."""
    path = make_tmp()
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="module")
def shared_broker():
    """One broker for a whole module; tests isolate themselves with their own groups."""
    yield from module_broker()


def module_connect_broker():
    """A module-scoped ``broker`` fixture for a test module whose tests only open
    sessions with ``connect`` (tests/conftest.py closes them after each test) and
    work on workflow runs of their own: they share one broker process instead of
    starting one each. Use as ``broker = module_connect_broker()`` in the module."""
    @pytest.fixture(scope="module")
    def broker():
        for proc in module_broker():
            yield proc
            assert proc.proc.poll() is None, "the module's broker died during its tests"
    return broker


@pytest.fixture
def bus(shared_broker):
    handle = Bus(shared_broker)
    yield handle
    handle.close_all()
    assert shared_broker.proc.poll() is None, "the shared broker died during the test"
