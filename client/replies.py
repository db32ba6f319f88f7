"""Replies: cheap futures for the answers a transport is owed.

One condition serves every reply of a transport, so making a reply costs no lock of
its own and a whole frame of answers is resolved under one acquisition
(:func:`resolve`). Everything
else (done, cancel, callbacks, ``concurrent.futures.wait``/``as_completed``) is
:class:`concurrent.futures.Future`'s own code, which relies on the private fields
set here (checked on Python 3.11; recheck on an upgrade).
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import CancelledError, Future
from concurrent.futures._base import (CANCELLED, CANCELLED_AND_NOTIFIED, FINISHED, PENDING,
                                      RUNNING)
from typing import Any

OPEN = (PENDING, RUNNING)
_DONE = (FINISHED, CANCELLED, CANCELLED_AND_NOTIFIED)

__all__ = ["FINISHED", "OPEN", "PENDING", "Reply", "resolve"]


class Reply(Future):
    """A Future for one request's answer, sharing its transport's condition.

    Cheaper to make than a plain Future: no Condition of its own, and no waiter or
    callback list until something waits or calls back (``waiter_list`` and
    ``callback_list`` stay None till then). A bulk sender keeps thousands of replies
    alive, and every object they hold is one more for the garbage collector to walk.
    The transport resolves them in batches; since one condition serves many replies,
    waits loop until this reply is done. Everything else (done, cancel, callbacks,
    ``concurrent.futures.wait``/``as_completed``) is Future's own code. ``request`` is
    what was sent, for a resend after a reconnect.
    """

    # Future's fields; the first three are class defaults until first assigned.
    _state = PENDING
    _result = None
    _exception = None
    # Behind Future's _waiters and _done_callbacks: None until first used.
    waiter_list: list | None = None
    callback_list: list | None = None

    def __init__(self, condition: threading.Condition, request: Any = None) -> None:
        # Not Future.__init__: it would make a Condition and two lists per reply.
        self._condition = condition
        self.request = request

    @property
    def _waiters(self) -> list:
        if self.waiter_list is None:
            self.waiter_list = []
        return self.waiter_list

    @property
    def _done_callbacks(self) -> list:
        if self.callback_list is None:
            self.callback_list = []
        return self.callback_list

    def _wait_done(self, timeout: float | None) -> bool:
        """With the condition held: wait until done; False on timeout."""
        if self._state in _DONE:
            return True
        if timeout is None:
            while self._state not in _DONE:
                self._condition.wait()
            return True
        deadline = time.monotonic() + timeout
        while self._state not in _DONE:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            self._condition.wait(left)
        return True

    def result(self, timeout: float | None = None) -> Any:
        if self._state is FINISHED and self._exception is None:
            return self._result       # answered: no lock needed, the state is final
        with self._condition:
            if not self._wait_done(timeout):
                raise TimeoutError()
            if self._state is not FINISHED:
                raise CancelledError()
            if self._exception is not None:
                raise self._exception
            return self._result

    def exception(self, timeout: float | None = None) -> BaseException | None:
        with self._condition:
            if not self._wait_done(timeout):
                raise TimeoutError()
            if self._state is not FINISHED:
                raise CancelledError()
            return self._exception


def resolve(condition: threading.Condition, answers: list[tuple[Reply, Any]]) -> None:
    """Give each reply still open its answer, all under ``condition`` (the one they
    share), then run their done-callbacks outside it, on this thread."""
    callbacks = []
    # The condition's own lock and waiter list (threading.Condition's private fields,
    # as stable as Future's): entering it and notifying nobody cost five Python calls,
    # and mostly nobody waits (the thread owed the answer is the one reading it).
    with condition._lock:
        for reply, value in answers:
            if reply._state in OPEN:
                reply._result = value
                reply._state = FINISHED
                if reply.waiter_list:
                    for waiter in reply.waiter_list:
                        waiter.add_result(reply)
                if reply.callback_list:
                    callbacks.append(reply)
        if condition._waiters:
            condition.notify_all()
    for reply in callbacks:
        reply._invoke_callbacks()
