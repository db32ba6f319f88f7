"""A broker process serving CURVE on loopback TCP, with keys made by ``python -m broker
keys``: ``alice`` allowed, ``bob`` with a pair the broker does not allow."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from client import Client, ConnectError
from client.keys import from_directory

from .conftest import ROOT, make_tmp, stop_process


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def broker_process(data_dir: Path, *args: str, log=subprocess.PIPE) -> subprocess.Popen:
    """``log``: where its output goes (a pipe the test reads, or a file nobody has to drain)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), HOME=str(data_dir))
    return subprocess.Popen([sys.executable, "-m", "broker", "--data-dir", str(data_dir), *args],
                            cwd=ROOT, env=env, stdout=log, stderr=log, text=True)


@pytest.fixture(scope="module")
def curve_broker():
    """(ROUTER endpoint, PUB endpoint, keys directory) of a CURVE broker, one per test
    module: its tests read the keys and close the sessions they open (tests/conftest.py
    closes what a test leaves), so they need not start a broker each."""
    short_tmp = make_tmp()
    keys = short_tmp / "keys"
    subprocess.run([sys.executable, "-m", "broker", "keys", "--dir", str(keys), "--client", "alice",
                    "--client", "bob"], cwd=ROOT, check=True, capture_output=True,
                   env=dict(os.environ, PYTHONPATH=str(ROOT)))
    # bob's key exists but is not allowed.
    (keys / "clients" / "bob.key").rename(short_tmp / "bob.key")
    router, pub = f"tcp://127.0.0.1:{free_port()}", f"tcp://127.0.0.1:{free_port()}"
    with open(short_tmp / "broker.log", "w") as log:
        proc = broker_process(short_tmp, "--endpoint", router, "--pub-endpoint", pub, "--curve",
                              str(keys), log=log)
    deadline = time.monotonic() + 20
    while True:
        try:
            connect_as(router, keys, "alice", "probe").close()
            break
        except ConnectError:
            assert time.monotonic() < deadline and proc.poll() is None, "the CURVE broker did not start"
    yield router, pub, keys
    stop_process(proc, 15)
    shutil.rmtree(short_tmp, ignore_errors=True)


def connect_as(router: str, keys: Path, client: str, name: str, **kwargs) -> Client:
    """A session with ``client``'s key pair from ``keys``."""
    pair = from_directory(keys, client)
    return Client.connect(name=name, endpoint=router, timeout=15, curve_server_key=pair.server_key,
                          curve_public_key=pair.public_key, curve_secret_key=pair.secret_key,
                          **kwargs)
