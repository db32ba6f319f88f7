"""Store and data-directory faults through real broker processes and real SQLite files.

At start, a database that is locked, read-only, corrupt, truncated or from a newer
broker, and a data directory that cannot be created or written, each end the broker
with one ``broker: ...`` line on stderr naming the file and what to do, exit status
2, quickly, and no socket served. While serving, a write lock held by another
process makes durable sends answer ``store_unavailable`` within about a second while
live traffic goes on; once the lock goes the broker carries on by itself and keeps
what it was told to keep meanwhile.

Read-only files need a process the file mode applies to: as root, the broker runs
without CAP_DAC_OVERRIDE (``setpriv``); without either, those cases are skipped.
Waiting rules: every wait is on a process exit, a reply, or a condition with a deadline.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import apsw
import pytest

from broker.core.kernel.records import RunSaved
from broker.store.sqlite import SqliteStore
from schemas.errors import error_text
from schemas.protocol import envelope
from tests.conftest import start_broker
from tests.integration.conftest import child_env, make_tmp, wait_ready
from tests.integration.workflow_helpers import (assert_refused, granted, new_run_id, ok, path,
                                                queue, run_row, send, stage_row)

START_BOUND_S = 4.0          # python start-up (~0.4 s) + at most one 1 s busy wait, on a busy VM
FAST_ANSWER_S = 3.0          # a durable send refused while the file is locked
STAGES = [{"name": "plan"}]

NO_DAC = ["setpriv", "--inh-caps=-dac_override,-dac_read_search",
          "--bounding-set=-dac_override,-dac_read_search"]


@pytest.fixture
def unprivileged() -> list[str]:
    """A command prefix under which file modes bind the broker; skips when there is none."""
    if os.geteuid() != 0:
        return []
    if not shutil.which("setpriv"):
        pytest.skip("running as root without setpriv: file modes do not bind this user")
    return NO_DAC


@pytest.fixture
def tmp():
    path = make_tmp()
    yield path
    shutil.rmtree(path, ignore_errors=True)


def start_once(data_dir: Path, *extra: str, prefix: list[str] = ()) -> tuple[int, str, float]:
    """Run ``python -m broker`` on ``data_dir`` until it exits: (status, stderr, seconds)."""
    command = [*prefix, sys.executable, "-m", "broker", "--data-dir", str(data_dir),
               "--endpoint", f"ipc://{data_dir}/broker.sock",
               "--pub-endpoint", f"ipc://{data_dir}/presence.sock", *extra]
    started = time.monotonic()
    done = subprocess.run(command, capture_output=True, text=True, timeout=30,
                          env=child_env(data_dir), cwd=Path(__file__).resolve().parents[2])
    return done.returncode, done.stderr, time.monotonic() - started


def assert_refused_start(result: tuple[int, str, float], *names: str) -> str:
    """Exit 2 with exactly one ``broker: `` line naming each of ``names``, in time."""
    status, stderr, seconds = result
    lines = stderr.splitlines()
    assert (status, len(lines)) == (2, 1), (status, stderr)
    assert lines[0].startswith("broker: "), stderr
    assert all(name in lines[0] for name in names), (names, stderr)
    assert seconds < START_BOUND_S, (seconds, stderr)
    return lines[0]


def assert_served_nothing(data_dir: Path) -> None:
    assert not (data_dir / "broker.sock").exists() and not (data_dir / "presence.sock").exists()


def valid_database(db: Path) -> None:
    """A database a broker wrote, big enough that a cut lands inside its tables."""
    store = SqliteStore(db)
    store.apply([RunSaved(f"run-{n}", {"runId": f"run-{n}", "pad": "x" * 2000}) for n in range(60)])
    store.close()


class Holder:
    """Another process's lock on a database file, held by a connection of this one."""

    def __init__(self, db: Path) -> None:
        self.conn = apsw.Connection(str(db))
        # The broker's own short transactions (its once-a-second read of the brokers'
        # rows, a lease renewal) may hold the file a moment: wait for them to end.
        self.conn.set_busy_timeout(5000)
        self.held = False

    def hold(self, mode: str = "EXCLUSIVE") -> None:
        self.conn.execute(f"BEGIN {mode}")
        self.conn.execute("INSERT INTO meta (key, value) VALUES ('held', 'yes') "
                          "ON CONFLICT (key) DO UPDATE SET value = excluded.value")
        self.held = True

    def release(self) -> None:
        if self.held:
            self.conn.execute("ROLLBACK")
            self.held = False

    def close(self) -> None:
        self.release()
        self.conn.close()


# -- at start -------------------------------------------------------------------------------

@pytest.mark.timeout(60)
def test_a_database_of_garbage_bytes_is_refused_in_one_line(tmp):
    db = tmp / "intercom.db"
    db.write_bytes(os.urandom(8192))
    line = assert_refused_start(start_once(tmp), str(db))
    assert "corrupt" in line and "move it aside" in line, line
    assert_served_nothing(tmp)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("keep", [0.5, 0.1])
def test_a_truncated_database_is_refused_in_one_line(tmp, keep):
    db = tmp / "intercom.db"
    valid_database(db)
    data = db.read_bytes()
    db.write_bytes(data[:int(len(data) * keep)])
    line = assert_refused_start(start_once(tmp), str(db))
    assert "corrupt or truncated" in line, line
    assert_served_nothing(tmp)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("journal, lock", [("wal", "EXCLUSIVE"), ("wal", "IMMEDIATE"),
                                           ("delete", "EXCLUSIVE"), ("delete", "IMMEDIATE")])
