"""Message ids: one id, one message.

A client picks the id of every send, ask and reply, and retries with the same id
after a reconnect. The broker remembers recent ids with their sender, a fingerprint
of what was sent and the answer it gave: a retry of the same message gets the same
answer and no second delivery; the same id with another sender, target or payload is
refused. Memory is bounded: the oldest ids are forgotten first (see
:class:`~broker.core.bounded.RecentMap`).
"""

from __future__ import annotations

from typing import Any

from schemas.errors import BusError

from .bounded import RecentMap

DEFAULT_CAPACITY = 200_000
# Stands for "this entry's own id" in answers recorded for a batch (one shared tuple).
_OWN_ID = "\x00own id"


class MessageIds:
    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        self.capacity = capacity
        # id -> (sender id, fingerprint, answer items or None while pending). Tuples
        # of atomic values only (no dict inside): the garbage collector stops
        # tracking them, instead of walking a couple of hundred thousand of them on
        # every full collection.
        self._seen: RecentMap[str, tuple[str, int, tuple | None]] = RecentMap(capacity)

    def __len__(self) -> int:
        return len(self._seen)

    def lookup(self, msg_id: str, sender_id: str, fingerprint: int) -> tuple[dict | None] | None:
        """For a retry of this exact message, a 1-tuple of the first answer (None
        while that answer is not known yet); None for a new id.

        Raises BusError(message_id_conflict) when the id was used for anything else.
        """
        entry = self._seen.get(msg_id)
        if entry is None:
            return None
        if entry[0] != sender_id or entry[1] != fingerprint:
            raise BusError("message_id_conflict", id=msg_id)
        items = entry[2]
        if items is None:
            return (None,)
        answer = dict(items)
        if answer.get("messageId") is _OWN_ID:
            answer["messageId"] = msg_id
        return (answer,)

    def record(self, msg_id: str, sender_id: str, fingerprint: int,
               answer: dict[str, Any] | None) -> None:
        self._seen[msg_id] = (sender_id, fingerprint, None if answer is None else tuple(answer.items()))

    def record_delivered(self, msg_ids: list[str], sender_id: str, fingerprints: list[int],
                         answer: dict[str, Any]) -> None:
        """``record`` for each id of a batch whose answers are ``answer`` plus the id as
        ``messageId``. The entries share one items tuple, whose ``messageId`` is
        filled in from the id on lookup (see :data:`_OWN_ID`)."""
        items = (*answer.items(), ("messageId", _OWN_ID))
        self._seen.put_all(msg_ids, [(sender_id, mark, items) for mark in fingerprints])

    def generations(self) -> tuple[dict, dict]:
        """For ``id in young or id in old`` in a tight loop (valid until the next write)."""
        return self._seen.generations()

    def answer(self, msg_id: str, answer: dict[str, Any]) -> None:
        entry = self._seen.get(msg_id)
        if entry is not None:
            self._seen[msg_id] = (entry[0], entry[1], tuple(answer.items()))


def fingerprint(action: str, params: dict[str, Any]) -> int:
    """A hash of everything that makes a message this message."""
    attachments = params.get("attachments")
    return hash((action, params.get("to"), params.get("message"), params.get("replyTo"),
                 repr(attachments) if attachments else None))


def text_fingerprint(action: str, to: str, message: str) -> int:
    """``fingerprint`` of a message with text only (no replyTo, no attachments)."""
    return hash((action, to, message, None, None))
