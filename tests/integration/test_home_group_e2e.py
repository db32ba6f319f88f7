"""Where a session's home group comes from, through the public client on a real
broker: explicit group > the launching session's group > $ATOMIC_INTERCOM_GROUP >
$PI_INTERCOM_GROUP > the config file's group > default, in-process and in a client
process reading its own config file.

One broker serves the whole module; every test works in groups of its own.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid

import pytest

from client import ConnectError
from schemas.config import Config

from .conftest import ROOT, child_env, unique


def test_explicit_group_beats_parent_env_and_config(bus, monkeypatch):
    parent = bus.connect("parent", group=unique())
    monkeypatch.setenv("ATOMIC_INTERCOM_GROUP", unique())
    explicit = unique()
    child = bus.connect("child", group=explicit, parent=parent.id, config=Config(group=unique()),
                        grant=parent.grant_child()["grant"])
    assert child.home_group == explicit
    assert child.intercom(action="status")["homeGroup"] == explicit


def test_parent_group_beats_env_and_config(bus, monkeypatch):
    parent_group = unique()
    parent = bus.connect("parent", group=parent_group)
    monkeypatch.setenv("ATOMIC_INTERCOM_GROUP", unique())
    child = bus.connect("child", group=None, parent=parent.id, config=Config(group=unique()),
                        grant=parent.grant_child()["grant"])
    status = child.intercom(action="status")
    assert status["homeGroup"] == parent_group
    assert status["groups"] == [parent_group]


def test_a_claimed_parent_without_its_grant_is_refused_at_connect(bus):
    with pytest.raises(ConnectError) as refused:
        bus.connect("child", group=None, parent=str(uuid.uuid4()))
    assert refused.value.code == "grant_required"


def test_atomic_env_group_beats_legacy_env_and_config(bus, monkeypatch):
    env_group = unique()
    monkeypatch.setenv("ATOMIC_INTERCOM_GROUP", env_group)
    monkeypatch.setenv("PI_INTERCOM_GROUP", unique())
    session = bus.connect("s", group=None, config=Config(group=unique()))
    assert session.intercom(action="status")["homeGroup"] == env_group


def test_legacy_env_group_beats_config(bus, monkeypatch):
    env_group = unique()
    monkeypatch.setenv("PI_INTERCOM_GROUP", env_group)
    session = bus.connect("s", group=None, config=Config(group=unique()))
    assert session.intercom(action="status")["homeGroup"] == env_group


def test_config_group_beats_default(bus):
    config_group = unique()
    session = bus.connect("s", group=None, config=Config(group=config_group))
    assert session.intercom(action="status")["homeGroup"] == config_group


def test_home_group_is_default_when_nothing_names_one(bus):
    session = bus.connect("s", group=None)
    status = session.intercom(action="status")
    assert status["homeGroup"] == "default"
    assert status["groups"] == ["default"]


_CHILD_CLIENT = """
import json, sys
from client import Client
session = Client.connect(name="child", endpoint=sys.argv[1], timeout=15)
print(json.dumps(session.intercom(action="status")))
session.close()
"""


def run_child_client(bus, home, **env) -> dict:
    done = subprocess.run([sys.executable, "-c", _CHILD_CLIENT, bus.endpoint], cwd=ROOT,
                          env=child_env(home, **env), capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def write_config(home, relpath: str, data: dict) -> None:
    path = home / relpath
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(data))


def test_client_process_takes_its_home_group_from_its_config_file(bus, tmp_path):
    config_group = unique()
    write_config(tmp_path, ".atomic/agent/intercom/config.json", {"group": config_group})
    assert run_child_client(bus, tmp_path)["homeGroup"] == config_group


def test_client_process_reads_the_legacy_config_file_when_atomic_one_is_absent(bus, tmp_path):
    config_group = unique()
    write_config(tmp_path, ".pi/agent/intercom/config.json", {"group": config_group})
    assert run_child_client(bus, tmp_path)["homeGroup"] == config_group


def test_client_process_env_group_beats_its_config_file(bus, tmp_path):
    config_group, env_group = unique(), unique()
    write_config(tmp_path, ".atomic/agent/intercom/config.json", {"group": config_group})
    status = run_child_client(bus, tmp_path, ATOMIC_INTERCOM_GROUP=env_group)
    assert status["homeGroup"] == env_group
