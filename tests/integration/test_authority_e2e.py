"""Authority is granted, never claimed: each attack a hostile local client tried now
fails with its code, each legitimate path works. Real broker processes, real sockets."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from client import Client, ConnectError
from client.__main__ import tail
from client.history import read_identity
from client.keys import from_directory
from tests.conftest import ROOT, start_broker
from tests.integration.conftest import child_env, module_connect_broker, stop_process
from tests.integration.curve_helpers import broker_process as _broker, curve_broker, free_port as _free_port  # noqa: F401 (a fixture)
from tests.integration.workflow_helpers import GRANTS, host_run, new_run_id, ok, path, queue, start_stage


# One broker for the module's connect/broker tests: each closes the sessions it opens,
# in groups and runs of its own.
broker = module_connect_broker()


def _connect(endpoint: str, name: str, **kwargs) -> Client:
    return Client.connect(name=name, endpoint=endpoint, timeout=15, **kwargs)


# -- stage grants ---------------------------------------------------------------------------

def test_binding_as_a_stage_needs_that_stages_grant(connect):
    host, run = host_run(connect, [{"name": "plan"}, {"name": "review"}])
    queue(host, path(run, "plan"), "the plan")
    for grant, code in ((None, "grant_required"), (GRANTS[path(run, "review")], "invalid_grant")):
        with pytest.raises(ConnectError) as refused:
            connect("mallory", kind="stage", stage=path(run, "plan"), grant=grant)
        assert refused.value.code == code
    plan = start_stage(connect, run, "plan")
    assert plan.receive(timeout=10)["message"] == "the plan"


def test_a_revoked_stage_grant_is_invalid(connect):
    host, run = host_run(connect, [{"name": "plan"}])
    ok(host.revoke_stage(run, "plan"))
    with pytest.raises(ConnectError) as refused:
        start_stage(connect, run, "plan")
    assert refused.value.code == "invalid_grant"


# -- child grants ---------------------------------------------------------------------------

def test_a_child_is_supervised_only_by_the_launcher_that_granted_it(connect):
    victim = connect("victim", group="private-" + new_run_id())
    launcher = connect("launcher", group="mine-" + new_run_id())
    grant = ok(launcher.grant_child())["grant"]
    with pytest.raises(ConnectError) as refused:
        connect("impostor", parent=victim.id, grant=grant)
    assert refused.value.code == "invalid_grant"
    child = connect("child", parent=launcher.id, grant=grant)
    assert child.home_group == launcher.home_group and child.parent_id == launcher.id


def test_a_child_grant_admits_one_child_and_a_second_is_refused_grant_used(connect):
    launcher = connect("launcher", group="mine-" + new_run_id())
    grant = ok(launcher.grant_child())["grant"]
    child = connect("child", parent=launcher.id, grant=grant)
    for name in ("second", "third"):
        with pytest.raises(ConnectError) as refused:
            connect(name, parent=launcher.id, grant=grant)
        assert refused.value.code == "grant_used"
        child.close()
    other = connect("other", parent=launcher.id, grant=ok(launcher.grant_child())["grant"])
    assert other.parent_id == launcher.id


def test_a_child_takes_its_id_back_with_its_grant_after_a_broker_restart(short_tmp):
    broker = start_broker(short_tmp)
    try:
        launcher = _connect(broker.endpoint, "launcher", group="mine")
        grant = ok(launcher.grant_child())["grant"]
        child = _connect(broker.endpoint, "child", parent=launcher.id, grant=grant)
        first = child.id
        broker.stop()
        broker = start_broker(short_tmp)
        deadline = time.monotonic() + 30
        while not (status := child.intercom(action="status")).get("connected"):
            assert time.monotonic() < deadline, status
        assert child.id == first and child.welcome["brokerId"] != ""
        assert child.parent_id == launcher.id and child.welcome.get("reclaimed", True) is True
        with pytest.raises(ConnectError) as refused:
            _connect(broker.endpoint, "copy", parent=launcher.id, grant=grant)
        assert refused.value.code == "grant_used"
    finally:
        broker.stop()


# -- identity across restarts -----------------------------------------------------------------

def test_a_reopened_process_takes_its_id_back_from_its_history_file(broker, tmp_path):
    history = tmp_path / "history.jsonl"
    first = _connect(broker.endpoint, "resumable", atomic_session_id="atomic-1",
                     history_file=history)
    peer = _connect(broker.endpoint, "peer")
    ok(peer.intercom(action="send", to=first.id, message="hello"))
    assert first.receive(timeout=10)["message"] == "hello"
    ok(first.intercom(action="send", to=peer.id, message="hi back"))
    first.close()
    entries = [json.loads(line) for line in history.read_text().splitlines()]
    assert [e["type"] for e in entries] == ["intercom_session_identity", "intercom_received",
                                            "intercom_sent"]
    assert stat.S_IMODE(history.stat().st_mode) == 0o600
    assert read_identity(history) == entries[0]
    with _connect(broker.endpoint, "resumable", identity=read_identity(history)) as back:
        assert back.id == first.id and back.welcome["reclaimed"] is True
    peer.close()


# -- CURVE and safe binds ---------------------------------------------------------------------

def test_secret_key_files_are_owner_only(curve_broker):
    _, _, keys = curve_broker
    for secret in [keys / "broker.key_secret", *sorted((keys / "clients").glob("*.key_secret"))]:
        assert stat.S_IMODE(secret.stat().st_mode) == 0o600, secret


def _keys(directory, *args: str) -> list[str]:
    done = subprocess.run([sys.executable, "-m", "broker", "keys", "--dir", str(directory), *args],
                          cwd=ROOT, check=True, capture_output=True, text=True, timeout=30,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)))
    return done.stdout.splitlines()


def test_keys_run_again_keeps_every_existing_pair_and_adds_only_the_missing_ones(short_tmp):
    keys = short_tmp / "keys"
    _keys(keys, "--client", "alice")
    before = {p.name: p.read_bytes() for p in [*keys.glob("*.key*"), *keys.glob("clients/*")]}
    lines = _keys(keys, "--client", "alice", "--client", "carol")
    after = {p.name: p.read_bytes() for p in [*keys.glob("*.key*"), *keys.glob("clients/*")]}
    assert {name: after[name] for name in before} == before, "existing keys were rewritten"
    assert set(after) - set(before) == {"carol.key", "carol.key_secret"}
    assert [line.split()[0] for line in lines] == ["kept", "kept", "created"]
    replaced = _keys(keys, "--client", "alice", "--force")
    assert [line.split()[0] for line in replaced] == ["replaced", "replaced"]
    assert (keys / "broker.key").read_bytes() != before["broker.key"]


def test_an_allowed_key_works_as_without_curve_tail_included(curve_broker):
    router, pub, keys = curve_broker
    alice = from_directory(keys, "alice")
    args = {"curve_server_key": alice.server_key, "curve_public_key": alice.public_key,
            "curve_secret_key": alice.secret_key}
    lines: list[str] = []

    class Out:
        def write(self, text):
            lines.append(text)

        def flush(self):
            pass

    import threading
    watcher = threading.Thread(target=tail, args=(pub, None, True, Out(), 1), kwargs={"curve": alice},
                               daemon=True)
    watcher.start()
    with _connect(router, "one", **args) as one:
        deadline = time.monotonic() + 15
        while watcher.is_alive() and time.monotonic() < deadline:
            # PUB joins late: keep producing presence until the watcher has a line.
            with _connect(router, "two", **args) as two:
                ok(two.intercom(action="send", to=one.id, message="over curve"))
                assert one.receive(timeout=10)["message"] == "over curve"
        watcher.join(5)
    assert lines and json.loads(lines[0])["event"] in ("session_joined", "session_left")


def test_a_refused_key_fails_fast_with_auth_failed_and_no_session(curve_broker):
    router, _, keys = curve_broker
    alice = from_directory(keys, "alice")
    bob = from_directory(keys, "bob")     # its public key is not in the allowed directory
    with _connect(router, "watcher", curve_server_key=alice.server_key,
                  curve_public_key=alice.public_key, curve_secret_key=alice.secret_key) as watcher:
        started = time.monotonic()
        with pytest.raises(ConnectError) as refused:
            _connect(router, "bob", curve_server_key=bob.server_key, curve_public_key=bob.public_key,
                     curve_secret_key=bob.secret_key)
        assert refused.value.code == "auth_failed"
        assert time.monotonic() - started < 5
        assert watcher.next_event(timeout=0.5) is None
        assert [s["name"] for s in ok(watcher.intercom(action="list"))["sessions"]] == []


def _refused_within(router: str, seconds: float, **keys) -> ConnectError:
    started = time.monotonic()
    with pytest.raises(ConnectError) as refused:
        Client.connect(name="wrong", endpoint=router, timeout=10, **keys)
    assert time.monotonic() - started < seconds
    return refused.value


def test_a_wrong_broker_key_fails_auth_failed_in_about_a_second(curve_broker):
    router, _, keys = curve_broker
    alice = from_directory(keys, "alice")
    bob = from_directory(keys, "bob")
    refused = _refused_within(router, 2.5, curve_server_key=bob.public_key,
                              curve_public_key=alice.public_key, curve_secret_key=alice.secret_key)
    assert refused.code == "auth_failed" and "curve_server_key" in str(refused)


def test_a_client_without_keys_against_a_curve_broker_fails_auth_failed_in_about_a_second(curve_broker):
    router, _, _ = curve_broker
    refused = _refused_within(router, 2.5)
    assert refused.code == "auth_failed" and "no keys" in str(refused)


def test_a_curve_client_still_connects_and_stays_connected_with_the_right_keys(curve_broker):
    router, _, keys = curve_broker
    alice = from_directory(keys, "alice")
    args = {"curve_server_key": alice.server_key, "curve_public_key": alice.public_key,
            "curve_secret_key": alice.secret_key}
    with _connect(router, "one", **args) as one, _connect(router, "two", **args) as two:
        assert one._transport.auth_monitor is None     # the watch ended with the welcome
        ok(two.intercom(action="send", to=one.id, message="after the watch"))
        assert one.receive(timeout=10)["message"] == "after the watch"


def test_no_broker_at_a_tcp_endpoint_is_still_no_broker():
    started = time.monotonic()
    with pytest.raises(ConnectError) as refused:
        Client.connect(name="lonely", endpoint=f"tcp://127.0.0.1:{_free_port()}", timeout=10)
    assert refused.value.code == "no_broker" and time.monotonic() - started < 5


def test_a_network_bind_without_curve_is_refused_unless_insecure(short_tmp):
    endpoint = f"tcp://0.0.0.0:{_free_port()}"
    proc = _broker(short_tmp, "--endpoint", endpoint, "--pub-endpoint", f"ipc://{short_tmp}/p.sock")
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 2
    assert len(err.strip().splitlines()) == 1 and "--curve" in err and err.startswith("broker: ")
    proc = _broker(short_tmp, "--endpoint", endpoint, "--pub-endpoint", f"ipc://{short_tmp}/p.sock",
                   "--insecure")
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                session = _connect(endpoint.replace("0.0.0.0", "127.0.0.1"), "probe")
                break
            except ConnectError:
                assert time.monotonic() < deadline and proc.poll() is None
        with session:
            warnings = ok(session.intercom(action="status"))["broker"]["warnings"]
            assert any("insecure" in w for w in warnings)
    finally:
        stop_process(proc, 15)


def test_ipc_socket_files_are_owner_only_whatever_the_umask(short_tmp):
    old = os.umask(0)
    try:
        broker = start_broker(short_tmp)
    finally:
        os.umask(old)
    try:
        with _connect(broker.endpoint, "probe"):
            pass
        for endpoint in (broker.endpoint, broker.pub_endpoint):
            mode = stat.S_IMODE(Path(endpoint[len("ipc://"):]).stat().st_mode)
            assert mode == 0o600, (endpoint, oct(mode))
    finally:
        broker.stop()


# -- database files ----------------------------------------------------------------------------

def _modes(db: Path) -> dict[str, str]:
    return {suffix: oct(stat.S_IMODE(Path(f"{db}{suffix}").stat().st_mode))
            for suffix in ("", "-wal", "-shm") if Path(f"{db}{suffix}").exists()}


def test_a_database_outside_the_data_dir_is_owner_only_with_its_wal_and_shm(short_tmp):
    elsewhere = short_tmp / "elsewhere"
    elsewhere.mkdir(mode=0o755)
    db = elsewhere / "bus.db"
    (short_tmp / "data").mkdir()
    old = os.umask(0)
    try:
        broker = start_broker(short_tmp / "data", "--db", str(db))
    finally:
        os.umask(old)
    try:
        with _connect(broker.endpoint, "host") as host:
            # register_run is answered once its run is committed (or about then): the
            # WAL then holds a write; wait for both companions to exist.
            ok(host.register_run(new_run_id(), [{"name": "plan"}]))
            deadline = time.monotonic() + 10
            while len(_modes(db)) < 3:
                assert time.monotonic() < deadline, _modes(db)
                ok(host.intercom(action="status"))
        assert _modes(db) == {"": "0o600", "-wal": "0o600", "-shm": "0o600"}
    finally:
        broker.stop()


def _left_open(short_tmp, directory_mode: int) -> Path:
    """A database in a directory of ``directory_mode`` that an older broker (or a
    copy) left readable by others; ``short_tmp/b`` is ready as the next data dir."""
    directory = short_tmp / "elsewhere"
    directory.mkdir(mode=directory_mode)
    db = directory / "bus.db"
    (short_tmp / "b").mkdir()
    (short_tmp / "first").mkdir()
    first = start_broker(short_tmp / "first", "--db", str(db))
    with _connect(first.endpoint, "probe"):
        pass
    first.stop()
    for suffix in ("", "-wal", "-shm"):
        if Path(f"{db}{suffix}").exists():
            os.chmod(f"{db}{suffix}", 0o644)
    return db


def test_a_database_readable_by_others_in_an_open_directory_is_refused_unless_insecure(short_tmp):
    db = _left_open(short_tmp, 0o755)
    refused = subprocess.run([sys.executable, "-m", "broker", "--data-dir", str(short_tmp / "b"),
                              "--db", str(db)], cwd=ROOT,
                             env=child_env(short_tmp / "b"), capture_output=True, text=True,
                             timeout=30)
    assert refused.returncode == 2
    (line,) = refused.stderr.splitlines()
    assert str(db) in line and "chmod 600" in line and "--insecure" in line
    assert _modes(db)[""] == "0o644", "nothing changed by a refused start"
    broker = start_broker(short_tmp / "b", "--db", str(db), "--insecure")
    try:
        with _connect(broker.endpoint, "probe") as probe:
            warnings = probe.intercom(action="status")["broker"].get("warnings", [])
        assert any(str(db) in w for w in warnings), warnings
    finally:
        broker.stop()


def test_a_database_left_readable_in_a_private_directory_is_made_owner_only_at_start(short_tmp):
    db = _left_open(short_tmp, 0o700)
    broker = start_broker(short_tmp / "b", "--db", str(db))
    try:
        with _connect(broker.endpoint, "probe"):
            pass
        assert set(_modes(db).values()) == {"0o600"}
        assert "database_mode_tightened" in broker.log.read_text()
    finally:
        broker.stop()
