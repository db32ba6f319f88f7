"""Pipelined plain sends: the ``sends`` kind in, ``msgs`` deliveries out.

A bulk sender's client packs a run of quiet text sends to one target into one
``sends`` envelope (``to``, ``items`` of ``[id, message]``). Each item means exactly
the quiet ``call`` with ``action: send`` of its id, target and text: it is
deduplicated by id, answered in ``acks`` or by its own ``result``, and delivered
in order. What the shared target saves is per-item work: the target is resolved
once, and the deliveries to it leave as one ``msgs`` envelope (``from``,
``fromName``, ``sentAt``, ``items``) instead of one ``msg`` each.

Only the common case runs here: a new id, a text within limits, a target that
resolves to a live session. Every other item (a retry, an id conflict, an empty
or oversized text, a refused target, a workflow path) is handed to the ordinary
``call`` handler as the single call it stands for, after the deliveries so far
are emitted, so the answers and the delivery order are the ordinary ones.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from schemas.errors import BusError
from schemas.limits import MAX_MESSAGE_CHARS, MAX_SEND_ITEMS, MAX_TARGET_CHARS, PROTOCOL_VERSION

from .commands import Send
from .dedup import text_fingerprint
from .sessions import Session

if TYPE_CHECKING:
    from .engine import Engine

_ID_MAX = 128


def install(engine: Engine) -> None:
    engine.kinds_extra["sends"] = on_sends


def on_sends(engine: Engine, session: Session, env: dict, re: str | None, now: float) -> None:
    """Handle one ``sends`` envelope. Raises BusError(bad_envelope) for a bad shape."""
    to = env.get("to")
    items = env.get("items")
    if items.__class__ is not list or len(items) > MAX_SEND_ITEMS:
        raise BusError("bad_envelope", detail=f"sends needs a list of at most {MAX_SEND_ITEMS} items")
    messaging = engine.messaging
    ids = messaging.ids
    sender_id = session.id
    plain_target = (to.__class__ is str and 0 < len(to) <= MAX_TARGET_CHARS
                    and not to.startswith("workflow:"))
    target: Session | None = None
    answer_head: tuple = ()
    batch: list[list[str]] = []
    acks = None
    recent = None
    for item in items:
        if item.__class__ is not list or len(item) != 2:
            engine.stats["dropped.bad_send_item"] += 1
            continue
        msg_id, message = item
        if msg_id.__class__ is not str or not 0 < len(msg_id) <= _ID_MAX:
            engine.stats["dropped.bad_send_item"] += 1
            continue
        if (plain_target and message.__class__ is str and 0 < len(message) <= MAX_MESSAGE_CHARS
                and msg_id not in ids):
            if target is None:
                try:
                    target = messaging._resolve(session, to)
                except BusError:
                    plain_target = False      # every item gets the ordinary refusal
                else:
                    answer_head = (("delivered", True), ("to", target.id), ("toName", target.name))
                    recent = messaging.recent_for(target)
                    acks = engine.acks.setdefault(session.identity, [])
            if target is not None:
                recent[msg_id] = sender_id
                batch.append(item)
                ids.record_items(msg_id, sender_id, text_fingerprint("send", to, message),
                                 answer_head + (("messageId", msg_id),))
                acks.append(msg_id)
                continue
        if batch:
            _deliver(engine, session, target, batch, now)
            batch = []
        engine.handle_one(session.identity, {
            "v": PROTOCOL_VERSION, "k": "call", "id": msg_id, "action": "send", "to": to,
            "message": message, "quiet": True}, now)
    if batch:
        _deliver(engine, session, target, batch, now)


def _deliver(engine: Engine, sender: Session, target: Session, items: list, now: float) -> None:
    engine.out.append(Send(target.identity, {
        "v": PROTOCOL_VERSION, "k": "msgs", "from": sender.id, "fromName": sender.name,
        "sentAt": now, "items": items}))
