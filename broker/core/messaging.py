"""Message delivery: send (and, later, ask, reply and pending).

A message's id is the id of the call that sent it, chosen by the sender's client;
the recipient sees it as ``id`` and a reply names it in ``replyTo``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from schemas.errors import BusError
from schemas.protocol import envelope

from .actions import tool_params
from .commands import Send
from .sessions import Session
from .targeting import resolve_session

if TYPE_CHECKING:
    from .engine import Engine


class Messaging:
    """Delivery actions and their bookkeeping."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.registry = engine.registry
        engine.actions.update({"send": self.send})

    # -- hooks the engine and the other actions call ----------------------------------

    def deadlines(self) -> list[float]:
        return []

    def list_extras(self, session: Session, group: str | None) -> dict:
        return {}

    def check_join(self, session: Session, group: str) -> None:
        return None

    def set_capability(self, session: Session, capability: str, now: float) -> None:
        session.reply_capability = capability

    def reattached(self, session: Session, now: float) -> None:
        return None

    # -- actions -----------------------------------------------------------------------

    def send(self, session: Session, env: dict, re: str, now: float) -> dict:
        params = tool_params(env)
        to, message, attachments = self._message_params("send", params)
        target = resolve_session(self.registry, session, to)
        self._deliver(session, target, re, message, attachments, now)
        return {"delivered": True, "to": target.id, "toName": target.name, "messageId": re}

    # -- helpers -------------------------------------------------------------------------

    @staticmethod
    def _message_params(action: str, params: dict) -> tuple[str, str, list[dict]]:
        attachments = params.get("attachments") or []
        to = params.get("to")
        if not to:
            raise BusError("missing_param", action=action, param="to")
        message = params.get("message")
        if message is None or (not message and not attachments):
            raise BusError("missing_param", action=action, param="message")
        return to, message, attachments

    def _deliver(self, sender: Session, target: Session, msg_id: str, message: str,
                 attachments: list[dict], now: float, **extra: Any) -> None:
        msg = envelope("msg", id=msg_id, message=message, attachments=attachments,
                       sentAt=now, expectsReply=False, fromName=sender.name, **extra)
        msg["from"] = sender.id
        self.engine.out.append(Send(target.identity, msg))
