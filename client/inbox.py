"""FIFOs of inbound items that any thread may take from, filled in batches by the
transport. A waiting thread may service the connection itself (``serve``) so the item
is read by the thread that waits for it, with no hand-over.

:class:`Inbox` is the one for messages: it counts what it holds, so the transport can
stop reading the socket while it is full (see :mod:`client.transport`), and it drops
a message id it has handed out already (a sender's resend to a restarted broker,
which has forgotten the ids it delivered). Invariant: ``size`` is the sum of
:func:`message_size` over the messages held, give or take takes in progress.
"""

from __future__ import annotations

import collections
import threading
import time
from dataclasses import dataclass
from typing import Callable

from schemas.limits import RECEIVED_IDS_KEPT

DEFAULT_LIMIT_BYTES = 8 << 20     # Client.connect(inbox_limit_bytes=...)
# What a message costs besides its text (its envelope fields), for the inbox's count.
MESSAGE_OVERHEAD_BYTES = 200
# Ids of messages handed out, remembered to drop a resent copy: a restart resends only
# what was still owed an answer, a few seconds' worth.
RECENT_IDS = RECEIVED_IDS_KEPT


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


def message_size(msg: dict) -> int:
    """What a held message counts for: its text's length plus a fixed overhead (an
    estimate of its memory, not its bytes on the wire)."""
    text = msg.get("message")
    return MESSAGE_OVERHEAD_BYTES + (len(text) if text.__class__ is str else 0)


@dataclass(frozen=True, slots=True)
class InboxStatistics:
    """What a session's inbox holds now (see :meth:`client.session.Session.inbox_statistics`)."""

    messages: int            # messages waiting for receive()
    size: int                # their size as :func:`message_size` counts it
    limit_bytes: int         # past this the transport stops reading the socket
    paused: bool             # reading is paused now
    duplicates_dropped: int  # resent copies of messages already handed out


class Inbox(Waitable):
    """The message FIFO: counted (``size``) and deduplicated by message id.

    Filled by one thread at a time (the one servicing the socket), which also drops
    copies (an id put before, whether still held or handed out); taken from by any
    thread. ``on_take`` runs after each take, on the taking thread (the transport
    resumes reading there if it paused).
    """

    def __init__(self, on_take: Callable[[], None] | None = None) -> None:
        super().__init__()
        self._added = 0                   # filling side only
        self._removed = 0                 # under _count_lock: takers race
        self._count_lock = threading.Lock()
        self.on_take = on_take            # may be set once the transport exists
        self._young: set[str] = set()     # ids put lately (see put_all)
        self._old: set[str] = set()
        self.duplicates_dropped = 0

    @property
    def size(self) -> int:
        return self._added - self._removed

    def put_all(self, items: list[dict]) -> None:
        # Copies may come in one batch too (a broker that read two copies of an entry
        # back from its store hands both to a starting stage at once): each id is
        # remembered as it is put, so the second copy is dropped like a later one.
        # Two generations of sets: between RECENT_IDS/2 and RECENT_IDS of the newest
        # ids are remembered, at O(1) each (popping a dict's oldest key is not).
        young, old = self._young, self._old
        fresh = []
        for msg in items:
            msg_id = msg.get("id")
            if msg_id in young or msg_id in old:
                self.duplicates_dropped += 1
                continue
            young.add(msg_id)
            if len(young) >= RECENT_IDS // 2:
                old, young = young, set()
                self._old, self._young = old, young
            fresh.append(msg)
        self._added += sum(map(message_size, fresh))
        super().put_all(fresh)

    def take(self, timeout: float | None,
             serve: Callable[[Callable[[], int], float | None], bool] | None = None) -> dict | None:
        """The oldest message, waiting up to ``timeout``."""
        msg = Waitable.take(self, timeout, serve)
        if msg is not None:
            size = message_size(msg)
            with self._count_lock:
                self._removed += size
            if self.on_take is not None:
                self.on_take()
        return msg
