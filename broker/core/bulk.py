"""Pipelined plain sends: the ``sends`` kind in, ``msgs`` deliveries out.

A bulk sender's client packs a run of quiet text sends to one target into one
``sends`` envelope: ``to``, and the parallel lists ``ids`` and ``messages``. Each
pair means exactly the quiet ``call`` with ``action: send`` of its id, target and
text: it is deduplicated by id, answered in ``acks`` or by its own ``result``, and
delivered in order. What the shared target saves is per-message work: the target is
resolved once, and the deliveries to it leave as one ``msgs`` envelope (``from``,
``fromName``, ``sentAt``, ``ids``, ``messages``) instead of one ``msg`` each.

Only the common case runs here: a new id, a text within limits, a target that
resolves to a live session. Every other message (a retry, an id conflict, an empty
or oversized text, a refused target, a workflow path) is handed to the ordinary
``call`` handler as the single call it stands for, after the deliveries so far are
emitted, so the answers and the delivery order are the ordinary ones.
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
    ids_in = env.get("ids")
    texts = env.get("messages")
    if (ids_in.__class__ is not list or texts.__class__ is not list
            or len(ids_in) != len(texts) or len(ids_in) > MAX_SEND_ITEMS):
        raise BusError("bad_envelope", detail="sends needs lists 'ids' and 'messages' of one "
                       f"length, at most {MAX_SEND_ITEMS}")
    messaging = engine.messaging
    plain_target = (to.__class__ is str and 0 < len(to) <= MAX_TARGET_CHARS
                    and not to.startswith("workflow:"))
    target: Session | None = None
    young, old = messaging.ids.generations()
    admitted: dict[str, int] = {}            # id -> fingerprint, in order
    admitted_texts: list[str] = []
    max_id, max_text = _ID_MAX, MAX_MESSAGE_CHARS
    for msg_id, message in zip(ids_in, texts):
        if msg_id.__class__ is not str or not 0 < len(msg_id) <= max_id:
            engine.stats["dropped.bad_send_id"] += 1
            continue
        if (plain_target and message.__class__ is str and 0 < len(message) <= max_text
                and msg_id not in young and msg_id not in old and msg_id not in admitted):
            if target is None:
                try:
                    target = messaging.resolve_target(session, to)
                except BusError:
                    plain_target = False      # every message gets the ordinary refusal
            if target is not None:
                admitted[msg_id] = text_fingerprint("send", to, message)
                admitted_texts.append(message)
                continue
        # Anything else is the single call it stands for, after what came before it.
        if admitted:
            _deliver(engine, session, target, admitted, admitted_texts, now)
            admitted, admitted_texts = {}, []
        engine.handle_one(session.identity, {
            "v": PROTOCOL_VERSION, "k": "call", "id": msg_id, "action": "send", "to": to,
            "message": message, "quiet": True}, now)
        young, old = messaging.ids.generations()
    if admitted:
        _deliver(engine, session, target, admitted, admitted_texts, now)


def _deliver(engine: Engine, sender: Session, target: Session, admitted: dict[str, int],
             texts: list[str], now: float) -> None:
    """Record, acknowledge and deliver admitted messages, as one ``msgs``."""
    ids = list(admitted)
    messaging = engine.messaging
    messaging.ids.record_delivered(ids, sender.id, list(admitted.values()),
                                   {"delivered": True, "to": target.id, "toName": target.name})
    messaging.recent_for(target).put_all(ids, value=sender.id)
    engine.acks.setdefault(sender.identity, []).extend(ids)
    engine.out.append(Send(target.identity, {
        "v": PROTOCOL_VERSION, "k": "msgs", "from": sender.id, "fromName": sender.name,
        "sentAt": now, "ids": ids, "messages": texts}))
