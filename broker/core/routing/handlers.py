"""Handlers of the messaging actions and kinds: send, sends, ask, reply, pending, supervisor.

Thin by design: each reads its envelope and calls the one place that owns the rule
(:mod:`broker.core.routing.send_path` for every send, :mod:`broker.core.messaging.ask_actions` for asks,
:mod:`broker.core.messaging.replies` for replies). A handler returns its answer, or None when
the answer is deferred (an ask waiting for its reply, a send waiting for a commit).
"""

from __future__ import annotations

from typing import Any

from schemas.errors import BusError

from broker.core.routing.send_path import admit_sends, once
from broker.core.messaging.ask_actions import open_ask, pending_rows
from broker.core.routing.resolver import ClosedStageHost, resolve
from broker.core.messaging import guard
from broker.core.sessions.authority import refuse_non_agent
from broker.core.messaging.dedup import fingerprint
from broker.core.kernel.params import tool_params, turn_of
from broker.core.messaging.replies import body, reply as reply_to_thread
from broker.core.sessions.registry import Session
from broker.core.kernel.state import State


def send(state: State, session: Session, params: dict, re: str, now: float,
         env: dict) -> None:
    """The ``send`` action: one item through the send path (it answers itself)."""
    admit_sends(state, session, params.get("to"), [re], [params.get("message")], now,
                attachments=params.get("attachments"), reply_to=params.get("replyTo"),
                turn=turn_of(env), quiet=env.get("quiet") is True)


def sends(state: State, session: Session, env: dict, re: str | None, now: float) -> None:
    """The ``sends`` kind: pipelined plain sends to one target, each a quiet send."""
    ids, texts = env["ids"], env["messages"]
    if len(ids) != len(texts):
        raise BusError("bad_envelope", detail="sends needs lists 'ids' and 'messages' of one length")
    admit_sends(state, session, env.get("to"), ids, texts, now, quiet=True, batched=True)


def ask(state: State, session: Session, params: dict, re: str, now: float,
        env: dict) -> dict[str, Any] | None:
    to = params.get("to")
    mark = fingerprint("ask", to, params.get("message"), params.get("replyTo"),
                       params.get("attachments"))

    def admit() -> None:
        if not to:
            raise BusError("missing_param", action="ask", param="to")
        message, attachments = body("ask", params)
        # A session here, a mirror, or a closed stage's host (ask never holds or queues).
        target = resolve(state, session, to, "ask")
        late = target.stage.late_fields() if target.__class__ is ClosedStageHost else None
        asked = target if target.__class__ is Session else target.session
        if session.guard is not None:       # its flood and loop guard (messaging.guard)
            guard.quota(state, session, asked, now)
        open_ask(state, session, asked, re, message, attachments, params.get("timeout"), now,
                 supervisor=False, extra=late)
        guard.passed(state, session, asked, now)

    return once(state, session, "ask", mark, re, admit)


def reply(state: State, session: Session, params: dict, re: str, now: float,
          env: dict) -> dict[str, Any] | None:
    mark = fingerprint("reply", params.get("to"), params.get("message"), params.get("replyTo"),
                       params.get("attachments"))
    return once(state, session, "reply", mark, re,
                lambda: reply_to_thread(state, session, params, turn_of(env), re, now))


def pending(state: State, session: Session, params: dict, re: str, now: float,
            env: dict) -> dict[str, Any]:
    return {"pending": pending_rows(state, session, now)}


def supervisor(state: State, session: Session, env: dict, re: str | None, now: float) -> None:
    """A child asks the session that launched it, across groups if need be."""
    params = {k: env[k] for k in ("message", "attachments", "timeout") if k in env}
    params = tool_params({**params, "action": "ask"})
    mark = fingerprint("supervisor", None, params.get("message"), None, params.get("attachments"))

    def admit() -> None:
        message, attachments = body("contact_supervisor", params)
        if session.parent_id is None:
            raise BusError("not_supervisor")
        parent = state.registry.by_id.get(session.parent_id)
        if parent is None:
            raise BusError("peer_disconnected", name="The supervisor")
        refuse_non_agent(state, session, parent.id, parent)   # as for any other target
        open_ask(state, session, parent, re, message, attachments, params.get("timeout"),
                 now, supervisor=True)

    answer = once(state, session, "supervisor", mark, re, admit)
    if answer is not None:
        state.answer(session, re, answer)
