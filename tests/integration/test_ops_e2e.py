"""Operating a broker through its public surface (issue 22): ``python -m client stats``
as a subprocess, the ``--metrics-port`` endpoint over HTTP, and the broker's log.
A real broker process each time; every wait is a poll with a deadline."""

from __future__ import annotations

import json
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from client import Client
from tests.conftest import ROOT

from .conftest import child_env, make_tmp, start_broker, stop_process, wait_ready

DEADLINE_S = 20.0


def cli(endpoint: str, *args: str, home: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "client", "--endpoint", endpoint, *args],
                          cwd=ROOT, env=child_env(home), capture_output=True, text=True,
                          timeout=30)


def stats_json(endpoint: str, home: Path) -> dict:
    done = cli(endpoint, "stats", "--json", home=home)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as reply:
        assert reply.status == 200
        return reply.read().decode()


def sample(text: str, name: str) -> float:
    """The value of one sample line (``name`` with its labels), 0 when absent."""
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def scrape_until(port: int, ready, what: str) -> str:
    """The first scrape for which ``ready(text)`` holds."""
    return wait_until(lambda: (text if ready(text := scrape(port)) else None), what)


def wait_until(check, what: str):
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.1)      # polling a figure refreshed once a second, not a settle
    raise AssertionError(f"{what} within {DEADLINE_S:g} s")


@pytest.fixture(scope="module")
def ops_broker():
    """A broker serving metrics on a free loopback port, logging at debug level."""
    path = make_tmp()
    port = free_port()
    proc = start_broker(path, "--metrics-port", str(port), "--log-level", "debug")
    try:
        wait_ready(proc.endpoint, proc.proc)
        yield proc, port
    finally:
        proc.stop()


def open_session(endpoint: str, name: str, **kwargs):
    return Client.connect(name=name, endpoint=endpoint, group="ops", timeout=15, **kwargs)


# -- stats ------------------------------------------------------------------------------

def test_stats_json_counts_sessions_and_routed_messages(ops_broker, tmp_path):
    proc, _ = ops_broker
    with open_session(proc.endpoint, "alice") as alice, open_session(proc.endpoint, "bob") as bob:
        assert alice.intercom(action="send", to="bob", message="hi")["ok"]
        assert bob.receive(timeout=10)["message"] == "hi"
        answer = stats_json(proc.endpoint, tmp_path)
    assert answer["ok"] is True
    assert answer["sessions"]["byKind"]["interactive"] >= 2
    assert answer["sessions"]["byKind"]["control"] == 1          # the stats command itself
    assert answer["counters"]["messagesRouted"] >= 1
    assert {"alice", "bob"} <= {row["name"] for row in answer["backlog"]["top"]}
    assert answer["store"]["fileBytes"] > 0 and answer["broker"]["pid"] == proc.pid


def test_stats_prints_aligned_tables_by_default(ops_broker, tmp_path):
    proc, _ = ops_broker
    done = cli(proc.endpoint, "stats", home=tmp_path)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    header = next(line for line in lines if line.split() == ["what", "figures"])
    rows = lines[lines.index(header) + 1:lines.index(header) + 4]
    column = header.index("figures")
    assert all(row[column - 1] == " " and row[column] != " " for row in rows)
    assert "refusals by code" in lines and "backlog (largest first)" in lines


def test_a_session_asking_for_stats_is_refused_control_only(ops_broker):
    proc, _ = ops_broker
    with open_session(proc.endpoint, "curious") as curious:
        answer = curious.stats()
    assert answer["ok"] is False and answer["code"] == "control_only"


def test_stats_with_no_broker_exits_3(tmp_path):
    done = cli(f"ipc://{tmp_path}/nobody.sock", "stats", home=tmp_path)
    assert done.returncode == 3 and "No broker is listening" in done.stderr


