"""Message delivery: send, ask, reply, pending and the supervisor path.

A message's id is the id of the call that sent it, chosen by the sender's client;
the recipient sees it as ``id``, and a reply names it in ``replyTo``. Every send, ask
and reply passes through :meth:`Messaging._once` first, so a retried id is answered
from memory and never delivered twice.

Reply resolution, first rule that applies:

1. ``replyTo``: an unresolved inbound ask (exact id or unique 8-hex prefix) or the
   ordinary message of the current turn (exact id); nothing else, no fallback.
   With ``to`` as well, the thread's sender must be ``to``.
2. ``to``: the single unresolved ask from that sender (several need ``replyTo``).
3. the message of the current turn (the client passes it as ``currentTurn``), when
   it is still unresolved or was an ordinary message whose sender is still here; a
   turn that can no longer be answered (its sender left, its ask timed out) fails
   rather than answer someone else;
4. once the current turn is answered (or with no turn), the single unresolved
   inbound ask; several need ``to`` or ``replyTo``.

A ``send`` that names ``replyTo`` is this same reply, addressed with ``to``.
"""

from __future__ import annotations

import functools
import re as _re
from typing import TYPE_CHECKING, Any

from schemas.errors import BusError
from schemas.limits import MAX_ASK_TIMEOUT_S, PREFIX_LEN
from schemas.protocol import envelope

from .actions import tool_params
from .asks import Ask, AskTable
from .bounded import RecentMap
from .commands import Send
from .dedup import MessageIds, fingerprint
from .paths import looks_like_path
from .sessions import Session
from .targeting import resolve_session

if TYPE_CHECKING:
    from .engine import Engine

RECENT_PER_SESSION = 512      # ordinary messages a session can still reply to: 256 to 512
_HEX_PREFIX = _re.compile(r"[0-9a-f]{8}")


