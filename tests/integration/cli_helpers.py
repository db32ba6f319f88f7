"""Running ``python -m client`` as people and scripts do: a real child process on pipes,
its exit code, stdout and stderr."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from .conftest import ROOT, LineReader, child_env, stop_process

CLI = [sys.executable, "-m", "client"]


@dataclass
class Ran:
    code: int
    out: str
    err: str
    seconds: float

    @property
    def lines(self) -> list[str]:
        return self.out.splitlines()

    def json(self):
        return json.loads(self.out)


def run_cli(home: Path, *args: str, stdin: str | None = None, timeout: float = 60) -> Ran:
    """``python -m client ARGS`` to its end (HOME: ``home``; no intercom variables)."""
    started = time.monotonic()
    done = subprocess.run([*CLI, *args], cwd=ROOT, capture_output=True, text=True,
                          input=stdin if stdin is not None else "", timeout=timeout,
                          env=child_env(home))
    return Ran(done.returncode, done.stdout, done.stderr, time.monotonic() - started)


class Running:
    """``python -m client ARGS`` left running: its stdout read line by line."""

    def __init__(self, home: Path, *args: str) -> None:
        self.proc = subprocess.Popen([*CLI, *args], cwd=ROOT, env=child_env(home),
                                     stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)
        self.reader = LineReader(self.proc)

    def interrupt(self) -> tuple[int, str]:
        """Ctrl-C: SIGINT to this process (by its pid); its exit code and stderr."""
        code = stop_process(self.proc, signal.SIGINT)
        return code, self.proc.stderr.read()

    def wait(self, timeout: float = 30) -> tuple[int, str]:
        code = self.proc.wait(timeout)
        return code, self.proc.stderr.read()

    def close(self) -> None:
        stop_process(self.proc, signal.SIGKILL)
        self.proc.stdout.close()
        self.proc.stderr.close()
