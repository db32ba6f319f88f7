"""A client at the default endpoint starts the broker it needs: real processes only.

Each test has its own data directory ($INTERCOM_DATA_DIR) and HOME; teardown kills
any broker started in it, by the pid file and the pids its log names.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import threading
import time
from pathlib import Path

import pytest

from client import Client, ConnectError
from client.autostart import IDLE_EXIT_S, LOG_FILE, PID_FILE

from .conftest import make_tmp


def started_pids(data_dir: Path) -> list[int]:
    """The pid of every broker that logged ``broker_started`` in ``data_dir``."""
    try:
        lines = (data_dir / LOG_FILE).read_text().splitlines()
    except FileNotFoundError:
        return []
    events = [json.loads(line) for line in lines if line.startswith("{")]
    return [e["pid"] for e in events if e.get("event") == "broker_started"]


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def wait_gone(pid: int, timeout: float) -> float:
    """Seconds until process ``pid`` has exited; fails after ``timeout``."""
    started = time.monotonic()
    while alive(pid):
        assert time.monotonic() - started < timeout, f"broker {pid} still running"
        time.sleep(0.05)          # polling a process we do not own for its exit
    return time.monotonic() - started


@pytest.fixture
def data_dir(monkeypatch):
    path = make_tmp()
    monkeypatch.setenv("INTERCOM_DATA_DIR", str(path))
    yield path
    pids = set(started_pids(path))
    try:
        pids.add(int((path / PID_FILE).read_text()))
    except (FileNotFoundError, ValueError):
        pass
    for pid in pids:
        try:
            if b"broker" in Path(f"/proc/{pid}/cmdline").read_bytes():
                os.kill(pid, signal.SIGKILL)
        except (FileNotFoundError, ProcessLookupError):
            pass
    shutil.rmtree(path, ignore_errors=True)


def test_a_client_at_the_default_endpoint_starts_the_missing_broker_detached(data_dir):
    with Client.connect(name="first", timeout=15) as session:
        assert session.intercom(action="status")["connected"] is True
        pid = int((data_dir / PID_FILE).read_text())
        assert started_pids(data_dir) == [pid] and alive(pid)
        assert os.getsid(pid) == pid != os.getsid(0)       # a session of its own
        assert session.endpoint == f"ipc://{data_dir}/broker.sock"


def record_starts(data_dir: Path) -> Path:
    """Configure ``brokerCommand``/``brokerArgs`` as a wrapper that appends its
    arguments to the returned file, one line per start, and runs the broker."""
    wrapper = data_dir / "wrapper.sh"
    wrapper.write_text('#!/bin/sh\necho "$@" >> "$(dirname "$0")/called"\nexec "$@"\n')
    config = Path(os.environ["HOME"]) / ".atomic/agent/intercom/config.json"
    config.parent.mkdir(parents=True)
    config.write_text(json.dumps({"brokerCommand": "/bin/sh",
                                  "brokerArgs": [str(wrapper), sys.executable]}))
    return data_dir / "called"


def test_four_concurrent_first_clients_start_exactly_one_broker(data_dir):
    called = record_starts(data_dir)     # a start refused by the broker's own lock counts too
    barrier = threading.Barrier(4)
    sessions, errors = [], []

    def first(n: int) -> None:
        barrier.wait()
        try:
            sessions.append(Client.connect(name=f"c{n}", timeout=20))
        except ConnectError as exc:
            errors.append(exc)

    threads = [threading.Thread(target=first, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    try:
        assert errors == [] and len(sessions) == 4
        assert len(called.read_text().splitlines()) == 1 and len(started_pids(data_dir)) == 1
        assert len({s.welcome["brokerId"] for s in sessions}) == 1
    finally:
        for session in sessions:
            session.close()


def test_a_started_broker_exits_by_itself_seconds_after_its_last_session_leaves(data_dir):
    first = Client.connect(name="first", timeout=15)
    second = Client.connect(name="second", timeout=15)
    pid = int((data_dir / PID_FILE).read_text())
    first.close()
    assert second.intercom(action="status")["connected"] is True   # one session keeps it
    second.close()
    waited = wait_gone(pid, IDLE_EXIT_S + 10)
    assert IDLE_EXIT_S - 1 <= waited, f"exited after {waited:.1f} s"
    assert not (data_dir / PID_FILE).exists()


def test_auto_start_false_keeps_the_fast_no_broker_failure(data_dir):
    started = time.monotonic()
    with pytest.raises(ConnectError) as refused:
        Client.connect(name="lonely", timeout=15, auto_start=False)
    assert refused.value.code == "no_broker" and time.monotonic() - started < 2.0
    assert not (data_dir / LOG_FILE).exists()


def test_an_explicit_endpoint_never_starts_a_broker(data_dir, monkeypatch):
    endpoint = f"ipc://{data_dir}/broker.sock"          # even the default one, named
    with pytest.raises(ConnectError) as refused:
        Client.connect(name="lonely", endpoint=endpoint, timeout=15)
    monkeypatch.setenv("INTERCOM_ENDPOINT", endpoint)
    with pytest.raises(ConnectError) as from_env:
        Client.connect(name="lonely", timeout=15)
    assert refused.value.code == from_env.value.code == "no_broker"
    assert not (data_dir / LOG_FILE).exists()


def test_the_configured_broker_command_and_args_start_the_broker(data_dir):
    called = record_starts(data_dir)
    with Client.connect(name="configured", timeout=15) as session:
        assert session.intercom(action="status")["connected"] is True
    (line,) = called.read_text().splitlines()      # the args, then -m broker and its flags
    assert line.startswith(f"{sys.executable} -m broker --data-dir {data_dir} ")
