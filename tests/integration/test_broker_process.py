"""``python -m broker`` as a process: startup layout, signals, a second broker, bad config."""

from __future__ import annotations

import json
import signal
import sqlite3
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import ROOT, child_env, probe_reply, start_broker, stop_process, wait_ready


def broker_command(data_dir, *extra: str) -> list[str]:
    return [sys.executable, "-m", "broker", "--data-dir", str(data_dir), *extra]


def spawn_broker(data_dir, *extra: str, home=None) -> subprocess.Popen:
    """A broker whose stderr goes to ``<data_dir parent>/stderr.log``."""
    with open(data_dir.parent / "stderr.log", "wb") as stderr:
        return subprocess.Popen(broker_command(data_dir, *extra), cwd=ROOT,
                                env=child_env(home or data_dir.parent),
                                stdout=subprocess.DEVNULL, stderr=stderr)


def log_records(text: str) -> list[dict]:
    records = []
    for line in text.splitlines():
        try:
            records.append(json.loads(line))
        except ValueError:
            continue
    return records


@pytest.fixture
def running(broker):
    """The conftest broker, once it answers."""
    wait_ready(broker.endpoint, broker.proc)
    return broker


# -- startup -----------------------------------------------------------------------------

def test_broker_creates_private_data_dir_with_router_and_pub_sockets(short_tmp):
    data_dir = short_tmp / "data"
    proc = spawn_broker(data_dir)
    try:
        wait_ready(f"ipc://{data_dir}/broker.sock", proc)
        assert stat.S_IMODE(data_dir.stat().st_mode) == 0o700
        assert stat.S_ISSOCK((data_dir / "broker.sock").stat().st_mode)
        assert stat.S_ISSOCK((data_dir / "presence.sock").stat().st_mode)
    finally:
        assert stop_process(proc, signal.SIGTERM) == 0


def test_broker_keeps_its_database_in_wal_mode_in_the_data_dir(short_tmp):
    data_dir = short_tmp / "data"
    proc = spawn_broker(data_dir)
    try:
        wait_ready(f"ipc://{data_dir}/broker.sock", proc)
        db = data_dir / "intercom.db"
        assert db.is_file()
        with db.open("rb") as f:
            header = f.read(100)
        assert header[:16] == b"SQLite format 3\x00"
        assert header[18:20] == b"\x02\x02", "file format bytes 2/2 mean WAL journal mode"
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
        try:
            assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        finally:
            conn.close()
    finally:
        assert stop_process(proc, signal.SIGTERM) == 0


def test_broker_tightens_an_existing_data_dir_that_others_can_open(short_tmp):
    data_dir = short_tmp / "data"
    data_dir.mkdir()
    data_dir.chmod(0o755)
    proc = spawn_broker(data_dir)
    try:
        wait_ready(f"ipc://{data_dir}/broker.sock", proc)
        assert stat.S_IMODE(data_dir.stat().st_mode) == 0o700
    finally:
        assert stop_process(proc, signal.SIGTERM) == 0


# -- stopping ------------------------------------------------------------------------------

@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_signal_stops_broker_cleanly_with_exit_code_0(running, connect, sig):
    session = connect("bystander")
    assert session.intercom(action="list")["ok"]
    session.close()
    assert running.stop(sig) == 0
    log = running.log.read_text()
    assert "Traceback" not in log
    assert any(r.get("event") == "broker_stopped" for r in log_records(log)), log
    # A clean stop leaves no socket files behind.
    for endpoint in (running.endpoint, running.pub_endpoint):
        assert not Path(endpoint[len("ipc://"):]).exists(), endpoint


def test_stopped_broker_releases_its_endpoints_for_the_next_broker(short_tmp):
    first = start_broker(short_tmp)
    wait_ready(first.endpoint, first.proc)
    assert first.stop(signal.SIGTERM) == 0
    second = start_broker(short_tmp)
    try:
        wait_ready(second.endpoint, second.proc)
        assert second.proc.poll() is None
    finally:
        assert second.stop() == 0


# -- a second broker -------------------------------------------------------------------------

def test_second_broker_on_same_endpoint_exits_nonzero_with_one_line_already_message(running):
    second = subprocess.run(
        broker_command(running.data_dir, "--endpoint", running.endpoint,
                       "--pub-endpoint", running.pub_endpoint),
        cwd=ROOT, env=child_env(running.data_dir), capture_output=True, text=True, timeout=30)
    assert second.returncode != 0
    assert "Traceback" not in second.stderr
    human = [line for line in second.stderr.splitlines() if "already" in line]
    assert human, f"no line mentions 'already': {second.stderr!r}"
    assert all(line.strip() for line in human)


