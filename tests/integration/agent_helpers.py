"""Helpers for the respond / invoke integration tests: per-agent configuration files
written before the broker starts, the broker's response_recovery rows read as an
operator would, and ``python -m client tail --channel`` watched line by line."""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import msgpack
import pytest

from .conftest import ROOT, LineReader, child_env, module_broker, stop_process


def configure_agent(data_dir: Path, agent: str, owner: str | None = None,
                    invoke: bool | None = None) -> None:
    """Write ``agents/<agent>/config/{agent,tools}.toml`` under the broker's data dir."""
    config = data_dir / "agents" / agent / "config"
    config.mkdir(parents=True, exist_ok=True)
    if owner is not None:
        (config / "agent.toml").write_text(f'ownerId = "{owner}"\n')
    if invoke is not None:
        (config / "tools.toml").write_text(f"invoke = {'true' if invoke else 'false'}\n")


def agent_broker(agents: dict[str, dict]):
    """A module-scoped ``shared_broker`` replacement: a broker started after the
    configuration of ``agents`` (name -> configure_agent keywords) was written."""

    def prepare(path):
        for agent, settings in agents.items():
            configure_agent(path, agent, **settings)

    @pytest.fixture(scope="module")
    def shared_broker():
        yield from module_broker(prepare)

    return shared_broker


def recovery_rows(db: Path, agent: str, channel: str) -> list[dict]:
    """The broker's response_recovery rows of one conversation (read-only, as operator
    tooling would read them), ``drafts`` decoded."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
    conn.row_factory = sqlite3.Row
    try:
        rows = [dict(row) for row in conn.execute("SELECT * FROM response_recovery")]
    finally:
        conn.close()
    found = [row for row in rows if row.get("agent") == agent and row.get("channel") == channel]
    for row in found:
        if isinstance(row.get("drafts"), bytes):        # kept as msgpack
            row["drafts"] = msgpack.unpackb(row["drafts"], raw=False)
    return found


class ChannelTail:
    """``python -m client tail --channel ID`` as a child process."""

    def __init__(self, pub_endpoint: str, channel: str, home: Path, *args: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "client", "tail", "--pub-endpoint", pub_endpoint,
             "--channel", channel, *args],
            cwd=ROOT, env=child_env(home), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True)
        self.reader = LineReader(self.proc)

    def warm_up(self, session, channel: str, timeout: float = 15.0) -> None:
        """PUB/SUB is a slow joiner: respond to the channel until the tail prints one,
        then read on until the warm-up outputs stop coming (each ends with its number)."""
        deadline = time.monotonic() + timeout
        n = 0
        while time.monotonic() < deadline:
            assert session.respond(content=f"warm-up {n}", channel=channel)["ok"]
            n += 1
            line = self.reader.next_line(0.1)
            if line is not None:
                last = f"warm-up {n - 1}"

                def is_last(text: str) -> bool:
                    return text.endswith(f": {last}") or f'"content": "{last}"' in text
                if not is_last(line):
                    self.reader.wait_line(is_last, timeout)
                return
        raise AssertionError(f"tail --channel printed nothing within {timeout:g} s")

    def close(self) -> None:
        stop_process(self.proc, signal.SIGINT)
        self.proc.stdout.close()
        self.proc.stderr.close()


@pytest.fixture
def channel_tail(shared_broker, tmp_path):
    started: list[ChannelTail] = []

    def _start(channel: str, *args: str) -> ChannelTail:
        tail = ChannelTail(shared_broker.pub_endpoint, channel, tmp_path, *args)
        started.append(tail)
        return tail

    yield _start
    for tail in started:
        tail.close()
