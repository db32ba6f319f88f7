"""A session's attention: how its messages reach the agent, and who may reach it.

Mixed into :class:`client.session.Session` (see :mod:`schemas.attention` for the
fields): :meth:`mark_seen` says what the program or model has taken,
:meth:`receipt` reads what became of a message this session sent,
:meth:`update_capabilities` changes what its list row says (the next hello
states the new set again), :meth:`human_input` tells the broker a person gave the
session input (the loop guard starts counting again), and the inbound gate
(:meth:`set_inbound`, :meth:`held_messages`, :meth:`release_held`,
:meth:`drop_held`) holds or refuses messages from other sessions. A control
connection acting for a session (``act_for``, the ``python -m client inbound`` and
``held`` commands) makes the gate calls for it.
"""

from __future__ import annotations

from typing import Any

from schemas.attention import INBOUND_CHANGED, INBOUND_POLICIES, clean_capabilities
from schemas.errors import error_reply
from schemas.protocol import envelope


def changed_inbound(events: list[dict]) -> str | None:
    """The policy the last ``inbound_changed`` event among ``events`` states: the
    session's next hello states it again (a reconnect does not undo the person's choice)."""
    policy = None
    for event in events:
        if event.get("event") == INBOUND_CHANGED and event.get("policy") in INBOUND_POLICIES:
            policy = event["policy"]
    return policy


class AttentionMethods:
    _capabilities: dict[str, Any]
    _inbound: str | None

    def update_capabilities(self, **changes: Any) -> None:
        """Change what this session's list row says about how it is reached
        (``push``, ``hooks``, ``steer``: booleans; ``host``: text). Fire and forget:
        nothing is sent when nothing changes, and a reconnect states the new set."""
        merged = clean_capabilities({**self._capabilities, **changes}) or {}
        if merged == self._capabilities:
            return
        self._capabilities = merged
        if self.connected:
            self._transport.post(envelope("status", capabilities=merged))

    def human_input(self) -> None:
        """A person just gave this session input (a prompt): the broker's loop guard
        counts the exchanges of its pairs from zero again. Fire and forget."""
        if self.connected:
            self._transport.post(envelope("status", humanInput=True))

    def set_inbound(self, policy: str) -> dict[str, Any]:
        """Set the inbound gate: ``accept``, ``hold`` or ``refuse``. Answers
        ``{"ok", "policy", "held"}`` (``held``: how many messages wait)."""
        if policy not in INBOUND_POLICIES:
            return error_reply("invalid_params",
                               detail=f"policy must be one of {', '.join(INBOUND_POLICIES)}")
        result = self._call("inbound", {"op": "policy", "policy": policy})
        if result.get("ok") and not getattr(self, "_act_for", None):
            self._inbound = policy
        return result

    def held_messages(self) -> dict[str, Any]:
        """The messages the gate holds: ``{"ok", "policy", "held": [{"messageId",
        "from", "fromName", "sentAt", "expiresAt", "preview", ...}]}``, oldest first."""
        return self._call("inbound", {"op": "held"})

    def release_held(self, message_id: str | None = None, *, all: bool = False) -> dict[str, Any]:
        """Deliver one held message (or ``all``); its sender's receipt says released."""
        return self._settle("release", message_id, all)

    def drop_held(self, message_id: str | None = None, *, all: bool = False) -> dict[str, Any]:
        """Drop one held message (or ``all``) undelivered; its sender is told dropped."""
        return self._settle("drop", message_id, all)

    def _settle(self, op: str, message_id: str | None, every: bool) -> dict[str, Any]:
        if every:
            return self._call("inbound", {"op": op, "all": True})
        if not isinstance(message_id, str) or not message_id:
            return error_reply("invalid_params", detail="give a messageId, or all=True")
        return self._call("inbound", {"op": op, "messageId": message_id})

    # -- receipts: what became of what this session sent, and what its program saw --

    def mark_seen(self, message_id: str) -> None:
        """The program or model has message ``message_id`` and every message received
        before it (for ``keep_until="seen"``: until then the broker keeps them for this
        session's next connection or process). :meth:`receive` says it by itself
        otherwise."""
        self._transport.saw(message_id)

    def receipt(self, message_id: str) -> dict[str, Any]:
        """What became of a message this session sent (its ``messageId``): ``state`` is
        ``delivered`` (handed to the receiver's connection), ``read`` (its client has
        it), ``seen`` (handed to its program or model), ``replied`` or ``undelivered``
        (``reason``: ``session_ended``, ``bound_reached`` or ``never_seen``), with the
        time each was reached (``deliveredAt``, ``readAt``, ``seenAt``, ``repliedAt``,
        ``undeliveredAt``; None until then). A message that was queued for a stage,
        someone else's, or older than the broker keeps answers ``unknown_message``."""
        if not isinstance(message_id, str) or not message_id:
            return error_reply("invalid_params", detail="message_id must be a non-empty string")
        return self._call("call", {"action": "status", "messageId": message_id})
