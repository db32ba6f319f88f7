"""What the MCP server owes the model: every inbound message, handed over exactly once.

Theory of operation. The server takes each message off its bus session
(``Session.receive()``) as it comes and records it with :meth:`Handover.arrived`.
A message is *handed over* only when a tool result returned to the model carries it:
``wait``'s ``messages``, or the ``inbox`` field of any other tool's result. Every
result gets its messages from :meth:`Handover.take`, which returns all the messages
not handed over yet, oldest first, and forgets them.

Invariants (tested in tests/unit/test_mcp_inbox.py):

* each message id is returned by :meth:`take` at most once, and every message
  :meth:`arrived` accepted is returned by exactly one :meth:`take` (none is dropped,
  however many arrive before the next result; a take bounded by ``max_chars``, as a
  host hook's is, leaves the newer ones held for the next);
* :meth:`take` returns messages in the order :meth:`arrived` saw them;
* a copy of an id already seen (held or handed over) is refused by :meth:`arrived`;
* :attr:`Handover.current` is the newest message handed over (the model's current
  turn: what a ``reply`` with no ``replyTo`` answers), never one not yet handed over;
* :attr:`Handover.full` once the messages held reach ``limit_bytes`` (counted as the
  client's inbox counts them): the server then stops taking messages off the bus
  until a result takes these, so the session's own inbox fills and its transport
  stops reading: a model that never calls a tool costs bounded memory;
* a push (:func:`push_for`, a ``notifications/claude/channel`` the host may or may
  not show) changes nothing here: it is not a receipt.

No I/O, no clock, no locks: the server calls it from its one event-loop thread.
"""

from __future__ import annotations

import collections
import json
from dataclasses import dataclass
from typing import Any

from .inbox import DEFAULT_LIMIT_BYTES, message_size

# Ids handed over or held, remembered to refuse a copy: as the client's own inbox,
# two generations so the memory stays bounded.
RECENT_IDS = 4096
PUSH_PREVIEW_CHARS = 2000     # a push carries at most this much of the message text


@dataclass(frozen=True, slots=True)
class HandoverStatistics:
    arrived: int          # messages accepted by arrived()
    handed_over: int      # ... returned by take() since
    held: int             # ... waiting for the next take()
    copies_refused: int   # arrivals refused as copies of an id already seen


class Handover:
    """Messages waiting for a tool result, in arrival order."""

    def __init__(self, limit_bytes: int = DEFAULT_LIMIT_BYTES) -> None:
        self.limit_bytes = limit_bytes
        self.size = 0                         # message_size() of the messages held
        self._held: collections.deque[dict] = collections.deque()
        self._young: set[str] = set()
        self._old: set[str] = set()
        self._arrived = 0
        self._handed_over = 0
        self._copies = 0
        self.current: dict | None = None      # the newest message handed over

    def __len__(self) -> int:
        return len(self._held)

    def arrived(self, msg: dict) -> bool:
        """Hold ``msg`` for the next result. False (and nothing held) for a copy of an
        id already held or handed over."""
        msg_id = msg.get("id")
        if isinstance(msg_id, str):
            if msg_id in self._young or msg_id in self._old:
                self._copies += 1
                return False
            self._young.add(msg_id)
            if len(self._young) >= RECENT_IDS // 2:
                self._old, self._young = self._young, set()
        self._held.append(msg)
        self.size += message_size(msg)
        self._arrived += 1
        return True

    @property
    def full(self) -> bool:
        """Take no more off the bus until the next :meth:`take`."""
        return self.size >= self.limit_bytes

    def take(self, max_chars: int | None = None) -> list[dict]:
        """The messages held, oldest first; they are handed over and never returned
        again. Every one, or with ``max_chars`` the oldest whose JSON texts add up to no
        more than that (always the oldest one, however long): the rest stay held."""
        if max_chars is None:
            taken = list(self._held)
            self._held.clear()
            self.size = 0
        else:
            taken, chars = [], 0
            while self._held:
                chars += len(json.dumps(self._held[0], ensure_ascii=False, default=str))
                if taken and chars > max_chars:
                    break
                taken.append(self._held.popleft())
                self.size -= message_size(taken[-1])
        self._handed_over += len(taken)
        if taken:
            self.current = taken[-1]
        return taken

    def statistics(self) -> HandoverStatistics:
        return HandoverStatistics(self._arrived, self._handed_over, len(self._held), self._copies)


def push_for(msg: dict) -> dict[str, Any]:
    """The params of the ``notifications/claude/channel`` push telling of ``msg``:
    ``content`` (who sent it, then its text, cut at PUSH_PREVIEW_CHARS) and ``meta``
    (string values with identifier keys, as hosts put them on the channel tag)."""
    sender = msg.get("fromName") or msg.get("from") or "?"
    text = msg.get("message") if isinstance(msg.get("message"), str) else ""
    if len(text) > PUSH_PREVIEW_CHARS:
        text = text[:PUSH_PREVIEW_CHARS] + " [...]"
    verb = "asks (a reply is expected)" if msg.get("expectsReply") else "says"
    content = (f"{sender} ({msg.get('from', '?')}) {verb}: {text}\n"
               f"Call the intercom tool (or wait) to take it: the tool result carries it.")
    meta = {"message_id": str(msg.get("id", "")), "from": str(msg.get("from", "")),
            "from_name": str(msg.get("fromName", "")),
            "expects_reply": "true" if msg.get("expectsReply") else "false",
            "sent_at": str(msg.get("sentAt", ""))}
    return {"content": content, "meta": meta}
