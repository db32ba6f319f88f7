"""Who handles each message: every wire kind, intercom action and workflow operation.

This file is the table. :func:`handle` checks an envelope against its kind's
declaration in :mod:`schemas.kinds`, finds the session its connection speaks for,
and calls the handler named here. A handler refuses by raising
:class:`~schemas.errors.BusError`; :func:`handle` turns every refusal (and any bug,
counted as ``internal_error``) into one answer through
:meth:`~broker.core.state.State.answer`, and the final pass builds its envelope with
:func:`schemas.envelopes.error_result`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from schemas import kinds
from schemas.errors import BusError
from schemas.limits import PROTOCOL_VERSION

from . import (acting, authority, connect, control, conversations, forwarding, grants, hosting,
               invoking, membership, messaging, ownership, stages)
from .overview import overview
from .recovery import recovery
from .respond import ack_output, respond
from .params import tool_params
from .state import State

KindHandler = Callable[..., None]
ActionHandler = Callable[..., "dict[str, Any] | None"]


@dataclass(frozen=True, slots=True)
class Route:
    handler: KindHandler
    needs_id: str | None = None   # a request: refused with this detail without a usable id


def _call(state: State, session, env: dict, re: str, now: float) -> None:
    action = env.get("action")
    handler = ACTIONS.get(action) if action.__class__ is str else None
    if handler is None:
        raise BusError("unknown_action", action=action)
    params = tool_params(env)
    # A control connection acts as itself or for the session it proved (control.actor).
    actor = control.actor(state, session, action) if session.is_control else session
    answer = handler(state, actor, params, re, now, env)
    if answer is not None:
        state.answer(session, re, answer, quiet=env.get("quiet") is True)
        if actor is not session:
            acting.acted(state, actor, action, answer)


def _workflow(state: State, session, env: dict, re: str, now: float) -> None:
    op = WORKFLOW_OPS.get(env["op"])
    if op is None:
        raise BusError("bad_envelope", detail=f"op must be one of {', '.join(WORKFLOW_OPS)}")
    if state.cluster.others and forwarding.host_operation(state, session, env, re, now):
        return                   # the run's broker answers it
    answer = op(state, session, env, now)
    if answer is not None:       # None: answered once its write is committed
        state.answer(session, re, answer)


def _received(state: State, session, env: dict, re: str | None, now: float) -> None:
    stages.received(state, session, env["ids"])


def _grant(state: State, session, env: dict, re: str, now: float) -> None:
    """A grant for a child this session is about to launch (``for: "child"``); a
    non-agent node's connection launches none.

    Raises BusError(bad_envelope | non_agent_launcher)."""
    if env.get("for", "child") != "child":
        raise BusError("bad_envelope", detail="for must be 'child'")
    authority.refuse_non_agent_launcher(state, session)
    state.answer(session, re, {"grant": grants.child_grant(state.grant_key, session.id, state.wall)})


# -- the tables ---------------------------------------------------------------------

# ``hello`` is the one kind handled without a session (see handle()).
KINDS: dict[str, Route] = {
    "call": Route(_call, "a call needs a string id"),
    "sends": Route(messaging.sends),
    "supervisor": Route(messaging.supervisor, "a supervisor ask needs a string id"),
    "workflow": Route(_workflow, "a workflow operation needs a string id"),
    "status": Route(connect.lifecycle),
    "received": Route(_received),
    "grant": Route(_grant, "a grant request needs a string id"),
    "respond": Route(respond, "a respond needs a string id"),
    "ack_output": Route(ack_output, "ack_output needs a string id"),
    "sessions": Route(conversations.sessions, "a sessions request needs a string id"),
    "overview": Route(overview, "an overview request needs a string id"),
    "invoke": Route(invoking.invoke, "an invoke needs a string id"),
    "finish_invocation": Route(invoking.finish, "finish_invocation needs a string id"),
    "turn": Route(conversations.turn),
    "recovery": Route(recovery, "a recovery report needs a string id"),
    "reset": Route(conversations.reset, "a reset needs a string id"),
    "delete": Route(conversations.delete, "a delete needs a string id"),
    "bye": Route(connect.bye),
    "hb": Route(connect.heartbeat),
}

ACTIONS: dict[str, ActionHandler] = {
    "list": membership.list_sessions,
    "groups": membership.list_groups,
    "join": membership.join,
    "leave": membership.leave,
    "status": membership.status,
    "send": messaging.send,
    "ask": messaging.ask,
    "reply": messaging.reply,
    "pending": messaging.pending,
}

WORKFLOW_OPS: dict[str, Callable[..., "dict[str, Any] | None"]] = {
    "register_run": hosting.register_run,
    "add_stages": hosting.add_stages,
    "stage_state": hosting.stage_state,
    "end_run": hosting.end_run,
    "revoke_stage": hosting.revoke_stage,
    "take_over": hosting.take_over,
}

# Kinds a client sends without an id: a refusal is counted, not answered (except
# not_connected, which tells a client whose session is gone to say hello again).
_UNANSWERED = frozenset({"hb", "status", "bye", "received", "turn"})


def handle(state: State, identity: bytes, env: Any, now: float) -> None:
    """Handle one decoded envelope from ``identity``; its commands go to ``state.out``."""
    if env.__class__ is not dict:
        state.stats["dropped.not_a_map"] += 1
        return
    re = env.get("id")
    if re.__class__ is not str or not 0 < len(re) <= kinds.ID_MAX:
        re = None
    kind = env.get("k")
    try:
        version = env.get("v")
        if version != PROTOCOL_VERSION or version.__class__ is not int:
            raise BusError("unsupported_version", version=version, supported=PROTOCOL_VERSION)
        session = state.registry.by_identity.get(identity)
        if kind == "hello":
            kinds.check(env, "hello")
            if re is None:
                raise BusError("bad_envelope", detail="missing field 'id'")
            connect.hello(state, identity, session, env, re, now)
            return
        route = KINDS.get(kind) if kind.__class__ is str else None
        if route is None:
            raise BusError("unknown_kind", kind=kind)
        if session is None:
            raise BusError("not_connected")
        session.last_seen_at = now
        kinds.check(env, kind)
        if session.is_control:
            control.check_request(kind, env)     # it may only read
        if route.needs_id and re is None:
            raise BusError("bad_envelope", detail=route.needs_id)
        route.handler(state, session, env, re, now)
    except ownership.Parked:
        return          # it waits for a dead broker's run to be adopted, then runs again
    except BusError as error:
        if re is None and kind.__class__ is str and kind in _UNANSWERED:
            state.stats[f"dropped.{error.code}"] += 1
            if error.code != "not_connected":
                return
        state.answer(identity, re, error)
    except Exception as exc:  # a bug must cost one request, never the broker
        state.stats["internal_error"] += 1
        state.internal_errors.append(exc)
        state.answer(identity, re, BusError("internal_error"))
