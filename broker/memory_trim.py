"""Giving memory back to the system after a burst.

A burst of large frames (a client sending many 250 KB requests, even ones refused at
once) leaves the C allocator holding the freed memory: CPython returns its small-object
arenas itself, but glibc keeps large freed chunks in its heap, so the broker's RSS stays
at the burst's peak long after. So once a second the shell tells :class:`MemoryTrim`
how many bytes it has received so far; when at least ``BURST_BYTES`` came in since the
last trim and the last second was calm (under ``CALM_BYTES``), it calls glibc's
``malloc_trim(0)``, which releases every free page of the heap (milliseconds, and only
when little is coming in; heartbeats alone never count as a burst). On a C library
without it (musl, macOS) this does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
from typing import Callable

CHECK_S = 1.0            # how often the received count is looked at
BURST_BYTES = 8 << 20    # received since the last trim: worth a trim
CALM_BYTES = 1 << 20     # received in the last CHECK_S: calm enough to trim now


def _collect_and_trim() -> Callable[[], object] | None:
    """A full collection first (the broker's collector runs rarely, by design: cycles a
    refusal leaves, an exception and the frame holding the request, can hold a large
    message until then), then the allocator's trim."""
    trim = _malloc_trim()

    def run() -> None:
        gc.collect()
        if trim is not None:
            trim()
    return run


def _malloc_trim() -> Callable[[], object] | None:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        trim = libc.malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return lambda: trim(0)


class MemoryTrim:
    """``round(received, now)`` every loop round, with the bytes received so far."""

    def __init__(self, trim: Callable[[], object] | None = None) -> None:
        self._trim = trim if trim is not None else _collect_and_trim()
        self._next_check = 0.0
        self._at_check = 0          # bytes received at the last check
        self._at_trim = 0           # ... at the last trim
        self.trims = 0

    def round(self, received: int, now: float) -> None:
        if now < self._next_check:
            return
        self._next_check = now + CHECK_S
        calm = received - self._at_check < CALM_BYTES
        self._at_check = received
        if calm and received - self._at_trim >= BURST_BYTES:
            self._at_trim = received
            if self._trim is not None:
                self._trim()
                self.trims += 1
