"""How the PostgreSQL store stays quick while the server cannot be reached: a
connection is opened again in the background, and a call on a connection that stopped
answering is cut after a bound.

Why. libpq waits up to its connect timeout (2 s at least, per address) for a server
whose packets are dropped, and a statement sent on such a connection waits for the
kernel to give up (TCP retransmissions, keepalives: many seconds, forever behind a
middlebox that acknowledges). The persistence worker does one thing at a time, so
every durable request queued behind such a wait would pay it; the first ones outlast
a client's 10 s timeout. So:

* :class:`Reconnector` opens a connection in a thread of its own, one attempt after
  another (a pause of ``pause_s`` after each failure), until one opens or it is
  stopped. While it runs the server is known to be down: the store's user is told so
  at once (``take(0)`` is None) and pays no connect timeout;
* :class:`CallLimit` cuts (``shutdown(2)``) the socket of a call still running past
  its deadline, so libpq returns at once with the connection broken, whatever the
  network does. It never closes the descriptor: the call's own thread does that, after
  the call, so a cut can never land on a descriptor reused by another socket (the
  cut and the end of a call exclude each other under one lock).

Both threads are daemons and hold no state but their own; each costs nothing while
there is nothing to do (no polling: the watcher sleeps until a call's deadline or the
next call, and is woken only when a call starts while it is idle).
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any


class Reconnector:
    """Opens a connection in the background until one opens (see the module docstring).

    ``opener`` is called from the reconnector's thread only; the connection it returns
    is handed over by :meth:`take` (the thread never touches it afterwards)."""

    def __init__(self, opener: Callable[[], Any], pause_s: float) -> None:
        self._opener = opener
        self._pause_s = pause_s
        self._lock = threading.Lock()
        self._tried = threading.Event()       # the first attempt ended, either way
        self._stopped = threading.Event()
        self._conn: Any = None
        self.error: BaseException | None = None     # the last attempt's failure
        self.attempts = 0
        self._thread = threading.Thread(target=self._run, name="postgres-reconnect", daemon=True)
        self._thread.start()

    def take(self, wait_s: float = 0.0) -> Any:
        """The connection once one opened, else None; with ``wait_s``, after waiting
        at most that long for the first attempt to end. The caller owns what it gets;
        a second take gets None."""
        if wait_s > 0:
            self._tried.wait(wait_s)
        with self._lock:
            conn, self._conn = self._conn, None
        return conn

    def stop(self) -> None:
        """Stop trying; a connection opened and not taken is closed. Does not wait."""
        with self._lock:
            self._stopped.set()
            conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    def _run(self) -> None:
        while not self._stopped.is_set():
            try:
                conn = self._opener()
            except Exception as exc:      # refused, timed out, a login refused: try again
                self.error = exc
                self.attempts += 1
                self._tried.set()
                self._stopped.wait(self._pause_s)
                continue
            with self._lock:
                if not self._stopped.is_set():
                    self._conn, conn = conn, None
                    self._tried.set()
            if conn is not None:          # stopped while it was opening
                conn.close()
            return


class CallLimit:
    """Cuts the socket of a call that outlives its deadline (see the module docstring)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._call: tuple[float, int] | None = None    # (deadline, socket fd) of the call
        self._idle = False            # the watcher waits for a call, not for a deadline
        self._closed = False
        self._thread: threading.Thread | None = None
        self.cuts = 0                 # calls cut so far

    @contextmanager
    def bounded(self, fd: int, seconds: float) -> Iterator[None]:
        """Run the body as one call on the socket ``fd``: past ``seconds`` the socket
        is shut down, so the call fails (the connection broken) instead of waiting on."""
        cond = self._cond
        with cond:
            self._call = (time.monotonic() + seconds, fd)
            if self._thread is None:
                self._thread = threading.Thread(target=self._watch, name="postgres-call-limit",
                                                daemon=True)
                self._thread.start()
            elif self._idle:
                cond.notify()
        try:
            yield
        finally:
            with cond:
                self._call = None

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify()

    def _watch(self) -> None:
        cond = self._cond
        with cond:
            while not self._closed:
                call = self._call
                if call is None:
                    self._idle = True
                    cond.wait()
                    self._idle = False
                    continue
                left = call[0] - time.monotonic()
                if left > 0:
                    cond.wait(left)        # a later call may have replaced this one meanwhile
                    continue
                self._call = None          # cut once; the call ends on its own thread
                self.cuts += 1
                _cut(call[1])


def _cut(fd: int) -> None:
    """Shut the socket ``fd`` down both ways (through a duplicate: ``fd`` stays open)."""
    try:
        with socket.socket(fileno=os.dup(fd)) as sock:
            sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass      # already closed by the peer or the kernel: the call fails anyway
