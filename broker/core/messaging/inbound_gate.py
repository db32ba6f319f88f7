"""The inbound gate: what reaches a session from other sessions, as its person decides.

A session's policy (:mod:`schemas.attention`: ``accept``, ``hold``, ``refuse``) is set
by its hello (``inbound``) and changed by the ``inbound`` kind (the session itself, or
a control connection acting for it: the person at the terminal,
:mod:`broker.core.messaging.inbound_actions`). The policy is part of the session's
list row, so a sender's broker knows it too.

Rules:

* ``refuse``: a send or an ask naming the session is refused ``inbound_refused`` by
  the resolver (:func:`check_refuse`), before anything is kept.
* ``hold``: every message from another session that would be handed to it
  (:func:`holds`, asked by the one delivery path, :mod:`broker.core.messaging.delivery`)
  is kept here instead, whole, until a person releases it (then it is delivered as it
  would have been), drops it, or :data:`~schemas.attention.HOLD_EXPIRY_S` passes (a
  held ask expires sooner, when the ask ends unanswered: its asker's timeout, either
  side leaving: :func:`ask_ended`).
  The send is answered ``held`` (not ``delivered``). Replies to the session's own asks and
  threads are never held: it asked for them. Entries of a stage's queue are not held
  (their queue delivers them again).
* Nothing is held invisibly: the held messages are listed (``held``), each has a
  receipt (:func:`receipt`: ``held``, then ``dropped`` or ``expired``; a released one
  is ``released`` until its receiver reads it, then goes on as any delivery:
  :func:`released`),
  and the sender gets one ``held_settled`` event when a person (or the clock) settles it.
* Bounded: at most :data:`~schemas.attention.MAX_HELD_PER_SESSION` messages and the
  broker's backlog bound in bytes per session (past either the oldest expires), and
  receipts for the last ``RECEIPTS_KEPT`` held messages.
* Held messages live in this broker's memory (as live messages do): a broker that
  stops loses them, and their senders are not told.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from schemas import envelopes
from schemas.attention import HELD_PREVIEW_CHARS, HOLD, HOLD_EXPIRY_S, \
    MAX_HELD_PER_SESSION, REFUSE
from schemas.errors import BusError
from schemas.limits import RECEIPTS_KEPT

from broker.core.kernel.bounded import RecentMap
from broker.core.kernel.commands import Send
from broker.core.kernel.state import State
from broker.core.sessions.backlog import ITEM_BYTES, text_bytes
from broker.core.sessions.registry import Session

HELD_SETTLED = "held_settled"
HELD, RELEASED, DROPPED, EXPIRED = "held", "released", "dropped", "expired"


@dataclass(slots=True, eq=False)
class Held:
    """One message kept for a person to decide on, with what its delivery needs."""

    msg_id: str
    sender_id: str
    sender_name: str
    to_id: str
    message: Any
    attachments: list
    sent_at: float
    expects_reply: bool
    extra: dict[str, Any] | None
    size: int
    held_at: float
    expires_at: float

    def row(self) -> dict[str, Any]:
        text = self.message if self.message.__class__ is str else ""
        preview = text if len(text) <= HELD_PREVIEW_CHARS else text[:HELD_PREVIEW_CHARS] + " [...]"
        return {"messageId": self.msg_id, "from": self.sender_id, "fromName": self.sender_name,
                "sentAt": self.sent_at, "heldAt": self.held_at, "expiresAt": self.expires_at,
                "expectsReply": self.expects_reply, "chars": len(text),
                "attachments": len(self.attachments), "preview": preview}


@dataclass(slots=True)
class HeldReceipt:
    sender_id: str
    to_id: str
    to_name: str
    held_at: float
    state: str = HELD
    settled_at: float | None = None


@dataclass(eq=False)
class InboundGate:
    """The messaging room's held messages, by receiver id (oldest first), and receipts."""

    held: dict[str, OrderedDict[str, Held]] = field(default_factory=dict)
    bytes: dict[str, int] = field(default_factory=dict)
    receipts: RecentMap[str, HeldReceipt] = field(default_factory=lambda: RecentMap(RECEIPTS_KEPT))

    def count(self, session_id: str) -> int:
        return len(self.held.get(session_id, ()))


def check_refuse(session: Session) -> None:
    """A send or ask may name ``session``. Raises BusError(inbound_refused)."""
    if session.inbound == REFUSE:
        raise BusError("inbound_refused", name=session.name, id=session.id)


def holds(target: Session, sender_id: str, extra: dict[str, Any] | None) -> bool:
    """Whether a message from ``sender_id`` to ``target`` (held here) is held."""
    return target.inbound == HOLD and target.broker is None and sender_id != target.id and \
        not (extra and "replyTo" in extra)


