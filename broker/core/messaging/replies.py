"""Replies: which ask or message a ``reply`` answers, and answering it.

Reply resolution, first rule that applies:

1. ``replyTo``: an unresolved inbound ask (exact id or unique 8-hex prefix) or the
   ordinary message of the current turn (exact id); nothing else, no fallback.
   With ``to`` as well, the thread's sender must be ``to``.
2. ``to``: the single unresolved ask from that sender (several need ``replyTo``).
3. the message of the current turn (the client passes it as ``currentTurn``), when
   it is still unresolved or was an ordinary message whose sender is still here and
   no ask waits once it was answered; a turn that can no longer be answered (its
   sender left, its ask timed out) fails rather than answer someone else;
4. once the current turn is answered (or with no turn), the single unresolved
   inbound ask; several need ``to`` or ``replyTo``.

A ``send`` that names ``replyTo`` is this same reply, addressed with ``to``.

Invariant: only the asked session can settle an ask (the thread is looked up in the
replier's own inbound table), and an ask is settled exactly once.

A reply counts for the flood and loop guard of either side, and is never refused by
it (:mod:`broker.core.messaging.guard`): the other side waits on it.
"""

from __future__ import annotations

import re as _re

from schemas.errors import BusError
from schemas.limits import PREFIX_LEN

from broker.core.messaging.ask_table import Ask
from broker.core.messaging import receipts
from broker.core.messaging.delivery import deliver
from broker.core.messaging import guard
from broker.core.sessions.registry import Session
from broker.core.kernel.state import State

_HEX_PREFIX = _re.compile(r"[0-9a-f]{8}")


def reply(state: State, session: Session, params: dict, turn: str | None, re: str,
          now: float) -> dict:
    """Answer the thread ``params`` and ``turn`` select. Raises BusError."""
    message, attachments = body("reply", params)
    ask, ordinary = _thread(state, session, params, turn)
    thread = ask.id if ask is not None else ordinary[0]
    state.answered_by(session)[thread] = True
    receipts.replied(state, session, thread)
    if ask is not None:
        state.asks.close(ask)
        answer = {"from": session.id, "fromName": session.name, "message": message,
                  "attachments": attachments, "replyId": re, "messageId": ask.id,
                  "sentAt": state.wall}
        state.settle(ask.asker, ask.id, answer)
        state.stats["asks.settled"] += 1
        guard.passed(state, session, ask.asker, now)    # counted, never refused
        return {"delivered": True, "to": ask.asker.id, "toName": ask.asker.name,
                "replyTo": ask.id, "messageId": re}
    msg_id, sender = ordinary
    deliver(state, session.id, session.name, sender, re, message, attachments, state.wall,
            extra={"replyTo": msg_id})
    guard.passed(state, session, sender, now)
    return {"delivered": True, "to": sender.id, "toName": sender.name,
            "replyTo": msg_id, "messageId": re}


def body(action: str, params: dict) -> tuple[str, list[dict]]:
    """Message text and attachments; a message needs text or at least one attachment.

    Raises BusError(missing_param).
    """
    attachments = params.get("attachments") or []
    message = params.get("message")
    if message is None or (not message and not attachments):
        raise BusError("missing_param", action=action, param="message")
    return message, attachments


def names(session: Session, to: str) -> bool:
    """Whether ``to`` names ``session`` exactly (full id, name, or 8-hex prefix)."""
    lowered = to.lower()
    return to == session.id or lowered == session.name.lower() or \
        (bool(_HEX_PREFIX.fullmatch(lowered)) and session.prefix == lowered)


def _thread(state: State, session: Session, params: dict,
            turn: str | None) -> tuple[Ask | None, tuple[str, Session] | None]:
    """The ask (or ordinary message) a reply answers. Raises BusError."""
    pending = state.asks.inbound.get(session.id, {})
    reply_to = params.get("replyTo")
    to = params.get("to")
    if reply_to is not None:
        ask = _ask_by_selector(pending, reply_to)
        if ask is not None:
            if to is not None and not names(ask.asker, to):
                raise BusError("thread_sender_mismatch", reply_to=reply_to, to=to)
            return ask, None
        ordinary = _ordinary(state, session, reply_to) if reply_to == turn else None
        if ordinary is None:
            raise BusError("unknown_thread", reply_to=reply_to)
        if to is not None and not names(ordinary[1], to):
            raise BusError("thread_sender_mismatch", reply_to=reply_to, to=to)
        return None, ordinary
    if to is not None:
        mine = [a for a in pending.values() if names(a.asker, to)]
        if len(mine) == 1:
            return mine[0], None
        if len(mine) > 1:
            raise BusError("reply_ambiguous", count=len(mine))
        if turn is not None:
            ordinary = _ordinary(state, session, turn)
            if ordinary is not None and names(ordinary[1], to):
                return None, ordinary
        raise BusError("no_pending_ask")
    if turn is not None:
        if turn in pending:
            return pending[turn], None
        answered = turn in state.answered.get(session.id, ())
        ordinary = _ordinary(state, session, turn)
        # Once the turn's message is answered, a later bare reply is for the single
        # pending ask, if one waits; with none waiting it answers the turn again.
        if ordinary is not None and not (answered and pending):
            return None, ordinary
        if not answered:
            raise BusError("stale_turn", id=turn)
    if len(pending) == 1:
        return next(iter(pending.values())), None
    if not pending:
        raise BusError("no_pending_ask")
    raise BusError("reply_ambiguous", count=len(pending))


def _ask_by_selector(pending: dict[str, Ask], selector: str) -> Ask | None:
    if selector in pending:
        return pending[selector]
    lowered = selector.lower()
    if _HEX_PREFIX.fullmatch(lowered):
        matches = [a for a in pending.values() if a.id[:PREFIX_LEN].lower() == lowered]
        if len(matches) == 1:
            return matches[0]
        if len(matches) > 1:
            raise BusError("reply_ambiguous", count=len(matches))
    return None


def _ordinary(state: State, session: Session, msg_id: str) -> tuple[str, Session] | None:
    sender_id = state.recent.get(session.id, {}).get(msg_id)
    sender = state.registry.by_id.get(sender_id) if sender_id else None
    return (msg_id, sender) if sender is not None else None
