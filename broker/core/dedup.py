"""Message ids: one id, one message.

A client picks the id of every send, ask and reply, and retries with the same id
after a reconnect. The broker remembers recent ids with their sender, a fingerprint
of what was sent and the answer it gave: a retry of the same message gets the same
answer and no second delivery; the same id with another sender, target or payload is
refused. Memory is bounded: the oldest ids are forgotten first.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from schemas.errors import BusError

DEFAULT_CAPACITY = 200_000


class MessageIds:
    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        self.capacity = capacity
        # id -> [sender id, fingerprint, answer fields or None while pending]
        self._seen: OrderedDict[str, list[Any]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._seen)

    def lookup(self, msg_id: str, sender_id: str, fingerprint: int) -> list[Any] | None:
        """The entry of a retry of this exact message, None for a new id.

        Raises BusError(message_id_conflict) when the id was used for anything else.
        """
        entry = self._seen.get(msg_id)
        if entry is None:
            return None
        if entry[0] != sender_id or entry[1] != fingerprint:
            raise BusError("message_id_conflict", id=msg_id)
        return entry

    def record(self, msg_id: str, sender_id: str, fingerprint: int,
               answer: dict[str, Any] | None) -> None:
        self._seen[msg_id] = [sender_id, fingerprint, answer]
        if len(self._seen) > self.capacity:
            self._seen.popitem(last=False)

    def answer(self, msg_id: str, answer: dict[str, Any]) -> None:
        entry = self._seen.get(msg_id)
        if entry is not None:
            entry[2] = answer


def fingerprint(action: str, params: dict[str, Any]) -> int:
    """A hash of everything that makes a message this message."""
    attachments = params.get("attachments")
    return hash((action, params.get("to"), params.get("message"), params.get("replyTo"),
                 repr(attachments) if attachments else None))
