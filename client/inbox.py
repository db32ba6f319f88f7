"""A FIFO of inbound items that any thread may take from, filled in batches by the
transport. A waiting thread may service the connection itself (``serve``) so the item
is read by the thread that waits for it, with no hand-over."""

from __future__ import annotations

import collections
import threading
import time
from typing import Callable


class Waitable:
    """A FIFO any thread may take from, filled in batches by the transport."""

    def __init__(self) -> None:
        self.items: collections.deque[dict] = collections.deque()
        self._cond = threading.Condition(threading.Lock())
        self._waiting = 0

    def put_all(self, items: list[dict]) -> None:
        self.items.extend(items)
        if self._waiting:        # read after extend: a waiter that registered later sees them
            with self._cond:
                self._cond.notify(len(items))

    def take(self, timeout: float | None,
             serve: Callable[[Callable[[], int], float | None], bool] | None = None) -> dict | None:
        """The oldest item, waiting up to ``timeout`` seconds (None: no limit).

        ``serve(done, deadline)``, when given, services the connection on this thread
        until ``done()`` if the connection is free (returns False if not): the item is
        then read by the thread that waits for it, with no hand-over.
        """
        if timeout is not None and timeout < 0:
            raise ValueError("'timeout' must be a non-negative number")
        items = self.items
        try:
            return items.popleft()
        except IndexError:
            pass
        deadline = None
        if timeout is not None:
            if timeout == 0:
                return None
            deadline = time.monotonic() + timeout
        if serve is not None:
            while serve(items.__len__, deadline):
                try:
                    return items.popleft()
                except IndexError:   # another thread took it, or the session is closing
                    pass
                if deadline is not None and time.monotonic() >= deadline:
                    return None
        with self._cond:
            self._waiting += 1
            try:
                while True:
                    try:
                        return items.popleft()
                    except IndexError:
                        pass
                    if deadline is None:
                        self._cond.wait()
                    else:
                        left = deadline - time.monotonic()
                        if left <= 0:
                            return None
                        self._cond.wait(left)
            finally:
                self._waiting -= 1
