"""load_sessions.py observers: the watcher session's presence log and a status prober.

:class:`Watcher` records every in-band presence event with its arrival time;
:class:`Prober` calls ``status`` every 50 ms while a busy phase runs, to show whether
the broker stays responsive.
"""

from __future__ import annotations

import threading
import time

from benchkit.report import pct


class Watcher(threading.Thread):
    """Takes the watcher session's presence events as they come, with arrival times."""

    def __init__(self, session) -> None:
        super().__init__(name="watcher", daemon=True)
        self.session = session
        self.log: list[tuple[float, str, str, str]] = []   # (monotonic, event, name, id)
        self.lock = threading.Lock()
        self.halt = threading.Event()
        self.check = None          # called while waiting: raises when the run is lost

    def run(self) -> None:
        while not self.halt.is_set():
            ev = self.session.next_event(0.2)
            if ev is None:
                continue
            sess = ev.get("session") or {}
            with self.lock:
                self.log.append((time.monotonic(), str(ev.get("event")), str(sess.get("name")),
                                 str(sess.get("id"))))

    def snapshot(self, start: int = 0) -> list[tuple[float, str, str, str]]:
        with self.lock:
            return self.log[start:]

    def mark(self) -> int:
        with self.lock:
            return len(self.log)

    def wait_for(self, pred, timeout: float, start: int = 0, step: float = 0.05):
        """Poll until ``pred(events since start)`` is true or timeout; returns it."""
        deadline = time.monotonic() + timeout
        while True:
            ok = pred(self.snapshot(start))
            if ok or time.monotonic() >= deadline:
                return ok
            if self.check is not None:
                self.check()
            time.sleep(step)


class Prober(threading.Thread):
    """Calls ``status`` every 50 ms while a busy phase runs: does the broker stay responsive?"""

    def __init__(self, session, interval: float = 0.05) -> None:
        super().__init__(name="prober", daemon=True)
        self.session = session
        self.interval = interval
        self.times: list[float] = []
        self.bad = 0
        self.halt = threading.Event()

    def run(self) -> None:
        while True:
            t = time.perf_counter()
            res = self.session.intercom(action="status")
            self.times.append(time.perf_counter() - t)
            if not res.get("ok"):
                self.bad += 1
            if self.halt.wait(self.interval):
                return

    def __enter__(self) -> Prober:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.halt.set()
        self.join(15)

    def summary(self) -> str:
        t = self.times
        text = (f"p50 {pct(t, 50) * 1e3:.1f} ms  p99 {pct(t, 99) * 1e3:.1f} ms  "
                f"max {max(t, default=float('nan')) * 1e3:.1f} ms  ({len(t)} calls)")
        return text + (f", {self.bad} FAILED" if self.bad else "")


