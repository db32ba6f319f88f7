"""A session on the bus, as an agent runtime uses it.

``Client.connect(...)`` opens one; ``session.intercom(**params)`` takes the intercom
tool's parameters and returns the JSON-ready result the tool hands back to the model.
Every failure, a bad parameter included, comes back as ``{"ok": False, "code",
"error"}``; only ``connect`` raises, because there is no session to report through.
"""

from __future__ import annotations

import collections
import itertools
import logging
import os
import threading
import time
from concurrent.futures import Future
from typing import Any, Callable

from schemas.attention import clean_capabilities
from schemas.config import Config
from schemas.errors import BusError, error_reply, error_text
from schemas.groups import env_group, resolve_home_group
from schemas.limits import CALL_TIMEOUT_S, PROTOCOL_VERSION
from schemas.protocol import envelope
from schemas.tools import intercom_params_problem

from .protocol import ASK_RESEND_DELAY_S
from .attention import AttentionMethods, changed_inbound
from .conversation import ConversationMethods
from .hosting import HostingMethods
from .ids import new_message_id
from .history import IDENTITY, RECEIVED, SENT, History
from .drafts import Turns
from .keys import CurveKeys
from .inbox import DEFAULT_LIMIT_BYTES, Inbox, InboxStatistics, Waitable
from .operator import OperatorMethods, acting_fields, changed_memberships
from .render import render_body
from .status import NOT_ANSWERING, OUT_OF_REACH, STATUS_TIMEOUT_S, local_status
from .transport import Transport

_ASK_MARGIN_S = 5.0
_UNANSWERED = frozenset({"broker_unavailable", "inbox_full"})   # a call given up on
_REPLY_FIELDS = ("from", "fromName", "message", "attachments", "sentAt")   # of an ask's answer
_SENT_KINDS = frozenset({"call", "supervisor"})
_SENT_ACTIONS = frozenset({"send", "ask", "reply"})
# Calls whose ok answer carries the session's memberships after the change.
_MEMBERSHIP_ACTIONS = frozenset({"join", "leave"})
_MEMBERSHIP_OPS = frozenset({"register_run"})
_log = logging.getLogger("intercom.client")


# Refusals a reply meets when its ask has not been resent to a restarted broker yet.
_AFTER_RESTART = frozenset({"unknown_thread", "no_pending_ask", "stale_turn"})
_RECEIVED_ASKS = 4096          # asks remembered with the broker they came through

class ConnectError(Exception):
    """The broker refused the session or did not answer; ``code`` says which."""

    def __init__(self, code: str, text: str) -> None:
        super().__init__(text)
        self.code = code




