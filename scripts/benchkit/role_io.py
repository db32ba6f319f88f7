"""Child side of the role protocol, shared by every bench role.

A role prints JSON lines on stdout: ``{"event": "ready", ...}`` once it is set up,
then (senders) waits for ``go`` on stdin, and ends with ``{"event": "result", ...}``
(``run_role`` prints ``{"event": "error", ...}`` when it raises). Receivers time
themselves with :class:`Counter`.
"""

from __future__ import annotations

import json
import sys
import time
import traceback
from typing import Any, Callable

MESSAGE_BYTES = 100
HWM = 100_000                  # same high-water marks as broker and client use


def emit(event: str, **fields: Any) -> None:
    sys.stdout.write(json.dumps({"event": event, **fields}) + "\n")
    sys.stdout.flush()


def run_reporting(body: Callable[[], object]) -> int:
    """Run a role's body: 0, or 1 after an ``error`` event carrying the traceback."""
    try:
        body()
        return 0
    except SystemExit:
        raise
    except BaseException:
        emit("error", error=traceback.format_exc())
        return 1


def wait_go() -> None:
    line = sys.stdin.readline()
    if line.strip() != "go":
        raise SystemExit(0)   # parent gone or aborted


class Counter:
    """Receiver-side clock: starts after ``warm`` messages, stops at ``warm + count``."""

    def __init__(self, warm: int, count: int) -> None:
        self.warm = warm
        self.total = warm + count
        self.n = 0
        self.t0 = self.t1 = None
        self.cpu0 = time.process_time()     # all threads of this process

    def hit(self, k: int = 1) -> bool:
        self.n += k
        if self.t0 is None and self.n >= self.warm:
            self.t0 = time.perf_counter()
            self.n0 = self.n
        if self.n >= self.total:
            self.t1 = time.perf_counter()
            return True
        return False

    def result(self) -> dict:
        complete = self.t1 is not None
        t1 = self.t1 if complete else getattr(self, "t_last", None)
        cpu_s = time.process_time() - self.cpu0
        if self.t0 is None or t1 is None or t1 <= self.t0:
            return {"received": self.n, "complete": False, "rate": 0.0, "cpu_s": cpu_s}
        measured = self.n - self.n0
        return {"received": self.n, "complete": complete, "measured": measured,
                "elapsed_s": t1 - self.t0, "rate": measured / (t1 - self.t0), "cpu_s": cpu_s,
                "t1": t1}