def test_second_broker_leaves_the_first_one_serving(running, connect):
    before = connect("early")
    second = subprocess.run(
        broker_command(running.data_dir, "--endpoint", running.endpoint,
                       "--pub-endpoint", running.pub_endpoint),
        cwd=ROOT, env=child_env(running.data_dir), capture_output=True, text=True, timeout=30)
    assert second.returncode != 0
    after = connect("late")
    listed = after.intercom(action="list")
    assert listed["ok"], listed
    assert [s["id"] for s in listed["sessions"]] == [before.id]
    assert running.proc.poll() is None


def test_second_broker_on_same_pub_endpoint_only_is_refused_too(running):
    other_router = f"ipc://{running.data_dir}/other.sock"
    second = subprocess.run(
        broker_command(running.data_dir, "--endpoint", other_router,
                       "--pub-endpoint", running.pub_endpoint, "--db", str(running.data_dir / "b.db")),
        cwd=ROOT, env=child_env(running.data_dir), capture_output=True, text=True, timeout=30)
    assert second.returncode != 0
    assert "Traceback" not in second.stderr
    assert "already" in second.stderr


# -- config ------------------------------------------------------------------------------------

@pytest.mark.parametrize("content", [
    pytest.param("{not json", id="invalid-json"),
    pytest.param(json.dumps({"confirmSend": "yes"}), id="one-invalid-field"),
    pytest.param(json.dumps({"group": "review", "maxPendingAsks": 0}), id="one-bad-among-good"),
])
def test_broker_with_rejected_config_still_starts_and_logs_one_config_error(short_tmp, content):
    config = short_tmp / "config.json"
    config.write_text(content)
    proc = start_broker(short_tmp, "--config", str(config))
    try:
        wait_ready(proc.endpoint, proc.proc)
        replies = probe_reply(proc.endpoint, [b"\xc1"])
        assert replies and replies[0]["code"] == "malformed_frame"
        errors = [r for r in log_records(proc.log.read_text()) if r.get("level") == "error"]
        assert len(errors) == 1, errors
        assert str(config) in json.dumps(errors[0])
        assert "config" in json.dumps(errors[0]).lower()
    finally:
        assert proc.stop() == 0


def test_broker_with_valid_config_logs_no_error(short_tmp):
    config = short_tmp / "config.json"
    config.write_text(json.dumps({"group": "review", "maxPendingAsks": 2, "askTimeout": 30}))
    proc = start_broker(short_tmp, "--config", str(config))
    try:
        wait_ready(proc.endpoint, proc.proc)
        errors = [r for r in log_records(proc.log.read_text()) if r.get("level") == "error"]
        assert errors == []
    finally:
        assert proc.stop() == 0


def test_broker_reads_its_default_config_file_from_home(short_tmp):
    home = short_tmp / "home"
    config = home / ".atomic" / "agent" / "intercom" / "config.json"
    config.parent.mkdir(parents=True)
    config.write_text("[1, 2")
    data_dir = short_tmp / "data"
    proc = spawn_broker(data_dir, home=home)
    try:
        wait_ready(f"ipc://{data_dir}/broker.sock", proc)
    finally:
        assert stop_process(proc, signal.SIGTERM) == 0
    stderr = (short_tmp / "stderr.log").read_text()
    errors = [r for r in log_records(stderr) if r.get("level") == "error"]
    assert len(errors) == 1 and str(config) in json.dumps(errors[0]), stderr


@pytest.mark.parametrize("endpoint", ["tcp://127.0.0.1:99999", "tcp://127.0.0.1", "127.0.0.1:5555"])
def test_an_invalid_endpoint_is_refused_with_one_line_and_nothing_is_bound(tmp_path, endpoint):
    data = tmp_path / "d"
    done = subprocess.run(
        broker_command(data, "--endpoint", endpoint, "--pub-endpoint", f"ipc://{tmp_path}/p.sock"),
        cwd=ROOT, env=child_env(data), capture_output=True, text=True, timeout=30)
    assert done.returncode == 2
    (line,) = done.stderr.splitlines()
    assert line.startswith("broker: cannot bind") and repr(endpoint) in line
    assert not (tmp_path / "p.sock").exists()