class Messaging:
    """Delivery actions and their bookkeeping."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.registry = engine.registry
        self.asks = AskTable(self)
        self.ids = MessageIds()
        # Ordinary messages each session received lately: msg id -> sender id.
        self.recent: dict[str, RecentMap[str, str]] = {}
        # Threads (ask or message ids) each session has replied to lately.
        self.answered: dict[str, RecentMap[str, bool]] = {}
        engine.actions.update({"send": self.send, "ask": self.ask, "reply": self.reply,
                               "pending": self.pending})
        engine.kinds_extra["supervisor"] = self.contact_supervisor
        engine.on_disconnect.append(self._disconnected)
        engine.on_tick.append(self._expire)

    # -- hooks the engine and the other actions call ----------------------------------

    def set_capability(self, session: Session, capability: str, now: float) -> None:
        session.reply_capability = capability
        if capability == "terminal":
            for ask in self.asks.to_target(session):
                self._settle_error(ask, BusError("terminal_child"))

    # -- send --------------------------------------------------------------------------

    def send(self, session: Session, env: dict, re: str, now: float) -> dict | None:
        params = tool_params(env)
        turn = env.get("currentTurn") if isinstance(env.get("currentTurn"), str) else None
        return self._once(session, "send", params, re,
                          lambda: self._send(session, params, re, now, turn))

    def _send(self, session: Session, params: dict, re: str, now: float,
              turn: str | None = None) -> dict | None:
        to, message, attachments = _message_params("send", params)
        if looks_like_path(to):
            return self.engine.workflows.send(session, params, re, now, message, attachments)
        if params.get("replyTo") is not None:
            # A reply is a send with replyTo: the thread must exist and be from ``to``.
            return self._reply(session, params, turn, re, now)
        target = self.resolve_target(session, to)
        self.deliver(session, target, re, message, attachments, now)
        return {"delivered": True, "to": target.id, "toName": target.name, "messageId": re}

    # -- ask ---------------------------------------------------------------------------

    def ask(self, session: Session, env: dict, re: str, now: float) -> dict | None:
        params = tool_params(env)
        return self._once(session, "ask", params, re, lambda: self._ask(session, params, re, now))

    def _ask(self, session: Session, params: dict, re: str, now: float) -> None:
        to, message, attachments = _message_params("ask", params)
        if looks_like_path(to):
            target = self.engine.workflows.resolve_ask(session, to)
        else:
            target = self.resolve_target(session, to)
        self._open_ask(session, target, re, message, attachments, params.get("timeout"), now,
                       supervisor=False)

    def contact_supervisor(self, engine: Engine, session: Session, env: dict,
                           re: str | None, now: float) -> None:
        """A child asks the session that launched it, across groups if need be."""
        if re is None:
            raise BusError("bad_envelope", detail="a supervisor ask needs a string id")
        params = {k: env[k] for k in ("message", "attachments", "timeout") if k in env}
        params = tool_params({**params, "action": "ask"})

        def admit() -> None:
            message, attachments = _body("contact_supervisor", params)
            if session.parent_id is None:
                raise BusError("not_supervisor")
            parent = self.registry.by_id.get(session.parent_id)
            if parent is None:
                raise BusError("peer_disconnected", name="The supervisor")
            self._open_ask(session, parent, re, message, attachments, params.get("timeout"),
                           now, supervisor=True)

        result = self._once(session, "supervisor", params, re, admit)
        if result is not None:
            engine.reply(session, re, result)

    def _open_ask(self, asker: Session, target: Session, ask_id: str, message: str,
                  attachments: list, timeout_s: float | None, now: float, *,
                  supervisor: bool) -> None:
        if target.reply_capability == "terminal":
            raise BusError("terminal_child")
        limits = self.engine.limits
        self.asks.check_capacity(asker, supervisor, limits.max_pending_asks)
        # A per-call timeout may exceed the default; MAX_ASK_TIMEOUT_S bounds both.
        timeout_s = min(float(timeout_s) if timeout_s else limits.ask_timeout_s, MAX_ASK_TIMEOUT_S)
        ask = Ask(ask_id, asker, target, message, now, now + timeout_s, supervisor)
        self.asks.open(ask)
        self.deliver(asker, target, ask_id, message, attachments, now, expects_reply=True,
                     supervisor=supervisor, timeout_s=timeout_s)

    def resolve_target(self, session: Session, to: str) -> Session:
        """An ordinary (non-path) target; known non-agent nodes are refused."""
        try:
            target = resolve_session(self.registry, session, to)
        except BusError as error:
            if error.code == "target_not_found":
                self.engine.workflows.refuse_non_agent(session, to, None)
            raise
        self.engine.workflows.refuse_non_agent(session, to, target)
        return target

    # -- reply -------------------------------------------------------------------------

    def reply(self, session: Session, env: dict, re: str, now: float) -> dict | None:
        params = tool_params(env)
        turn = env.get("currentTurn") if isinstance(env.get("currentTurn"), str) else None
        return self._once(session, "reply", params, re,
                          lambda: self._reply(session, params, turn, re, now))

    def _reply(self, session: Session, params: dict, turn: str | None, re: str,
               now: float) -> dict:
        message, attachments = _body("reply", params)
        ask, ordinary = self._thread(session, params, turn)
        _table_for(self.answered, session)[ask.id if ask is not None else ordinary[0]] = True
        if ask is not None:
            self.asks.close(ask)
            answer = {"from": session.id, "fromName": session.name, "message": message,
                      "attachments": attachments, "replyId": re, "messageId": ask.id,
                      "sentAt": now}
            self.ids.answer(ask.id, answer)
            self.engine.reply(ask.asker, ask.id, answer)
            return {"delivered": True, "to": ask.asker.id, "toName": ask.asker.name,
                    "replyTo": ask.id, "messageId": re}
        msg_id, sender = ordinary
        self.deliver(session, sender, re, message, attachments, now, reply_to=msg_id)
        return {"delivered": True, "to": sender.id, "toName": sender.name,
                "replyTo": msg_id, "messageId": re}

    def _thread(self, session: Session, params: dict,
                turn: str | None) -> tuple[Ask | None, tuple[str, Session] | None]:
        """The ask (or ordinary message) a reply answers. Raises BusError."""
        pending = self.asks.inbound.get(session.id, {})
        reply_to = params.get("replyTo")
        to = params.get("to")
        if reply_to is not None:
            ask = self._ask_by_selector(pending, reply_to)
            if ask is not None:
                if to is not None and not _names(ask.asker, to):
                    raise BusError("thread_sender_mismatch", reply_to=reply_to, to=to)
                return ask, None
            ordinary = self._ordinary(session, reply_to) if reply_to == turn else None
            if ordinary is None:
                raise BusError("unknown_thread", reply_to=reply_to)
            if to is not None and not _names(ordinary[1], to):
                raise BusError("thread_sender_mismatch", reply_to=reply_to, to=to)
            return None, ordinary
        if to is not None:
            mine = [a for a in pending.values() if _names(a.asker, to)]
            if len(mine) == 1:
                return mine[0], None
            if len(mine) > 1:
                raise BusError("reply_ambiguous", count=len(mine))
            if turn is not None:
                ordinary = self._ordinary(session, turn)
                if ordinary is not None and _names(ordinary[1], to):
                    return None, ordinary
            raise BusError("no_pending_ask")
        if turn is not None:
            if turn in pending:
                return pending[turn], None
            ordinary = self._ordinary(session, turn)
            if ordinary is not None:
                return None, ordinary
            if turn not in self.answered.get(session.id, ()):
                raise BusError("stale_turn", id=turn)
        if len(pending) == 1:
            return next(iter(pending.values())), None
        if not pending:
            raise BusError("no_pending_ask")
        raise BusError("reply_ambiguous", count=len(pending))

    @staticmethod
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

    def _ordinary(self, session: Session, msg_id: str) -> tuple[str, Session] | None:
        sender_id = self.recent.get(session.id, {}).get(msg_id)
        sender = self.registry.by_id.get(sender_id) if sender_id else None
        return (msg_id, sender) if sender is not None else None

    # -- pending -----------------------------------------------------------------------

    def pending(self, session: Session, env: dict, re: str, now: float) -> dict:
        tool_params(env)
        return {"pending": [ask.row(now) for ask in self.asks.pending_for(session)]}

    # -- delivery ------------------------------------------------------------------------

    def deliver(self, sender: Session, target: Session, msg_id: str, message: str,
                attachments: list, now: float, *, expects_reply: bool = False,
                reply_to: str | None = None, **extra: Any) -> None:
        msg = envelope("msg", id=msg_id, message=message, attachments=attachments,
                       sentAt=now, expectsReply=expects_reply, fromName=sender.name)
        msg["from"] = sender.id
        if reply_to is not None:
            msg["replyTo"] = reply_to
        for key, value in extra.items():
            if value:
                msg[_camel(key)] = value
        if not expects_reply:
            self.remember(target, msg_id, sender)
        self.engine.out.append(Send(target.identity, msg))

    def remember(self, target: Session, msg_id: str, sender: Session) -> None:
        """Note an ordinary message ``target`` received, so it can reply to it."""
        self.recent_for(target)[msg_id] = sender.id

    def recent_for(self, target: Session) -> RecentMap[str, str]:
        """The ordinary messages ``target`` received lately (msg id -> sender id)."""
        return _table_for(self.recent, target)

    # -- idempotence -----------------------------------------------------------------------

    def _once(self, session: Session, action: str, params: dict, re: str, run) -> dict | None:
        """Run ``run`` once per message id; a retry gets the first answer again."""
        mark = fingerprint(action, params)
        entry = self.ids.lookup(re, session.id, mark)
        if entry is not None:
            self.engine.stats["dedup.retries"] += 1
            return entry[0]          # None while an ask still waits: its answer comes later
        try:
            answer = run()
        except BusError as error:
            self.ids.record(re, session.id, mark, error.reply())
            raise
        self.ids.record(re, session.id, mark, answer)
        return answer

    # -- settlement --------------------------------------------------------------------

    def _settle_error(self, ask: Ask, error: BusError) -> None:
        self.ids.answer(ask.id, error.reply())
        self.engine.fail(ask.asker, ask.id, error)

    def _disconnected(self, session: Session, reason: str, now: float) -> None:
        for ask in self.asks.to_target(session):
            self._settle_error(ask, BusError("peer_disconnected", name=session.name))
        self.asks.from_asker(session)
        self.recent.pop(session.id, None)
        self.answered.pop(session.id, None)

    def _expire(self, now: float) -> None:
        for ask in self.asks.expire(now):
            self._settle_error(ask, BusError("ask_timeout", timeout_s=ask.deadline_at - ask.sent_at))


def _message_params(action: str, params: dict) -> tuple[str, str, list[dict]]:
    to = params.get("to")
    if not to:
        raise BusError("missing_param", action=action, param="to")
    return (to, *_body(action, params))


def _body(action: str, params: dict) -> tuple[str, list[dict]]:
    """Message text and attachments; a message needs text or at least one attachment."""
    attachments = params.get("attachments") or []
    message = params.get("message")
    if message is None or (not message and not attachments):
        raise BusError("missing_param", action=action, param="message")
    return message, attachments


def _names(session: Session, to: str) -> bool:
    """Whether ``to`` names ``session`` exactly (full id, name, or 8-hex prefix)."""
    lowered = to.lower()
    return to == session.id or lowered == session.name.lower() or \
        (bool(_HEX_PREFIX.fullmatch(lowered)) and session.prefix == lowered)


def _table_for(tables: dict[str, RecentMap], session: Session) -> RecentMap:
    """``session``'s bounded table in ``tables``, made on first use."""
    table = tables.get(session.id)
    if table is None:
        table = tables[session.id] = RecentMap(RECENT_PER_SESSION)
    return table


@functools.cache
def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)
