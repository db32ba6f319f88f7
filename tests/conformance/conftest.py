"""Fixtures of the conformance suite: the Node package installed, real brokers.

``node_ready`` runs ``npm ci`` in clients/node once per test session when
node_modules is missing or older than package-lock.json (under a file lock, so
xdist workers do not race); it fails, never skips, when node or npm is missing.
Brokers are real ``python -m broker`` processes on ipc sockets in a short tmp dir,
stopped by their own PID.
"""

from __future__ import annotations

import fcntl
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pytest

from tests.conftest import BrokerProcess, start_broker

from .runner import ROOT

NODE_DIR = ROOT / "clients" / "node"
AGENT = "conformance"                  # its tools.toml enables invoke
# Past 2**53: a JavaScript number cannot hold it, so the welcome's backlogBytes shows
# whether a client decodes 64-bit integers exactly.
BIG_BACKLOG_BYTES = 2**53 + 1


def npm_ci_if_stale(npm: str) -> None:
    marker = NODE_DIR / "node_modules" / ".package-lock.json"
    lock = NODE_DIR / "package-lock.json"
    if marker.exists() and marker.stat().st_mtime >= lock.stat().st_mtime:
        return
    done = subprocess.run([npm, "ci", "--no-audit", "--no-fund"], cwd=NODE_DIR, capture_output=True,
                          text=True, timeout=600)
    if done.returncode != 0:
        pytest.fail(f"npm ci failed in {NODE_DIR}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")


@pytest.fixture(scope="session")
def node_ready() -> str:
    """The node executable, with clients/node's dependencies installed."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        pytest.fail("node and npm are required (Node 20+): apt-get install nodejs npm")
    version = subprocess.run([node, "--version"], capture_output=True, text=True).stdout.strip()
    if int(version.lstrip("v").split(".")[0]) < 20:
        pytest.fail(f"Node 20+ is required, found {version}")
    with open(NODE_DIR / ".npm-ci.lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        npm_ci_if_stale(npm)
    return node


@dataclass
class Bus:
    """A broker the scenarios run against, and how to restart it."""

    broker: BrokerProcess
    extra: tuple[str, ...]

    @property
    def variables(self) -> dict:
        return {"endpoint": self.broker.endpoint, "dataDir": str(self.broker.data_dir), "agent": AGENT}

    def restart(self) -> None:
        assert self.broker.stop() == 0, "the broker did not stop cleanly"
        self.broker = start_broker(self.broker.data_dir, *self.extra)


def prepare_agent(data_dir: Path) -> None:
    config = data_dir / "agents" / AGENT / "config"
    config.mkdir(parents=True, exist_ok=True)
    (config / "tools.toml").write_text("invoke = true\n")


def open_bus(*extra: str) -> Iterator[Bus]:
    path = Path(tempfile.mkdtemp(prefix="ic-", dir="/tmp"))
    prepare_agent(path)
    bus = Bus(start_broker(path, *extra), extra)
    try:
        yield bus
    finally:
        bus.broker.stop()
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="module")
def module_bus():
    """One broker for a whole module (scenarios isolate themselves with unique names),
    its backlog bound past 2**53 (see BIG_BACKLOG_BYTES)."""
    yield from open_bus("--max-backlog-bytes", str(BIG_BACKLOG_BYTES))


@pytest.fixture
def own_bus():
    """A broker for one test (a scenario that restarts it)."""
    yield from open_bus()
