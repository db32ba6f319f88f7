"""Message ids: one id, one message.

A client picks the id of every send, ask and reply, and retries with the same id
after a reconnect. The broker remembers recent ids with their sender, a fingerprint
of what was sent and the answer it gave: a retry of the same message gets the same
answer and no second delivery; the same id with another sender, target or payload is
refused. Memory is bounded: the oldest ids are forgotten first (see
:class:`~broker.core.kernel.bounded.RecentMap`).

An answer is remembered as a success (its fields) or a :class:`Refusal` (its code,
redirect and text), and replayed as exactly that. A refusal is never kept as the
raised exception: its traceback holds the frames it went through, and they hold the
request and the whole batch it came in. So what one id costs is bounded whatever the
request carried: the id, the sender id, a hash, and an answer of at most
:data:`REFUSAL_TEXT_MAX` characters of text (identical refusals share one record).
"""

from __future__ import annotations

from typing import Any, NamedTuple

from schemas.errors import BusError
from schemas.limits import REMEMBERED_MESSAGE_IDS

from broker.core.kernel.bounded import RecentMap

DEFAULT_CAPACITY = REMEMBERED_MESSAGE_IDS
# Stands for "this entry's own id" in answers recorded for a batch (one shared tuple).
_OWN_ID = "\x00own id"
REFUSAL_TEXT_MAX = 200      # characters of a remembered refusal's text (a longer one is cut)
_SHARED_MAX = 4096          # distinct refusals shared by every id refused alike


class Refusal(NamedTuple):
    """A remembered refusal: what its reply said, and nothing of the request."""

    code: str
    text: str
    endpoint: str | None = None      # a redirect's (see schemas.errors.REDIRECTS)
    server_key: str | None = None

    def error(self) -> BusError:
        """A fresh BusError for this answer (one raised again would grow its traceback)."""
        if self.endpoint is None:
            return BusError.with_text(self.code, self.text)
        return BusError.with_text(self.code, self.text, endpoint=self.endpoint,
                                  server_key=self.server_key)


class MessageIds:
    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        self.capacity = capacity
        # id -> (sender id, fingerprint, answer items | Refusal | None while
        # pending). Successes are tuples of atomic values only (no dict inside): the
        # garbage collector stops tracking them, instead of walking a couple of
        # hundred thousand of them on every full collection.
        self._seen: RecentMap[str, tuple[str, int, Any]] = RecentMap(capacity)
        self._refusals: dict[Refusal, Refusal] = {}     # one record per distinct refusal

    def __len__(self) -> int:
        return len(self._seen)

    def __contains__(self, msg_id: str) -> bool:
        return msg_id in self._seen

    def lookup(self, msg_id: str, sender_id: str,
               fingerprint: int) -> tuple[dict | BusError | None] | None:
        """For a retry of this exact message, a 1-tuple of the first answer (a dict,
        a new BusError, or None while that answer is not known yet); None for a new id.

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
        if items.__class__ is Refusal:
            return (items.error(),)
        answer = dict(items)
        if answer.get("messageId") is _OWN_ID:
            answer["messageId"] = msg_id
        return (answer,)

    def record(self, msg_id: str, sender_id: str, fingerprint: int,
               answer: dict[str, Any] | BusError | None) -> None:
        self._seen[msg_id] = (sender_id, fingerprint, self._kept(answer))

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
            self._seen[msg_id] = (entry[0], entry[1], self._kept(answer))

    def _kept(self, answer: dict[str, Any] | BusError | None) -> Any:
        if answer is None:
            return None
        if isinstance(answer, BusError):
            kept = refusal(answer)
            shared = self._refusals.get(kept)
            if shared is not None:
                return shared
            if len(self._refusals) < _SHARED_MAX:
                self._refusals[kept] = kept
            return kept
        return tuple(answer.items())


def refusal(error: BusError) -> Refusal:
    """What is kept of ``error``: its reply's code, redirect and (cut) text."""
    reply = error.reply()
    text = reply["error"]
    if len(text) > REFUSAL_TEXT_MAX:
        text = text[:REFUSAL_TEXT_MAX - 1] + "…"
    return Refusal(error.code, text, reply.get("endpoint"), reply.get("serverKey"))


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
