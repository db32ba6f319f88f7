"""Shared fixtures: a real broker process on ipc sockets in a short tmp dir."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# The windows every test broker runs with (flags of python -m broker), shorter than the
# defaults (3 s, 10 s) so that what waits on them waits less; a test passes its own
# flag to override one. The adoption grace stays well above the liveness window plus
# a client's failover step, as the defaults are: runs still follow their host.
LIVENESS_S = 1.5
ADOPT_GRACE_S = 5.0
TEST_WINDOWS = {"--liveness-s": str(LIVENESS_S), "--adopt-grace-s": str(ADOPT_GRACE_S)}

# The tests start hundreds of broker and client processes. With bytecode writing off
# (PYTHONDONTWRITEBYTECODE) each one compiled every module it imports from source, a
# quarter of a broker's start-up CPU; they share one bytecode cache outside the tree
# instead (the xdist workers and every child inherit this environment).
if os.environ.pop("PYTHONDONTWRITEBYTECODE", None) is not None:
    os.environ.setdefault("PYTHONPYCACHEPREFIX",
                          str(Path(tempfile.gettempdir()) / f"intercom-pycache-{os.getuid()}"))


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session):
    """In the xdist controller, before its workers start: fill the bytecode cache once
    (tests/bytecode_warmup.py) so that the workers do not each compile everything.
    Only for the whole suite: a run of some files would pay for collecting all."""
    config = session.config
    if not hasattr(config, "workerinput") and getattr(config.option, "numprocesses", None) \
            and config.args_source is pytest.Config.ArgsSource.TESTPATHS:
        from tests.bytecode_warmup import warm
        warm(ROOT)


def pytest_xdist_auto_num_workers(config) -> int:
    """``-n auto`` (the suite's default): three workers per core. Most of an integration
    test's time is spent waiting on a broker process, a client's timeout or a child's
    start, and with two per core a fifth of the CPU sat idle in the run's second half;
    the CPU-bound tests are scheduled first (below), while every worker has work. With
    the bytecode cache warmed first, a worker costs little more than its collection
    (3 s of CPU). Measured here, whole runs: 4 workers 189 s, 5 184 s, 6 168-175 s,
    8 187 s."""
    return 3 * (os.cpu_count() or 1)


def pytest_collection_modifyitems(items):
    """Long tests first: xdist hands tests out in this order, and a long one handed
    out last keeps one worker busy after the others ran out of work. Property tests
    (hypothesis) run for seconds of CPU and integration tests wait on processes; unit
    tests are short and fill the gaps at the end. The fault tests (tens of seconds
    each, on network namespaces) go before all. The sort is stable, so each file's
    tests keep their order."""
    def rank(item) -> int:
        if "faults" in item.path.parts:
            return -1
        if getattr(getattr(item, "obj", None), "is_hypothesis_test", False):
            return 0
        return 1 if "integration" in item.path.parts else 2

    items.sort(key=rank)


@dataclass
class BrokerProcess:
    proc: subprocess.Popen
    data_dir: Path
    endpoint: str
    pub_endpoint: str
    db: Path
    log: Path

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 10.0) -> int:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, sig)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.kill(self.proc.pid, signal.SIGKILL)
            return self.proc.wait(timeout)

    def kill(self) -> None:
        self.stop(signal.SIGKILL)


def wait_listening(endpoint: str, proc: subprocess.Popen, timeout: float = 20.0) -> None:
    """Return once something accepts connections at ``endpoint`` (the broker bound its
    socket), or the process has exited (tests of refused starts read its exit code)."""
    from client.reach import nobody_listens

    deadline = time.monotonic() + timeout
    while nobody_listens(endpoint, grace_s=0.0) is not None:
        if proc.poll() is not None:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"no broker bound {endpoint} within {timeout:g} s")
        time.sleep(0.02)          # polling for the socket to appear, not a settle


def start_broker(data_dir: Path, *extra: str, env: dict | None = None,
                 wait: bool = True) -> BrokerProcess:
    """Start ``python -m broker`` on ipc sockets inside ``data_dir`` with the test
    windows (:data:`TEST_WINDOWS`, unless ``extra`` sets one); with ``wait``,
    return once its ROUTER socket accepts connections (or it exited): a client that
    finds no socket fails at once rather than waiting for a broker to appear."""
    windows = [arg for flag, value in TEST_WINDOWS.items() if flag not in extra
               for arg in (flag, value)]
    endpoint = f"ipc://{data_dir}/broker.sock"
    pub = f"ipc://{data_dir}/presence.sock"
    log = data_dir / f"broker-{len(list(data_dir.glob('broker-*.log')))}.log"
    full_env = dict(os.environ, PYTHONPATH=str(ROOT), HOME=str(data_dir))
    full_env.update(env or {})
    with open(log, "wb") as log_file:
        proc = subprocess.Popen(
            [sys.executable, "-m", "broker", "--data-dir", str(data_dir), "--endpoint", endpoint,
             "--pub-endpoint", pub, *windows, *extra],
            cwd=ROOT, stdout=log_file, stderr=subprocess.STDOUT, env=full_env)
    if wait:
        try:
            wait_listening(endpoint, proc)
        except BaseException:
            proc.kill()           # a broker that never bound is not left running
            proc.wait(10)
            raise
    return BrokerProcess(proc, data_dir, endpoint, pub, data_dir / "intercom.db", log)


def _serving_postgres():
    """A new PostgreSQL server (see tests.postgres_server); a machine that cannot run one
    fails the test that asked, saying what is missing."""
    from tests.postgres_server import PostgresMissing, start_server
    try:
        return start_server()
    except PostgresMissing as exc:
        pytest.fail(str(exc), pytrace=False)


@pytest.fixture(scope="session")
def postgres_server(tmp_path_factory, worker_id):
    """The run's throwaway PostgreSQL server, shared by its xdist workers; each test
    takes a schema of its own (``schema_url()``, ``take_schema()``). Never stop it:
    tests that do take ``own_postgres``."""
    if worker_id == "master":
        server = _serving_postgres()
        yield server
        server.destroy()
        return
    from tests.postgres_server import PostgresMissing, shared_server
    try:
        with shared_server(tmp_path_factory.getbasetemp().parent) as server:
            yield server
    except PostgresMissing as exc:
        pytest.fail(str(exc), pytrace=False)


@pytest.fixture
def own_postgres():
    """A PostgreSQL server for this test alone, which it may stop, kill and restart."""
    server = _serving_postgres()
    yield server
    server.destroy()


@pytest.fixture
def short_tmp():
    """A short directory under /tmp: ipc paths must stay under ~100 characters."""
    path = Path(tempfile.mkdtemp(prefix="ic-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def broker(short_tmp):
    """A running broker process; stopped by its own PID afterwards."""
    proc = start_broker(short_tmp)
    yield proc
    proc.stop()


@pytest.fixture
def connect(broker):
    """Open sessions on the fixture broker; all are closed afterwards."""
    from client import Client

    opened = []

    def _connect(name: str, **kwargs):
        session = Client.connect(name=name, endpoint=broker.endpoint, timeout=15, **kwargs)
        opened.append(session)
        return session

    yield _connect
    for session in opened:
        session.close()
