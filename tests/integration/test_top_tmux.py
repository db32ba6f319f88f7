"""``python -m client top`` in a real terminal: tmux runs it against a real broker
process, the test reads the screen until the expected text appears, types ``q`` and
checks the exit status. tmux is installed if missing; without it the test fails."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
import threading
import time
import uuid

import pytest

from client import Client
from tests.conftest import ROOT

from .conftest import child_env

DEADLINE_S = 20.0
EXITED = "top exited with "


def tmux_binary() -> str:
    found = shutil.which("tmux")
    if found is None:
        subprocess.run(["apt-get", "update"], capture_output=True, timeout=300)
        subprocess.run(["apt-get", "install", "-y", "tmux"], capture_output=True, timeout=300)
        found = shutil.which("tmux")
    assert found is not None, "tmux is needed and could not be installed (apt-get install tmux)"
    return found


class Terminal:
    """One tmux server of its own (``-L``), 120x40, running one shell command."""

    def __init__(self, command: str, env: dict) -> None:
        self.tmux = [tmux_binary(), "-L", f"ic-top-{uuid.uuid4().hex[:8]}"]
        self.env = env
        subprocess.run([*self.tmux, "new-session", "-d", "-x", "120", "-y", "40", command],
                       env=env, check=True, timeout=30)

    def screen(self) -> str:
        done = subprocess.run([*self.tmux, "capture-pane", "-p"], env=self.env,
                              capture_output=True, text=True, timeout=30)
        return done.stdout

    def wait_for(self, *texts: str) -> str:
        deadline = time.monotonic() + DEADLINE_S
        screen = ""
        while time.monotonic() < deadline:
            screen = self.screen()
            if all(text in screen for text in texts):
                return screen
            time.sleep(0.1)      # polling the screen for a redraw, not a settle
        raise AssertionError(f"{texts} not on screen within {DEADLINE_S:g} s:\n{screen}")

    def type(self, keys: str) -> None:
        subprocess.run([*self.tmux, "send-keys", keys], env=self.env, check=True, timeout=30)

    def close(self) -> None:
        subprocess.run([*self.tmux, "kill-server"], env=self.env, capture_output=True, timeout=30)


@pytest.fixture
def terminal_for(tmp_path):
    opened = []

    def start(*args: str) -> Terminal:
        top = " ".join(shlex.quote(a) for a in [sys.executable, "-m", "client", *args])
        # The shell stays after top ends, to print its exit status where the test reads.
        command = f"cd {shlex.quote(str(ROOT))} && {top}; echo \"{EXITED}$?\"; exec sleep 600"
        terminal = Terminal(command, child_env(tmp_path, TERM="xterm-256color"))
        opened.append(terminal)
        return terminal

    yield start
    for terminal in opened:
        terminal.close()


def test_top_shows_sessions_and_counters_then_q_quits_with_status_0(broker, terminal_for):
    with Client.connect(name="watched-by-top", endpoint=broker.endpoint, group="topgroup",
                        timeout=15) as watched:
        assert watched.intercom(action="send", to="nobody-here", message="x")["code"] == \
            "target_not_found"
        terminal = terminal_for("--endpoint", broker.endpoint, "top")
        screen = terminal.wait_for("intercom top", "watched-by-top", "target_not_found")
        assert "messages" in screen and "q quits" in screen
        terminal.type("q")
        terminal.wait_for(f"{EXITED}0")


def test_top_without_a_broker_exits_3(tmp_path, terminal_for):
    terminal = terminal_for("--endpoint", f"ipc://{tmp_path}/nobody.sock", "top")
    terminal.wait_for(f"{EXITED}3", "No broker is listening")


def test_top_shows_a_refusal_rate_while_refusals_come_slower_than_it_redraws(
        broker, terminal_for):
    """One refusal every 2.5 s: between two answers a second apart the count mostly
    does not move, and "refusals 0.0/s" showed on most redraws while refusals went on.
    Over the last seconds' answers, every redraw after the first refusal shows a rate."""
    stop = threading.Event()
    refused = []

    def refuse_now_and_then() -> None:
        with Client.connect(name="refuser", endpoint=broker.endpoint, timeout=15) as session:
            while True:
                refused.append(session.intercom(action="send", to="nobody", message="x")["code"])
                if stop.wait(2.5):       # the workload's own pace, not a settle
                    return

    terminal = terminal_for("--endpoint", broker.endpoint, "top")
    terminal.wait_for("intercom top")
    worker = threading.Thread(target=refuse_now_and_then)
    worker.start()
    try:
        terminal.wait_for("1 in all)")
        seen: set[str] = set()
        deadline = time.monotonic() + 6.0           # several redraws, two refusals more
        while time.monotonic() < deadline:
            rate = re.search(r"refusals (\S+)/s \((\d+) in all\)", terminal.screen())
            if rate:
                seen.add(rate.group(1))
            time.sleep(0.2)      # polling the screen for a redraw, not a settle
        assert seen and "0.0" not in seen, seen
    finally:
        stop.set()
        worker.join(30)
    assert set(refused) == {"target_not_found"} and len(refused) >= 3, refused
    terminal.type("q")
    terminal.wait_for(f"{EXITED}0")