def test_a_database_locked_by_another_process_is_refused_fast_in_one_line(tmp, journal, lock):
    db = tmp / "intercom.db"
    valid_database(db)
    if journal == "delete":   # a rollback-journal file, as another tool may have left it
        conn = apsw.Connection(str(db))
        conn.execute("PRAGMA journal_mode=DELETE")
        conn.close()
    holder = Holder(db)
    try:
        holder.hold(lock)
        line = assert_refused_start(start_once(tmp), str(db))
    finally:
        holder.close()
    assert "locked by another process" in line, line
    assert_served_nothing(tmp)


@pytest.mark.timeout(60)
def test_a_database_from_a_newer_broker_is_refused_in_one_line(tmp):
    db = tmp / "intercom.db"
    valid_database(db)
    conn = apsw.Connection(str(db))
    conn.execute("UPDATE meta SET value = '99' WHERE key = 'schema_version'")
    conn.close()
    line = assert_refused_start(start_once(tmp), str(db))
    assert "schema version 99" in line and "newer broker" in line, line


@pytest.mark.timeout(60)
def test_a_read_only_database_is_refused_in_one_line(tmp, unprivileged):
    db = tmp / "intercom.db"
    valid_database(db)
    db.chmod(0o444)
    line = assert_refused_start(start_once(tmp, prefix=unprivileged), str(db))
    assert "read-only" in line and "writable" in line, line
    assert_served_nothing(tmp)


@pytest.mark.timeout(60)
def test_a_data_directory_that_cannot_be_created_is_refused_in_one_line():
    line = assert_refused_start(start_once(Path("/proc/x")), "/proc/x")
    assert "data directory" in line and "--data-dir" in line, line


@pytest.mark.timeout(60)
def test_a_data_directory_that_cannot_be_written_is_refused_in_one_line(tmp, unprivileged):
    data_dir = tmp / "closed"
    data_dir.mkdir(mode=0o500)
    line = assert_refused_start(start_once(data_dir, prefix=unprivileged), str(data_dir))
    assert "--data-dir" in line, line
    assert_served_nothing(data_dir)


# -- while serving ------------------------------------------------------------------------

@pytest.fixture
def serving(tmp):
    """A broker on ``tmp``; sessions opened through ``connect`` are closed at the end."""
    from client import Client

    state = {"broker": start_broker(tmp), "sessions": []}
    wait_ready(state["broker"].endpoint, state["broker"].proc)

    def connect(name: str, **kwargs):
        session = Client.connect(name=name, endpoint=state["broker"].endpoint, timeout=15,
                                 **kwargs)
        state["sessions"].append(session)
        return session

    state["connect"] = connect
    yield state
    for session in state["sessions"]:
        session.close()
    state["broker"].stop()


def timed(call) -> tuple[dict, float]:
    started = time.monotonic()
    result = call()
    return result, time.monotonic() - started


@pytest.mark.timeout(120)
def test_a_lock_while_serving_refuses_durable_sends_fast_and_the_broker_recovers_by_itself(
        serving, tmp):
    connect, broker = serving["connect"], serving["broker"]
    holder = Holder(broker.db)
    host = connect("host")
    run = new_run_id()
    granted(ok(host.register_run(run, STAGES)))
    try:
        holder.hold()
        # A run is durable before register_run is answered: under the lock it is refused
        # at once, nothing of it kept.
        other = new_run_id()
        refused, seconds = timed(lambda: host.register_run(other, STAGES))
        assert_refused(refused, "store_unavailable")
        assert seconds < FAST_ANSWER_S, seconds
        # Sessions connect while the file is locked: what they write nobody waits
        # for, so it is kept for later, not lost.
        alice, bob = connect("alice"), connect("bob")

        refused, seconds = timed(lambda: send(host, path(run, "plan"), "while locked"))
        assert_refused(refused, "store_unavailable", error_text("store_unavailable"))
        assert seconds < FAST_ANSWER_S, seconds

        # A durable send in flight does not hold up live traffic: the host's own live
        # send, behind it on the same connection, is answered first.
        pending = host._transport.request(envelope(
            "call", id=str(uuid.uuid4()), action="send", to=path(run, "plan"), message="again"))
        live = ok(send(host, bob.id, "live while locked"))
        assert live.get("delivered") is True and not pending.done(), live
        assert pending.result(FAST_ANSWER_S)["code"] == "store_unavailable"
        assert ok(send(alice, bob.id, "hello bob")).get("delivered") is True
        assert [m["message"] for m in (bob.receive(10), bob.receive(10))] == \
            ["live while locked", "hello bob"]
    finally:
        holder.close()

    kept = queue(host, path(run, "plan"), "after the lock")   # no restart, no retry loop
    assert kept["position"] == 1, kept

    assert broker.stop() == 0
    serving["broker"] = restarted = start_broker(tmp)   # the fixture stops it
    wait_ready(restarted.endpoint, restarted.proc)
    deadline = time.monotonic() + 30
    while not host.intercom(action="list").get("ok"):   # the host says hello again
        assert time.monotonic() < deadline, "the host never came back"
    plan = stage_row(run_row(host, run), "plan")
    assert plan["queued"] == 1, plan   # the run, and the one entry kept after the lock