class Session(ConversationMethods, HostingMethods, OperatorMethods, AttentionMethods):
    """One connected session. Thread-safe; use as a context manager or call close()."""

    def __init__(self, *, name: str, endpoint: str | list[str], group: str | None, agent: str | None,
                 atomic_session_id: str | None, kind: str, parent: str | None,
                 config: Config, session_id: str | None = None, stage: str | None = None,
                 transcript: str | None = None, notify_undeliverable: bool = True,
                 confirm: Callable[[dict], bool] | None = None, grant: str | None = None,
                 token: str | None = None, history: History | None = None,
                 curve: CurveKeys | None = None,
                 inbox_limit_bytes: int = DEFAULT_LIMIT_BYTES, channel: str | None = None,
                 persistent: bool = True, cwd: str | None = None,
                 act_for: dict | None = None, keep_until: str = "read",
                 capabilities: dict | None = None, inbound: str | None = None,
                 guard: bool | dict | None = None) -> None:
        self.name = name
        self.cwd = cwd                   # shown in list rows (see client.connecting)
        self.endpoint = endpoint if isinstance(endpoint, str) else endpoint[0]
        self.config = config
        self.kind = kind
        self.confirm = confirm
        self._explicit_group = group
        self._fallback_group = resolve_home_group(env=env_group(os.environ), config=config.group)
        self._agent = agent
        self._atomic = atomic_session_id
        self._parent = parent
        self._stage = stage
        self._transcript = transcript
        self._notify_undeliverable = notify_undeliverable
        self._grant = grant
        self._history = history or History()
        self._channel = channel          # the channel id asked for (None: internal:<id>)
        self._persistent = persistent
        self._act_for = act_for          # a control connection's: the session it acts for
        # "seen": the broker keeps each message until mark_seen() says the program has it
        # (the MCP server: a tool result carried it); "read": receive() says it.
        self._keep_until = keep_until
        # What the list row says about how this session is reached (client.attention),
        # its inbound gate and its flood/loop guard, stated in every hello.
        self._capabilities = clean_capabilities(capabilities) or {}
        self._inbound = inbound
        self._guard = guard
        self._turns = Turns()            # guarded by _turn_lock
        self._turn_lock = threading.Lock()
        self.id: str | None = session_id
        self.token: str | None = token          # the reclaim secret of ``id``
        # The same in every hello of this object (its reconnects), different in any
        # other: the broker tells this client coming back from a second process
        # presenting the same identity entry, which gets a fresh id.
        self._instance = os.urandom(12).hex()
        # Grows with each hello (the wall clock in ms, or one more): a late copy of an
        # older hello can neither take this session's id nor open a phantom.
        self._attempt = 0
        self.welcome: dict[str, Any] = {}       # the broker's latest welcome
        # Brokers seen (a restart is a new broker id) and asks received under each:
        # a reply after a restart may have to wait for its ask's resend (_reply).
        self._broker_epoch = 0
        self._restarted_at = 0.0
        self._received_epoch: collections.OrderedDict[str, int] = collections.OrderedDict()
        self.home_group: str | None = None
        self.groups: list[str] = []
        self.parent_id: str | None = None
        # msg envelopes as they came (v and k still in); a take may let reading resume
        # (on_take, set once the transport is made)
        self._inbox = Inbox()
        self._events = Waitable()
        # Pipelined sends get cheap ids: a random prefix of this session (96 bits from
        # urandom) and a counter, so they are unique without a UUID each. They are
        # never asks, so nobody needs to reply to them by an 8-hex prefix.
        self._bulk_prefix = os.urandom(12).hex() + "-"
        self._bulk_next = itertools.count().__next__
        self._current: dict | None = None
        self._asks_waiting = 0
        self._supervisor_waiting = False
        self._welcome: Future = Future()
        self._acked_since_hello = False  # a membership change answered since the last hello
        self._closed = False
        self._lock = threading.Lock()
        self._transport = Transport(endpoint, self._on_inbound, self._hello, self._on_welcome,
                                    curve, lambda: self._inbox.size, inbox_limit_bytes)
        self._inbox.on_take = self._transport.room_made

    # -- connection ------------------------------------------------------------------

    def _hello(self) -> dict:
        fields: dict[str, Any] = {
            "id": new_message_id(), "name": self.name, "sessionKind": self.kind,
            "group": self._explicit_group, "fallbackGroup": self._fallback_group,
            "agent": self._agent, "atomicSessionId": self._atomic, "parent": self._parent,
            "stage": self._stage, "statusSuffix": self.config.status,
            "transcript": self._transcript,
            "notifyUndeliverable": self._notify_undeliverable,
            "keepUntil": self._keep_until if self._keep_until != "read" else None,
            "grant": self._grant,
            "channel": self._channel, "persistent": self._persistent, "cwd": self.cwd,
            "instance": self._instance, "attempt": self._next_attempt(),
            "capabilities": self._capabilities or None, "guard": self._guard or None,
            "inbound": self._inbound,
            **acting_fields(self._act_for),
        }
        if self.id is not None:
            fields.update(sessionId=self.id, token=self.token)
        if self.home_group is not None:
            # A reconnect keeps the startup identity and the memberships as this side
            # knows them: the broker adopts them, undoing any change never acknowledged.
            fields.update(homeGroup=self.home_group, groups=list(self.groups))
        self._acked_since_hello = False
        return envelope("hello", **{k: v for k, v in fields.items() if v is not None})

    def _next_attempt(self) -> int:
        self._attempt = max(self._attempt + 1, int(time.time() * 1000))
        return self._attempt

    def _on_welcome(self, result: dict) -> None:
        if result.get("ok"):
            if self.welcome and result.get("brokerId") != self.welcome.get("brokerId"):
                # A restarted (or another) broker: asks received before it are resent
                # by their askers shortly after their own welcome (see _reply).
                self._restarted_at = time.monotonic()
                self._broker_epoch += 1
            changed = result["sessionId"] != self.id or result["token"] != self.token
            self.welcome = {k: v for k, v in result.items() if k != "ok"}
            self.id = result["sessionId"]
            self.token = result["token"]
            if changed:
                self._history.record(IDENTITY, sessionId=self.id, reclaimSecret=self.token,
                                     name=self.name, atomicSessionId=self._atomic,
                                     brokerId=result.get("brokerId"))
            if self._acked_since_hello and self.home_group is not None:
                # The broker applied a change before this hello and answered it after
                # the hello was built: the welcome undid it. State the groups again.
                self._transport.resync()
            else:
                self.groups = list(result["groups"])
            self.home_group = result["homeGroup"]
            self.parent_id = result.get("parent")
        if not self._welcome.done():
            self._welcome.set_result(result)

    def _wait_welcome(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        result = None
        while result is None:
            left = deadline - time.monotonic()
            if left <= 0:
                self._transport.close(0.5)
                raise ConnectError("broker_unavailable",
                                   f"no broker answered at {self.endpoint} within {timeout:g} s")
            refused = self._transport.handshakes.refused(min(left, 0.1))
            if refused is not None:
                self._transport.close(0.5)
                raise ConnectError("auth_failed", error_text("auth_failed", detail=refused))
            try:
                result = self._welcome.result(0 if self._transport.handshakes.watching else left)
            except TimeoutError:
                continue
        self._transport.handshakes.end()
        if not result.get("ok"):
            self._transport.close(0.5)
            raise ConnectError(result.get("code", "internal_error"), result.get("error", ""))

    def _on_inbound(self, msgs: list[dict], events: list[dict]) -> None:
        # Runs on the thread servicing the socket: queue only. Envelope keys are
        # stripped and the body rendered when the message is taken (receive()).
        if msgs:
            self._inbox.put_all(msgs)
        if events:
            groups = changed_memberships(events)
            if groups is not None:       # a control connection acting for us moved them
                self.groups = groups
            policy = changed_inbound(events)
            if policy is not None:       # the person at the terminal set the gate
                self._inbound = policy
                self._acked_since_hello = True
            self._events.put_all(events)

    @property
    def connected(self) -> bool:
        return self._transport.connected

    def close(self) -> None:
        """Leave the bus now: peers see this session gone at once."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        if self.connected:
            self._end_turn(2.0)
            self._transport.call(envelope("bye", id=new_message_id(),
                                          **self._transport.last_reports()), 2.0)
        self._transport.close()

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- the intercom tool ----------------------------------------------------------

    def intercom(self, **params: Any) -> dict[str, Any]:
        """Run one intercom tool call; returns the JSON-ready result dict."""
        problem = intercom_params_problem(params)
        if problem:
            return error_reply(problem[0], **problem[1])
        action = params["action"]
        timeout = params.pop("timeout", None) if action == "ask" else None
        if "timeout" in params:
            return error_reply("invalid_params", detail="timeout applies to ask only")
        if action == "status" and "messageId" in params:
            return self.receipt(params["messageId"])
        if action == "status" and not self._closed:
            return self._status(params)
        if (self.config.confirmSend and self.confirm is not None and self.kind == "interactive"
                and action in ("send", "ask") and "replyTo" not in params):
            try:
                confirmed = self.confirm(dict(params))
            except Exception:   # a failing dialog must not send, nor raise into the tool
                confirmed = False
            if not confirmed:
                return error_reply("confirmation_declined")
        if action == "ask":
            return self._ask("call", params, timeout)
        if action == "reply" or "replyTo" in params:
            return self._reply(params)
        return self._call("call", params)

    def _status(self, params: dict) -> dict[str, Any]:
        """The broker's status answer, or this side's within STATUS_TIMEOUT_S (see
        client.status): never the full call timeout of a broker that just died."""
        result = None
        if self.connected:
            asked = time.monotonic()
            result = self._call("call", dict(params), STATUS_TIMEOUT_S)
            if result.get("code") in _UNANSWERED and (self._transport.heard_since(asked)
                                                      or self._transport.reading_paused):
                # Alive (it sent this session something meanwhile, or this side stopped
                # reading), only slow: the full wait.
                result = self._call("call", params, CALL_TIMEOUT_S - STATUS_TIMEOUT_S)
            if result.get("code") != "broker_unavailable":
                return result
        return local_status(since=self._transport.silent_since(), session_id=self.id,
                            name=self.name, groups=self.groups, home_group=self.home_group,
                            broker_id=self.welcome.get("brokerId"),
                            detail=NOT_ANSWERING if result else OUT_OF_REACH)

    def _reply(self, params: dict) -> dict[str, Any]:
        """A reply. After a broker restart the asker resends its ask a few seconds after
        its own welcome; a reply that comes first finds no ask. So a reply to a message
        received before the restart that is refused as unknown is sent again once, when
        the asker's resend is due."""
        if self._current is not None:
            params.setdefault("currentTurn", self._current.get("id"))
        result = self._call("call", dict(params))
        thread = params.get("replyTo") or (self._current or {}).get("id")
        epoch = self._received_epoch.get(thread) if thread else None
        if result.get("code") in _AFTER_RESTART and epoch is not None and \
                epoch < self._broker_epoch:
            wait = self._restarted_at + ASK_RESEND_DELAY_S + 1.0 - time.monotonic()
            if wait > 0:
                time.sleep(wait)      # until the asker's resend is due, not to settle
            result = self._call("call", dict(params))
        return result

    def _ask(self, kind: str, fields: dict, timeout: float | None) -> dict[str, Any]:
        """Block until the reply, within this session's pending-ask limit."""
        timeout = float(timeout or self.config.askTimeout)
        fields["timeout"] = timeout
        limit = self.config.maxPendingAsks
        with self._lock:
            if kind == "call" and self._asks_waiting >= limit:
                return error_reply("too_many_asks", limit=limit)
            if kind == "supervisor":
                if self._supervisor_waiting:
                    return error_reply("supervisor_busy")
                self._supervisor_waiting = True
            else:
                self._asks_waiting += 1
        try:
            result = self._call(kind, fields, timeout + _ASK_MARGIN_S)
            if result.get("ok") and self._history.enabled:
                # The reply came as the ask's answer, not through receive(): it is
                # still a message this session received (replyTo: the ask's id).
                self._history.record(RECEIVED, messageId=result.get("replyId"),
                                     expectsReply=False, replyTo=result.get("messageId"),
                                     **{k: result.get(k) for k in _REPLY_FIELDS})
            return result
        finally:
            with self._lock:
                if kind == "supervisor":
                    self._supervisor_waiting = False
                else:
                    self._asks_waiting -= 1

    def contact_supervisor(self, message: str, attachments: list | None = None,
                           timeout: float | None = None) -> dict[str, Any]:
        """Ask the session that launched this one and wait for its reply.

        Works across groups: the broker recorded the relationship at connect. One such
        wait at a time; it may run beside ordinary asks.
        """
        fields: dict[str, Any] = {"action": "ask", "message": message}
        if attachments is not None:
            fields["attachments"] = attachments
        problem = intercom_params_problem(fields)
        if problem:
            return error_reply(problem[0], **problem[1])
        del fields["action"]
        return self._ask("supervisor", fields, timeout)

    def mark_terminal(self) -> dict[str, Any]:
        """Declare that this session can no longer answer asks (a finished child)."""
        return self._call("status", {"replyCapability": "terminal"})

    def _call(self, kind: str, fields: dict, timeout: float = CALL_TIMEOUT_S) -> dict[str, Any]:
        if self._closed:
            return error_reply("session_closed")
        changes_groups = (fields.get("action") in _MEMBERSHIP_ACTIONS
                          or fields.get("op") in _MEMBERSHIP_OPS)
        result = self._transport.call(envelope(kind, id=new_message_id(), **fields), timeout,
                                      self._membership_answered if changes_groups else None)
        if result is None:
            if self._transport.reading_paused:
                return self._inbox_full()
            return error_reply("broker_unavailable", timeout_s=timeout)
        if self._history.enabled and kind in _SENT_KINDS and \
                fields.get("action", "ask") in _SENT_ACTIONS and result.get("ok"):
            self._history.record(SENT, action="contact_supervisor" if kind == "supervisor"
                                 else fields["action"], to=fields.get("to"),
                                 message=fields.get("message"), replyTo=fields.get("replyTo"),
                                 result=result)
        return result

    def _membership_answered(self, result: dict) -> None:
        # On the thread that read the answer, before the frames after it: only
        # acknowledged changes move the client's view (what the next hello states);
        # one refused, or given up on (see Transport.call), leaves it as it was.
        if result.get("ok") and isinstance(result.get("groups"), list):
            self.groups = list(result["groups"])
            self._acked_since_hello = True

    def send_nowait(self, to: str, message: str, attachments: list | None = None) -> Future:
        """Pipelined send: returns at once; the future gets the result dict.

        For bulk senders: many sends share frames, so throughput is not bound by
        round trips. Parameters are checked by the broker. A live delivery resolves
        to ``{"ok": True, "delivered": True, "messageId": id}`` (acknowledged in
        batches), a queued workflow send to the full ``queued`` answer, a failure to
        the usual error dict. A target past its backlog bound is waited for, not
        reported: the send goes again under its id while the target reads
        (client.backpressure), and fails ``target_backlogged`` only if it takes none
        for ``CALL_TIMEOUT_S``.
        """
        msg_id = f"{self._bulk_prefix}{self._bulk_next():x}"
        if not attachments and to.__class__ is str and message.__class__ is str:
            # Runs of these to one target travel as one ``sends`` envelope.
            return self._transport.request_send(to, msg_id, message)
        env = {"v": PROTOCOL_VERSION, "k": "call", "id": msg_id, "action": "send", "to": to,
               "message": message, "quiet": True}
        if attachments is not None:
            env["attachments"] = attachments
        return self._transport.request(env)

    # -- inbound ----------------------------------------------------------------------

    def inbox_statistics(self) -> InboxStatistics:
        """What waits for :meth:`receive` now, and whether reading is paused for it."""
        inbox = self._inbox
        return InboxStatistics(len(inbox.items), inbox.size, self._transport.inbox_limit_bytes,
                               self._transport.reading_paused, inbox.duplicates_dropped)

    def _inbox_full(self) -> dict[str, Any]:
        stats = self.inbox_statistics()
        return error_reply("inbox_full", count=stats.messages, size=stats.size,
                           limit=stats.limit_bytes)

    def receive(self, timeout: float | None = None) -> dict | None:
        """The next inbound message (it becomes the current turn), or None on timeout."""
        msg = self._inbox.take(timeout, self._transport.serve_until)
        if msg is None:
            return None
        msg.pop("v", None)
        msg.pop("k", None)
        if "attachments" not in msg:      # expanded from a msgs batch without one
            msg["attachments"] = []
        msg["body"] = render_body(msg, self.config.replyHint)
        self._current = msg
        if self._keep_until == "read":
            self._transport.saw(msg["id"])
        if msg.get("expectsReply"):
            self._received_epoch[msg["id"]] = self._broker_epoch
            if len(self._received_epoch) > _RECEIVED_ASKS:
                self._received_epoch.popitem(last=False)
        if self._history.enabled:
            self._history.record(RECEIVED, messageId=msg["id"], **{
                k: msg.get(k) for k in ("from", "fromName", "message", "attachments", "sentAt",
                                        "expectsReply", "replyTo", "target")})
        if msg.get("ackRequired") and not self._closed:
            # Taking the message is admission to this session's context: tell the broker.
            self._transport.post(envelope("received", ids=[msg["id"]]))
        return msg

    def next_event(self, timeout: float | None = None) -> dict | None:
        """The next in-band event (presence, ``undelivered``, ...), or None on timeout."""
        event = self._events.take(timeout)
        if event is not None:
            event.pop("v", None)
            event.pop("k", None)
        return event

    # -- lifecycle ---------------------------------------------------------------------

    def set_status(self, status: str) -> dict[str, Any]:
        """Publish lifecycle status: ``idle``, ``thinking`` or ``tool:<name>``.

        A noninteractive child may also report ``completed``, ``failed``,
        ``interrupted`` or ``cancelled``: it then refuses new asks and its pending
        asks fail (as :meth:`mark_terminal`).
        """
        if not isinstance(status, str):
            return error_reply("invalid_status")
        return self._call("status", {"status": status})


__all__ = ["BusError", "ConnectError", "Session"]
