"""When a broker started on demand stops by itself.

A client that finds no broker at the default endpoint starts one (see
:mod:`client.autostart`) with ``--exit-when-idle SECONDS``: such a broker serves while
it holds a session of its own and stops once it has held none for that long, counted
from its start too (so a broker whose starter died before connecting goes as well).
Sessions mirrored from other brokers are not its own. The shell asks once a round,
with the monotonic time it already read; nothing here reads a clock.
"""

from __future__ import annotations


class IdleExit:
    """``due(sessions, now)`` is True once ``after_s`` passed with ``sessions == 0``."""

    def __init__(self, after_s: float, now: float) -> None:
        self.after_s = after_s
        self._idle_since: float | None = now

    def due(self, sessions: int, now: float) -> bool:
        if sessions:
            self._idle_since = None
            return False
        if self._idle_since is None:
            self._idle_since = now
        return now - self._idle_since >= self.after_s
