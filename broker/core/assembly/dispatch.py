"""Who handles each message: every wire kind, intercom action and workflow operation.

This file is the table. :func:`handle` checks an envelope against its kind's
declaration in :mod:`schemas.kinds`, finds the session its connection speaks for,
asks :func:`broker.core.cluster.placement.place` whether the request belongs on another
broker (forwarded whole) or must wait for a dead broker's run (parked), and otherwise
calls the handler named here. The lifecycle listeners (:data:`LIFECYCLE`) and the
cluster's hooks (:data:`HOOKS`) are named here too, so the rooms never import the
cluster. A handler refuses by raising
:class:`~schemas.errors.BusError`; :func:`handle` turns every refusal (and any bug,
counted as ``internal_error``) into one answer through
:meth:`~broker.core.kernel.state.State.answer`, and the final pass builds its envelope with
:func:`schemas.envelopes.error_result`.
"""

from __future__ import annotations

from typing import Any, Callable

from schemas import kinds
from schemas.errors import BusError
from schemas.limits import PROTOCOL_VERSION

from broker.core.assembly import arrival, reports
from broker.core.sessions import (acting, authority, control, grants, last_seen, membership,
                                  presence)
from broker.core.workflow.overview import overview
from broker.core.messaging import ask_actions, guard, inbound_actions, receipts
from broker.core.workflow import closed_stages
from broker.core.agents import conversations, invoke_actions as invoking
from broker.core.cluster import (changes, claims, ownership, placement, remote_conversations,
                                 remote_listing)
from broker.core.workflow import hosting, run_listing, stage_binding as stages
from broker.core.routing import handlers as messaging
from broker.core.agents.recovery import recovery
from broker.core.agents.respond_action import ack_output, respond
from broker.core.kernel.hooks import Hooks
from broker.core.kernel.lifecycle import (ControlLeft, RunChanged, RunClosed, SessionChanged,
                                          SessionLeft, SessionOpened)
from broker.core.assembly.figures import stats
from broker.core.kernel.params import tool_params
from broker.core.kernel.state import State

KindHandler = Callable[..., None]
ActionHandler = Callable[..., "dict[str, Any] | None"]




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
KINDS: dict[str, KindHandler] = {
    "call": _call,
    "sends": messaging.sends,
    "supervisor": messaging.supervisor,
    "workflow": _workflow,
    "status": arrival.lifecycle,
    "received": _received,
    "grant": _grant,
    "respond": respond,
    "ack_output": ack_output,
    "sessions": conversations.sessions,
    "stats": stats,
    "overview": overview,
    "end_run": hosting.end_abandoned,
    "inbound": inbound_actions.inbound,
    "invoke": invoking.invoke,
    "finish_invocation": invoking.finish,
    "turn": conversations.turn,
    "recovery": recovery,
    "reset": conversations.reset,
    "delete": conversations.delete,
    "bye": reports.bye,
    "hb": reports.heartbeat,
}

ACTIONS: dict[str, ActionHandler] = {
    "list": run_listing.list_sessions,
    "groups": membership.list_groups,
    "join": membership.join,
    "leave": membership.leave,
    "status": reports.status,
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

# Who hears each lifecycle event (broker.core.kernel.lifecycle), in this order: a
# session's groups hear it left before its asks fail and its stage is unbound.
LIFECYCLE: dict[type, tuple] = {
    SessionOpened: (receipts.session_opened, changes.session_opened),
    SessionLeft: (presence.session_left, last_seen.session_left, ask_actions.session_left, stages.session_left,
                  closed_stages.session_left, conversations.session_left,
                  remote_conversations.session_left, receipts.session_left,
                  guard.session_left, changes.session_left),
    ControlLeft: (ask_actions.session_left, guard.session_left, changes.session_left),
    SessionChanged: (changes.session_changed,),
    RunChanged: (changes.run_changed,),
    RunClosed: (changes.run_closed,),
}

# Kinds declared as requests (schemas.kinds): refused without a usable id.
_REQUESTS = frozenset(k.name for k in kinds.CLIENT_KINDS if k.request)

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
            where = placement.place(state, session, kind, env)
            if where is not None:
                placement.carry_out(state, session, identity, where, env, [re], now)
                return
            arrival.hello(state, identity, session, env, re, now)
            return
        handler = KINDS.get(kind) if kind.__class__ is str else None
        if handler is None:
            raise BusError("unknown_kind", kind=kind)
        if session is None:
            raise BusError("not_connected")
        session.last_seen_at = now
        kinds.check(env, kind)
        if session.is_control:
            control.check_request(kind, env)     # it may only read
        if re is None and kind in _REQUESTS:
            raise BusError("bad_envelope", detail=f"a {kind} request needs a string id")
        where = placement.place(state, session, kind, env)
        if where is not None:
            ids = env["ids"] if kind == "sends" else [re]
            placement.carry_out(state, session, identity, where, env, ids, now)
            return
        handler(state, session, env, re, now)
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
    finally:
        state.resolved = None       # placement's target was this request's only


# What the rooms ask the cluster (broker.core.kernel.hooks).
HOOKS = Hooks(claim=claims.claim, check_run_here=ownership.check_here,
              wait_for_owners=remote_listing.wait_for_owners, run_broker=ownership.run_broker,
              orphaned=ownership.orphaned, holder_of=ownership.holder_of,
              handle=handle)