def hold(state: State, target: Session, sender_id: str, sender_name: str, msg_id: str,
         message: Any, attachments: list, sent_at: float, expects_reply: bool,
         extra: dict[str, Any] | None) -> None:
    """Keep one message for ``target``'s person (see the rules above)."""
    gate = state.gate
    size = (text_bytes([message]) if message.__class__ is str else 0) + ITEM_BYTES
    queue = gate.held.setdefault(target.id, OrderedDict())
    queue[msg_id] = Held(msg_id, sender_id, sender_name, target.id, message, attachments or [],
                         sent_at, expects_reply, extra, size, state.wall,
                         state.wall + HOLD_EXPIRY_S)
    gate.bytes[target.id] = gate.bytes.get(target.id, 0) + size
    gate.receipts[msg_id] = HeldReceipt(sender_id, target.id, target.name, state.wall)
    state.stats["inbound.held"] += 1
    while len(queue) > MAX_HELD_PER_SESSION or \
            (len(queue) > 1 and gate.bytes[target.id] > state.limits.max_backlog_bytes):
        settle(state, take_one(state, target.id, next(iter(queue))), EXPIRED)


def take_one(state: State, session_id: str, msg_id: str) -> Held:
    """Take one held message off ``session_id``'s list. Raises BusError(unknown_held)."""
    gate = state.gate
    queue = gate.held.get(session_id)
    held = queue.pop(msg_id, None) if queue else None
    if held is None:
        raise BusError("unknown_held", message_id=msg_id)
    gate.bytes[session_id] -= held.size
    if not queue:
        del gate.held[session_id]
        del gate.bytes[session_id]
    return held


def take_all(state: State, session_id: str) -> list[Held]:
    return [take_one(state, session_id, msg_id) for msg_id in list(state.gate.held.get(session_id, ()))]


def settle(state: State, held: Held, outcome: str) -> None:
    """``held`` was released, dropped or expired: its receipt says so and its sender is
    told once (``held_settled``)."""
    receipt = state.gate.receipts.get(held.msg_id)
    to_name = held.to_id
    if receipt is not None:
        receipt.state, receipt.settled_at = outcome, state.wall
        to_name = receipt.to_name
    state.stats[f"inbound.{outcome}"] += 1
    state.note("held_settled", to=held.to_id, sender=held.sender_id, outcome=outcome)
    sender = state.registry.by_id.get(held.sender_id)
    if sender is not None and not sender.is_control:
        state.out.append(Send(sender.identity, envelopes.event(
            HELD_SETTLED, messageId=held.msg_id, to=held.to_id, toName=to_name,
            outcome=outcome, at=state.wall)))


def expire(state: State) -> None:
    """Held messages past their time expire (checked from the engine's tick)."""
    wall = state.wall
    for session_id in list(state.gate.held):
        queue = state.gate.held.get(session_id)
        while queue and next(iter(queue.values())).expires_at <= wall:
            settle(state, take_one(state, session_id, next(iter(queue))), EXPIRED)
            queue = state.gate.held.get(session_id)


def ask_ended(state: State, target_id: str, msg_id: str) -> None:
    """The ask ``msg_id`` to ``target_id`` ended without an answer (its asker's timeout,
    its asker or its target left, ...: every way :mod:`broker.core.messaging.ask_actions`
    ends an ask unanswered): held, it leaves the list expired, since a release would
    hand over a question nobody waits for any more."""
    queue = state.gate.held.get(target_id)
    if queue and msg_id in queue:
        settle(state, take_one(state, target_id, msg_id), EXPIRED)


def receipt(state: State, sender: Session, msg_id: str) -> dict[str, Any] | None:
    """The receipt of a held message of ``sender``'s while it is held or if it never
    reached its receiver (dropped, expired); None otherwise (a released one's receipt
    is its delivery's, see :func:`released`)."""
    held = state.gate.receipts.get(msg_id)
    if held is None or held.sender_id != sender.id or held.state == RELEASED:
        return None
    return {"messageId": msg_id, "state": held.state, "to": held.to_id, "toName": held.to_name,
            "deliveredAt": None, "readAt": None, "seenAt": None, "repliedAt": None,
            "undeliveredAt": held.settled_at, "reason": None if held.state == HELD else held.state,
            "heldAt": held.held_at}


def released(state: State, answer: dict[str, Any]) -> None:
    """A delivered message's receipt (``answer``) that was held first: ``heldAt`` and
    ``releasedAt`` added, and ``released`` as its state until its receiver reads it."""
    held = state.gate.receipts.get(answer["messageId"])
    if held is None or held.state != RELEASED:
        return
    answer.update(heldAt=held.held_at, releasedAt=held.settled_at)
    if answer["state"] == "delivered":
        answer["state"] = RELEASED
