"""A descriptor any thread can make readable, to wake a thread sleeping in a poll.

An eventfd where the platform has one, else a non-blocking pipe. ``pending`` says a
wake-up was signalled and not consumed yet, so hot paths skip the syscall when the
sleeper is already due to wake.
"""

from __future__ import annotations

import os


class Waker:
    def __init__(self) -> None:
        if hasattr(os, "eventfd"):
            self.fd = self._write_fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        else:  # pragma: no cover - non-Linux
            self.fd, self._write_fd = os.pipe()
            os.set_blocking(self.fd, False)
            os.set_blocking(self._write_fd, False)
        self.pending = False
        self._closed = False

    def wake(self) -> None:
        self.pending = True
        if self._closed:
            return
        try:
            if self._write_fd == self.fd:
                os.eventfd_write(self._write_fd, 1)
            else:  # pragma: no cover - pipe fallback
                os.write(self._write_fd, b"x")
        except (BlockingIOError, OSError):
            pass   # already readable (pipe full), or closed meanwhile

    def clear(self) -> None:
        """Consume the wake-up, then clear ``pending``: a waker that saw it still set
        is served by the round that follows, and any later one wakes again."""
        try:
            if self._write_fd == self.fd:
                os.eventfd_read(self.fd)
            else:  # pragma: no cover - pipe fallback
                os.read(self.fd, 4096)
        except (BlockingIOError, OSError):
            pass
        self.pending = False

    def close(self) -> None:
        """Only once nobody polls the descriptor any more."""
        self._closed = True
        for fd in {self.fd, self._write_fd}:
            try:
                os.close(fd)
            except OSError:
                pass
