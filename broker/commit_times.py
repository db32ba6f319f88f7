"""How long the store's commits take: measured by the persistence worker, read by the shell.

The worker calls :meth:`CommitTimes.record` after each committed transaction; the
shell's loop calls :meth:`CommitTimes.snapshot` once a second (for ``stats`` and the
metrics endpoint). Two threads share this object, so both go through one lock, held
for a few list operations only (the sort of the window happens outside it).

Kept: a cumulative histogram over every commit since start (fixed buckets, as
Prometheus reads them) and the latest :data:`WINDOW` durations, from which the
percentiles are read, so they follow what the store does now rather than since start.
"""

from __future__ import annotations

import bisect
import collections
import threading
from dataclasses import dataclass

# Upper bounds in seconds: an fsync on a quiet SSD is under a millisecond, a group
# commit of a client's full window 17-26 ms here, a stalled disk seconds.
BUCKETS_S = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
WINDOW = 1024


@dataclass(frozen=True, slots=True)
class CommitSnapshot:
    count: int                        # commits since start
    sum_s: float                      # their total duration
    buckets: tuple[int, ...]          # cumulative counts per BUCKETS_S bound, then +Inf
    p50_s: float | None               # over the latest WINDOW commits (None: none yet)
    p99_s: float | None


class CommitTimes:
    """Commit durations; :meth:`record` from the worker, :meth:`snapshot` from anyone."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._recent: collections.deque[float] = collections.deque(maxlen=WINDOW)
        self._counts = [0] * (len(BUCKETS_S) + 1)
        self._sum_s = 0.0

    def record(self, seconds: float) -> None:
        slot = bisect.bisect_left(BUCKETS_S, seconds)
        with self._lock:
            self._recent.append(seconds)
            self._counts[slot] += 1
            self._sum_s += seconds

    def snapshot(self) -> CommitSnapshot:
        with self._lock:
            recent = list(self._recent)
            counts = list(self._counts)
            sum_s = self._sum_s
        recent.sort()
        cumulative, total = [], 0
        for count in counts:
            total += count
            cumulative.append(total)
        return CommitSnapshot(total, sum_s, tuple(cumulative), _rank(recent, 0.50),
                              _rank(recent, 0.99))


def _rank(ordered: list[float], q: float) -> float | None:
    """The ``q`` quantile of an ordered list (nearest rank); None when it is empty."""
    if not ordered:
        return None
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]
