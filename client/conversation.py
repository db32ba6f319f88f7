"""The respond/invoke side of a session: posting output to channels, turns and drafts,
invoking the agent's other conversations, and the conversation's own record.

A mixin of :class:`client.session.Session`: it uses the session's ``_call``,
``_transport``, ``_history``, ``_turns`` (a :class:`client.drafts.Turns` under
``_turn_lock``), ``_closed`` and ``welcome``. Parameter checks made before anything is
sent live in :mod:`client.respond`; the turn and draft rules in :mod:`client.drafts`.
"""

from __future__ import annotations

import logging
from typing import Any

from schemas.errors import BusError, error_reply
from schemas.limits import CALL_TIMEOUT_S
from schemas.protocol import envelope

from .history import RESPONDED
from .ids import new_message_id
from .respond import finish_problem, invoke_problem, respond_params, respond_problem

_log = logging.getLogger("intercom.client")


class ConversationMethods:
    @property
    def channel(self) -> str | None:
        """This conversation's channel id, as the broker's welcome gave it."""
        return self.welcome.get("channel")

    def respond(self, content: str | None = None, draft: str | None = None,
                channel: str = "current", attachments: list[dict] | None = None,
                final: bool = True) -> dict[str, Any]:
        """Post this agent's output to a channel: ``current``, ``last``, ``owner`` or a
        channel id of the same agent. Exactly one of ``content`` or ``draft`` (a draft
        id of the open turn not sent yet: its exact text is sent, to ``current`` only). ``attachments``:
        ``[{"path", "altText"?}]``, files that exist here. Returns ``{"ok": True,
        "final", "sent": True, "channel", ["draft"]}``; ``sent`` means the broker took
        it for delivery, not that a person read it; the answer's ``outputId`` is what
        the channel's side acknowledges (:meth:`ack_output`), and this session then
        gets an ``output_acked`` event (:meth:`next_event`) with that ``outputId``."""
        params = respond_params(content, draft, channel, attachments, final)
        problem = respond_problem(params)
        if problem:
            return problem
        if draft is not None:
            with self._turn_lock:
                try:
                    params["content"] = self._turns.take(draft)
                except BusError as exc:
                    return exc.reply()
        result = self._call("respond", params)
        if result.get("ok"):
            if draft is not None:
                result.setdefault("draft", draft)
            self._history.record(RESPONDED, content=params["content"], draft=draft,
                                 channel=channel, attachments=attachments, final=final,
                                 result=result)
            if result.get("channel") == self.channel:
                with self._turn_lock:
                    self._turns.delivered(draft)
        elif draft is not None:
            with self._turn_lock:
                self._turns.release(draft)
        return result

    def ack_output(self, output_id: str) -> dict[str, Any]:
        """Acknowledge an ``output`` event this side received (as the channel's session
        or as a bridge that showed it): its sender gets an ``output_acked`` event.
        Returns ``{"ok": True, "acked": True, "outputId", "told"}`` (``told``: the sender
        was connected), or ``unknown_output`` for an id the broker does not know."""
        if not isinstance(output_id, str) or not output_id:
            return error_reply("invalid_params", detail="output_id must be a non-empty string")
        return self._call("ack_output", {"outputId": output_id})

    def begin_turn(self) -> str:
        """Start a turn (the conversation becomes active); ends the open one. Its id."""
        with self._turn_lock:
            turn, report = self._turns.begin()
        if not self._closed:
            if report is not None:
                self._send_recovery(report, CALL_TIMEOUT_S)
            self._transport.post(envelope("turn", turn=turn))
        return turn

    def end_turn(self) -> dict[str, Any]:
        """End the open turn; ``{"ok": True, "turn", "recovery"}`` where ``recovery`` is
        the reported outcome (None when the turn recorded no draft). A ``failed`` turn
        also carries its ``drafts`` (``[{id, text, completion, outcome}]``): an
        ephemeral conversation keeps no recovery row, so this is where they are."""
        if self._closed:
            return error_reply("session_closed")
        return self._end_turn(CALL_TIMEOUT_S)

    def record_draft(self, text: str, complete: bool | None = True) -> str:
        """Keep plain assistant text as a draft of the open turn (one is begun if none
        is open); returns its id for ``respond(draft=ID)``. ``complete``: True, False
        (incomplete) or None (unknown); only complete drafts can be sent by reference.
        The broker keeps the turn's recovery record as ``pending`` from now until the
        turn ends. Raises ValueError for a text that is not a string or a bad
        ``complete``."""
        if self._turns.turn is None:
            self.begin_turn()
        with self._turn_lock:
            draft_id, report = self._turns.record(text, complete)
        if not self._closed:
            self._send_recovery(report, CALL_TIMEOUT_S)
        return draft_id

    def _end_turn(self, timeout: float) -> dict[str, Any]:
        with self._turn_lock:
            turn = self._turns.turn
            report = self._turns.end()
        if report is None:
            return {"ok": True, "turn": turn, "recovery": None}
        result = self._send_recovery(report, timeout)
        if not result.get("ok"):
            return result
        ended = {"ok": True, "turn": turn, "recovery": report["outcome"]}
        if report["outcome"] == "failed":
            ended["drafts"] = [dict(draft) for draft in report["drafts"]]
        return ended

    def _send_recovery(self, report: dict, timeout: float) -> dict[str, Any]:
        """Tell the broker this turn's recovery state (kept for persistent conversations).
        Bypasses ``_closed``: close() reports the turn it ends."""
        result = self._transport.call(envelope("recovery", id=new_message_id(), **report),
                                      timeout)
        if result is None:
            result = error_reply("broker_unavailable", timeout_s=timeout)
        if not result.get("ok"):
            _log.warning("recovery report of turn %s (%s) not kept: %s", report["turn"],
                         report["outcome"], result.get("error"))
        return result

    def list_sessions(self, agent: str | None = None) -> dict[str, Any]:
        """This agent's conversations: ``{"ok": True, "sessions": [{"session" (channel
        id), "persistent", "remote", "connected", "lastActiveAt", "queuedInvocations",
        "current"}]}``; the ``session`` values are what ``invoke`` takes. A control
        connection (``kind="control"``) names the ``agent`` instead; it only reads."""
        return self._call("sessions", {} if agent is None else {"agent": agent})

    def invoke(self, session: str, reason: str) -> dict[str, Any]:
        """Queue a turn in another existing persistent conversation of this agent.
        Answered once the job is stored: ``{"ok": True, "queued": True, "id",
        "session"}``; it does not wait for the turn."""
        problem = invoke_problem(session, reason)
        if problem:
            return problem
        return self._call("invoke", {"session": session, "reason": reason})

    def finish_invocation(self, id: str, ok: bool = True, error: str | None = None) -> dict[str, Any]:
        """Report how the turn of invocation ``id`` (from an ``invocation`` event) ended."""
        problem = finish_problem(id, ok, error)
        if problem:
            return problem
        if self._closed:
            return error_reply("session_closed")
        # The request's own id is the invocation id (the kind's declared ``id`` field).
        result = self._transport.call(envelope("finish_invocation", id=id, ok=ok, error=error),
                                      CALL_TIMEOUT_S)
        return result if result is not None else error_reply("broker_unavailable",
                                                             timeout_s=CALL_TIMEOUT_S)

    def reset(self) -> dict[str, Any]:
        """Forget this persistent conversation's response recovery record."""
        return self._call("reset", {})

    def delete(self) -> dict[str, Any]:
        """Delete this persistent conversation's record, its recovery record and its
        queued invocations; this session goes on as an ephemeral one."""
        return self._call("delete", {})

