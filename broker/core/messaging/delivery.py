"""Handing messages to sessions, and remembering what each session may answer.

Every message a session receives leaves through :func:`deliver` (or its batch form
:func:`deliver_texts`), which emits one :class:`~broker.core.kernel.commands.Deliver`
command; the final pass (:mod:`broker.core.kernel.outbox`) builds the envelope. An ordinary
message (not an ask) is remembered for its recipient, so a later ``reply`` can name
it; asks are remembered by the ask table instead. A message makes an agent session's
conversation active (``respond`` channel ``last``).
"""

from __future__ import annotations

from typing import Any

from broker.core.agents.activity import touch
from schemas.attention import ACCEPT

from broker.core.messaging import inbound_gate as gate, receipts
from broker.core.sessions.backlog import ITEM_BYTES, handed, text_bytes
from broker.core.kernel.commands import Deliver
from broker.core.sessions.registry import Session
from broker.core.kernel.state import State


def deliver(state: State, sender_id: str, sender_name: str, target: Session, msg_id: str,
            message: str, attachments: list, sent_at: float, *, expects_reply: bool = False,
            extra: dict[str, Any] | None = None, keep: bool = True, gated: bool = True) -> None:
    """One message for ``target``; ``extra`` holds the optional declared ``msg`` fields.
    ``keep`` False: a queued entry, which its queue sends again (it gets a receipt only).
    A target whose gate holds messages keeps it for its person instead (see
    :mod:`broker.core.messaging.inbound_gate`; :func:`release` delivers it later)."""
    if target.inbound != ACCEPT and gated and keep and gate.holds(target, sender_id, extra):
        gate.hold(state, target, sender_id, sender_name, msg_id, message, attachments, sent_at,
                  expects_reply, extra)
        return
    if not expects_reply:
        state.recent_for(target)[msg_id] = sender_id
        sender = state.registry.by_id.get(sender_id)
        if sender is not None and sender.is_control:
            # Nobody can message a control connection: the receiver is told so.
            extra = {**(extra or {}), "replyable": False}
    if target.agent is not None:
        touch(state, target)
    state.stats["messages.routed"] += 1
    size = (text_bytes([message]) if message.__class__ is str else 0) + ITEM_BYTES
    handed(target, size)
    command = Deliver(target.identity, sender_id, sender_name, sent_at, [msg_id], [message],
                      attachments or [], expects_reply, extra)
    receipts.delivered(state, target, command, size, keep)
    state.out.append(command)


def deliver_texts(state: State, sender: Session, target: Session, ids: list[str],
                  texts: list[str]) -> None:
    """Plain text messages (no attachments, not asks) from ``sender``, in order."""
    if sender.is_control or target.inbound != ACCEPT:
        # Each says it cannot be answered, or each is held (see deliver).
        for msg_id, text in zip(ids, texts):
            deliver(state, sender.id, sender.name, target, msg_id, text, [], state.wall)
        return
    state.recent_for(target).put_all(ids, value=sender.id)
    if target.agent is not None:
        touch(state, target)
    state.stats["messages.routed"] += len(ids)
    size = text_bytes(texts) + ITEM_BYTES * len(texts)
    handed(target, size)
    command = Deliver(target.identity, sender.id, sender.name, state.wall, ids, texts)
    receipts.delivered(state, target, command, size)
    state.out.append(command)


def release(state: State, target: Session, held: gate.Held) -> None:
    """Deliver a message the gate held for ``target``, as it would have been."""
    deliver(state, held.sender_id, held.sender_name, target, held.msg_id, held.message,
            held.attachments, held.sent_at, expects_reply=held.expects_reply, extra=held.extra,
            gated=False)