def test_stats_watch_repeats_until_ctrl_c_then_exits_130_quietly(ops_broker, tmp_path):
    proc, _ = ops_broker
    watch = subprocess.Popen([sys.executable, "-m", "client", "--endpoint", proc.endpoint,
                              "stats", "--json", "--watch"], cwd=ROOT, env=child_env(tmp_path),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        first, second = json.loads(watch.stdout.readline()), json.loads(watch.stdout.readline())
        assert first["ok"] and second["ok"]
        assert second["broker"]["uptimeS"] >= first["broker"]["uptimeS"]
    finally:
        code = stop_process(watch, signal.SIGINT)
    assert code == 130 and watch.stderr.read() == ""


# -- metrics ----------------------------------------------------------------------------

def test_metrics_endpoint_exports_the_intercom_names(ops_broker):
    _, port = ops_broker
    text = scrape_until(port, lambda t: "intercom_sessions" in t, "no intercom_sessions metric")
    names = set(re.findall(r"^# TYPE (\S+) ", text, re.M))
    assert {"intercom_sessions", "intercom_queued_entries", "intercom_backlog_bytes",
            "intercom_messages_routed_total", "intercom_refusals_total",
            "intercom_commit_seconds",
            "intercom_links", "intercom_runs"} <= names
    ours = {name for name in names if not name.startswith(("process_", "python_"))}
    assert all(name.startswith("intercom_") for name in ours)
    assert sample(text, "intercom_commit_seconds_count") >= 0
    # The process's own series, when it started, and what is running.
    assert {"process_resident_memory_bytes", "process_cpu_seconds_total",
            "process_start_time_seconds", "process_open_fds", "python_info",
            "intercom_build_info"} <= names
    assert sample(text, "process_start_time_seconds") > 1.7e9
    assert re.search(r'^intercom_build_info\{protocol="1",version="[^"]+"\} 1\.0$', text, re.M) or \
        re.search(r'^intercom_build_info\{version="[^"]+",protocol="1"\} 1\.0$', text, re.M), text


def test_routed_and_refused_counters_move_after_sends_and_refusals(ops_broker):
    proc, port = ops_broker
    before = scrape(port)
    routed = sample(before, "intercom_messages_routed_total")
    refused = sample(before, 'intercom_refusals_total{code="target_not_found"}')
    with open_session(proc.endpoint, "sender") as sender, \
            open_session(proc.endpoint, "receiver") as receiver:
        for n in range(3):
            assert sender.intercom(action="send", to="receiver", message=f"m{n}")["ok"]
        assert sender.intercom(action="send", to="no-such-session", message="x")["code"] == \
            "target_not_found"
        assert receiver.receive(timeout=10)["message"] == "m0"
        after = scrape_until(
            port, lambda t: sample(t, "intercom_messages_routed_total") >= routed + 3
            and sample(t, 'intercom_refusals_total{code="target_not_found"}') >= refused + 1,
            "the counters did not move")
        assert sample(after, 'intercom_sessions{kind="interactive"}') >= 2


def test_a_second_broker_on_a_taken_metrics_port_refuses_to_start_with_one_line():
    path = make_tmp()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        proc = start_broker(path, "--metrics-port", str(taken.getsockname()[1]))
        code = proc.proc.wait(30)
    log = proc.log.read_text()
    assert code == 2 and "cannot serve metrics on 127.0.0.1" in log, log


# -- the log ----------------------------------------------------------------------------

def log_records(proc) -> list[dict]:
    return [json.loads(line) for line in proc.log.read_text().splitlines()
            if line.startswith("{")]


def test_the_log_tells_sessions_coming_and_going_and_each_refusal(ops_broker):
    proc, _ = ops_broker
    with open_session(proc.endpoint, "logged") as logged:
        session_id = logged.id
        assert logged.intercom(action="send", to="ghost", message="x")["code"] == \
            "target_not_found"

    def found():
        mine = [r for r in log_records(proc) if r.get("session") == session_id]
        events = [r["event"] for r in mine]
        if {"session_opened", "request_refused", "session_left"} <= set(events):
            return mine
        return None
    mine = wait_until(found, "no opened, refused and left lines")
    (refused,) = [r for r in mine if r["event"] == "request_refused"]
    assert refused["code"] == "target_not_found" and refused["name"] == "logged"
    assert refused["level"] == "info"
    assert any(r["event"] == "request" and r["level"] == "debug" for r in log_records(proc))


def test_a_refused_curve_key_is_logged_once_with_the_key(tmp_path):
    from client import ConnectError
    from client.keys import from_directory

    path = make_tmp()
    keys = path / "keys"
    subprocess.run([sys.executable, "-m", "broker", "keys", "--dir", str(keys), "--client",
                    "alice", "--client", "bob"], cwd=ROOT, check=True, capture_output=True,
                   env=child_env(tmp_path))
    (keys / "clients" / "bob.key").rename(path / "bob.key")      # bob is not allowed
    proc = start_broker(path, "--curve", str(keys))
    try:
        bob = from_directory(keys, "bob")
        for _ in range(2):
            with pytest.raises(ConnectError) as refused:
                Client.connect(name="bob", endpoint=proc.endpoint, timeout=15,
                               curve_server_key=bob.server_key, curve_public_key=bob.public_key,
                               curve_secret_key=bob.secret_key)
            assert refused.value.code == "auth_failed"
        lines = [r for r in log_records(proc) if r["event"] == "curve_key_refused"]
        assert [(r["key"], r["level"]) for r in lines] == [(bob.public_key, "info")]
    finally:
        proc.stop()
