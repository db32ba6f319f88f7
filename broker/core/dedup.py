"""Message ids: one id, one message.

A client picks the id of every send, ask and reply, and retries with the same id
after a reconnect. The broker remembers recent ids with their sender, a fingerprint
of what was sent and the answer it gave: a retry of the same message gets the same
answer and no second delivery; the same id with another sender, target or payload is
refused. Memory is bounded: the oldest ids are forgotten first (see
:class:`~broker.core.bounded.RecentMap`).

An answer is remembered as a success (its fields) or a refusal (the
:class:`~schemas.errors.BusError`), and replayed as exactly that.
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
        # id -> (sender id, fingerprint, answer items | BusError | None while
        # pending). Successes are tuples of atomic values only (no dict inside): the
        # garbage collector stops tracking them, instead of walking a couple of
        # hundred thousand of them on every full collection.
        self._seen: RecentMap[str, tuple[str, int, Any]] = RecentMap(capacity)

    def __len__(self) -> int:
        return len(self._seen)

    def __contains__(self, msg_id: str) -> bool:
        return msg_id in self._seen

    def lookup(self, msg_id: str, sender_id: str,
               fingerprint: int) -> tuple[dict | BusError | None] | None:
        """For a retry of this exact message, a 1-tuple of the first answer (a dict,
        a BusError, or None while that answer is not known yet); None for a new id.

        Raises BusError(message_id_conflict) when the id was used for anything else.
        """
        entry = self._seen.get(msg_id)
        if entry is None:
            return None
        if entry[0] != sender_id or entry[1] != fingerprint:
            raise BusError("message_id_conflict", id=msg_id)
        items = entry[2]
        if items is None or isinstance(items, BusError):
            return (items,)
        answer = dict(items)
        if answer.get("messageId") is _OWN_ID:
            answer["messageId"] = msg_id
        return (answer,)

    def record(self, msg_id: str, sender_id: str, fingerprint: int,
               answer: dict[str, Any] | BusError | None) -> None:
        self._seen[msg_id] = (sender_id, fingerprint, _stored(answer))

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

    def answer(self, msg_id: str, answer: dict[str, Any] | BusError) -> None:
        """The final answer of a message whose answer was pending."""
        entry = self._seen.get(msg_id)
        if entry is not None:
            self._seen[msg_id] = (entry[0], entry[1], _stored(answer))


def _stored(answer: dict[str, Any] | BusError | None) -> Any:
    if isinstance(answer, BusError):
        # A raised error holds its traceback, whose frames hold the request's locals
        # (a whole batch of texts): kept for a retry, it must hold only itself.
        answer.__traceback__ = answer.__context__ = answer.__cause__ = None
        return answer
    return answer if answer is None else tuple(answer.items())


def fingerprint(action: str, to: str | None, message: str | None,
                reply_to: str | None = None, attachments: list | None = None) -> int:
    """A hash of everything that makes a message this message."""
    return hash((action, to, message, reply_to, repr(attachments) if attachments else None))


def fingerprints(action: str, to: Any, messages: list, reply_to: str | None = None,
                 attachments: list | None = None) -> list[int]:
    """:func:`fingerprint` of each message of a batch to one target (one call, not one
    per message)."""
    shown = repr(attachments) if attachments else None
    return [hash((action, to, message, reply_to, shown)) for message in messages]
