"""A session's arrival, as one use case across the rooms: a ``hello`` opens a session
(or takes one back, or moves it to a new connection), and a ``status`` changes its
lifecycle state.

Opening a session is the sessions room's (ids, claims, groups, authority:
:mod:`broker.core.sessions.connect`), but the steps that follow drive the rooms above
it: the stage it binds and the entries queued for it (workflow), the sends held for a
returning subagent (workflow), its agent's conversation and the jobs waiting for it
(agents), the asks it can answer (messaging). They are put together here, above all
of them, in the order the welcome needs: the welcome first, then what was queued.
"""

from __future__ import annotations

from typing import Any

from schemas.attention import clean_capabilities, inbound_policy
from schemas.errors import BusError
from schemas.groups import clean_group, has_control_chars, resolve_home_group
from schemas.limits import MAX_NAME_CHARS
from schemas.welcome import HOLDER_LIVE
from schemas.names import (CONTROL, IDLE, INTERACTIVE, NONINTERACTIVE, REPLY_CAPABILITIES,
                           SESSION_KINDS, STAGE, TERMINAL, TERMINAL_CHILD_STATUSES, THINKING,
                           TOOL_PREFIX)

from broker.core.agents import conversations, invoke_actions as invoking
from broker.core.agents.registry import welcome_fields
from broker.core.cluster import remote_guard
from broker.core.kernel.lifecycle import SessionOpened, emit
from broker.core.kernel.state import State
from broker.core.messaging import ask_actions as asking, guard, receipts
from broker.core.runs.paths import path_run
from broker.core.sessions import backlog, connect, control
from broker.core.sessions.authority import check_claimed
from broker.core.sessions.grants import admit_child, session_token
from broker.core.sessions.presence import membership_changed, status_changed
from broker.core.sessions.registry import Session, instance_tag
from broker.core.workflow import held_sends as held
from broker.core.workflow.stage_binding import bind, host_returned, reconnected, stage_home


def hello(state: State, identity: bytes, current: Session | None, env: dict, re: str,
          now: float) -> None:
    """Raises BusError(already_connected | invalid_name | bad_envelope | unknown_run |
    invalid_path | workflow_different_group | invalid_agent | invalid_channel |
    channel_in_use | too_many_sessions | session_rate_limited)."""
    if current is not None:
        if env.get("sessionId") == current.id and connect.token_ok(current, env.get("token")):
            backlog.restart(current)
            connect.adopt_claimed(state, current, env)
            state.answer(current, re, welcome(state, current))
            reconnected(state, current, now)
            receipts.send_again(state, current)
            return
        raise BusError("already_connected")
    name = env["name"].strip()
    if not name or len(name) > MAX_NAME_CHARS or has_control_chars(name):
        raise BusError("invalid_name", limit=MAX_NAME_CHARS)
    kind = env.get("sessionKind") or INTERACTIVE
    if kind not in SESSION_KINDS:
        raise BusError("bad_envelope", detail=f"sessionKind must be one of {', '.join(SESSION_KINDS)}")
    if kind == CONTROL:     # a read-only look, nobody's peer: broker.core.sessions.control
        peer = connect.counted_as(state, identity)
        connect.check_room(state, peer)
        state.session_rate.admit(identity, state.peer, now, state.limits.max_new_sessions_per_second)
        session = control.open_control(state, identity, env, now, name, peer)
        state.answer(session, re, welcome(state, session))
        return

    live = state.registry.by_id.get(env.get("sessionId") or "")
    if live is not None and env.get("instance") == live.instance and \
            0 < connect.hello_attempt(env) < live.attempt:
        # Its client has said a newer hello since (this one was late): keep the route.
        state.stats["hello.stale"] += 1
        raise BusError("stale_hello", attempt=connect.hello_attempt(env), session_id=live.id)
    if live is not None and connect.returning(state, live, env, now):
        _reattach(state, live, identity, env, re, now)
        return
    if identity in state.cluster.claiming:
        state.stats["hello.while_claiming"] += 1    # the first hello's answer is coming
        return

    conversation_claim = conversations.claim(state, env)
    peer = connect.counted_as(state, identity)
    connect.check_room(state, peer)
    parent_id = env.get("parent") or None
    child_grant = None
    if parent_id is not None:
        # Supervision is granted by the launcher, never claimed by the child.
        child_grant = admit_child(state.grant_key, state.used_grants, parent_id, env, state.wall)
    parent = state.registry.by_id.get(parent_id or "")
    if parent is not None and parent.broker is not None and parent.mirrored_stage:
        # A stage's subagents live where its run is (held sends, take-overs).
        state.hooks.check_run_here(state, path_run(parent.mirrored_stage))
    stage = None
    if kind == STAGE and env.get("stage"):
        home, run, node = stage_home(state, env["stage"], env.get("group"), env.get("grant"), now)
        stage = (run, node)
    else:
        home = clean_group(env.get("homeGroup") or resolve_home_group(
            explicit=env.get("group"),
            inherited=parent.home_group if parent else None,
            config=env.get("fallbackGroup")))
    restore = env.get("groups")
    groups = [clean_group(g) for g in restore] if restore else [home]
    groups, dropped = connect.fit_groups(state, home, groups)
    check_claimed(groups, home, stage is not None)
    session_id, refusal, unverified = connect.grant_id(state, env)
    if not (env.get("sessionId") and refusal is None and unverified is None):
        # A new identity (an id taken back with its secret, checked here, is none).
        state.session_rate.admit(identity, state.peer, now, state.limits.max_new_sessions_per_second)
    if child_grant is not None:     # nothing can refuse the hello any more: the grant is spent
        state.used_grants.use(child_grant, state.wall)

    def open_as(session_id: str | None, refusal: str | None, now: float) -> None:
        if session_id is None:          # a stale hello (see broker.core.cluster.claims)
            state.answer(identity, re, BusError("stale_hello", attempt=attempt,
                                                session_id=env.get("sessionId")))
            return
        _open(state, identity, env, re, now, session_id, refusal, name, kind, parent,
              home, groups, dropped, stage, peer, conversation_claim)

    attempt = connect.hello_attempt(env)
    instance = env.get("instance") if isinstance(env.get("instance"), str) else ""
    state.hooks.claim(state, identity, session_id, refusal, bool(env.get("sessionId")), open_as,
                      now, unverified, (instance, attempt))


def _open(state: State, identity: bytes, env: dict, re: str, now: float, session_id: str,
          refusal: str | None, name: str, kind: str, parent: Session | None, home: str,
          groups: list[str], dropped: list[str], stage: tuple | None, peer: str,
          conversation_claim: conversations.Claim | None) -> None:
    """The rest of a hello, once its id is this broker's (see broker.core.cluster.claims)."""
    parent_id = env.get("parent") or None
    holder = state.registry.by_id.get(session_id)
    if holder is not None and holder.broker is not None:
        # Claimed with its secret while another broker held it: the client moved
        # here (from a broker that died, or that it lost); that broker hears of it.
        state.stats["sessions.moved_here"] += 1
        connect.disconnect(state, holder, "moved", now)
    elif holder is not None:   # a session here took it while the claim was committed
        session_id, refusal = state.new_id(), HOLDER_LIVE
    session = Session(
        id=session_id, name=name, identity=identity, instance=env.get("instance"),
        token=session_token(state.grant_key, parent_id, env.get("grant"), session_id, state.new_token()),
        home_group=home, groups=dict.fromkeys(groups), kind=kind,
        agent=env.get("agent"), atomic_session_id=env.get("atomicSessionId") or None,
        parent_id=parent_id,
        status_suffix=env.get("statusSuffix"),
        notify_undeliverable=env.get("notifyUndeliverable", True) is not False,
        keep_until=receipts.SEEN if env.get("keepUntil") == receipts.SEEN else "read",
        connected_at=now, connected_wall=state.wall, last_seen_at=now, peer=peer,
        cwd=env.get("cwd"), attempt=connect.hello_attempt(env),
        attempt_of=instance_tag(env.get("instance")),
        capabilities=clean_capabilities(env.get("capabilities")),
        inbound=inbound_policy(env.get("inbound")), guard=guard.settings(env.get("guard")))
    if refusal is None and env.get("sessionId") and isinstance(env.get("token"), str):
        session.reclaimed_with = connect.token_hash(env["token"])    # see _returning
    state.registry.add(session)
    held.adopt(state, session, parent)
    conversation = conversations.opened(state, session, conversation_claim)
    connect.remember_holder(state, session)
    membership_changed(state, session, set(), set(session.groups), connecting=True)
    state.stats["sessions.opened"] += 1
    state.note("session_opened", session=session.id, name=name, kind=kind, peer=peer)
    greeting = welcome(state, session)
    if dropped:
        greeting["droppedGroups"] = dropped
    if env.get("sessionId"):
        greeting["reclaimed"] = refusal is None
        if refusal is not None:
            greeting["reason"] = refusal
    state.answer(session, re, greeting)
    if stage is not None:
        # The welcome goes first; the retained entries follow before anything else.
        transcript = env.get("transcript") or session.atomic_session_id or session.id
        bind(state, session, *stage, transcript, now)
    host_returned(state, session)
    emit(state, SessionOpened(session, now))
    conversations.joined(state, conversation, now)


def welcome(state: State, session: Session) -> dict[str, Any]:
    return {
        "sessionId": session.id, "token": session.token, "name": session.name,
        "groups": list(session.groups), "homeGroup": session.home_group,
        "brokerId": state.broker_id, "livenessS": state.limits.liveness_s,
        "parent": session.parent_id, "pubEndpoint": state.pub_endpoint,
        "backlogBytes": state.limits.max_backlog_bytes,
        **welcome_fields(state.conversations.by_session.get(session.id)),
    }


def lifecycle(state: State, session: Session, env: dict, re: str | None, now: float) -> None:
    """The ``status`` kind: activity, reply capability, capabilities (merged into
    those the hello stated: see schemas.attention) and a person's input (``humanInput``:
    the loop guard's counts restart, broker.core.messaging.guard).

    Raises BusError(invalid_status | bad_envelope).
    """
    status = env.get("status")
    capability = env.get("replyCapability")
    stated = env.get("capabilities")
    if stated is not None:
        stated = clean_capabilities({**(session.capabilities or {}), **stated}) \
            if stated.__class__ is dict else None
        if stated is None:
            raise BusError("bad_envelope", detail="capabilities must be a map")
    moved = stated is not None and stated != session.capabilities
    if moved:
        session.capabilities = stated
    if status is not None:
        if status in TERMINAL_CHILD_STATUSES and session.kind == NONINTERACTIVE:
            capability = TERMINAL   # a finished child cannot answer asks any more
        elif not (status in (IDLE, THINKING) or
                  (status.startswith(TOOL_PREFIX) and len(TOOL_PREFIX) < len(status) <= MAX_NAME_CHARS)):
            raise BusError("invalid_status")
        session.status = status
    if capability is not None:
        if capability not in REPLY_CAPABILITIES:
            raise BusError("bad_envelope", detail="replyCapability must be 'live' or 'terminal'")
        asking.set_capability(state, session, capability)
    if moved or status is not None or capability is not None:
        status_changed(state, session)
    if status is not None:
        invoking.status_changed(state, session, now)
    if env.get("humanInput") is True:     # a person spoke to it: its pairs' turns restart
        remote_guard.human_input(state, session)     # here and on the other brokers
    if re is not None:
        state.answer(session, re, {"status": session.status_text})


def _reattach(state: State, session: Session, identity: bytes, env: dict, re: str,
              now: float) -> None:
    """The same client came back on a new connection: keep everything, move the route."""
    state.registry.rebind(session, identity, connect.counted_as(state, identity))
    session.instance = env.get("instance")      # a silent holder's successor owns it now
    session.attempt = max(session.attempt, connect.hello_attempt(env))
    session.attempt_of = instance_tag(env.get("instance"))
    stated = clean_capabilities(env.get("capabilities"))
    if stated is not None and stated != session.capabilities:
        session.capabilities = stated
        status_changed(state, session)
    backlog.restart(session)
    session.last_seen_at = now
    connect.adopt_claimed(state, session, env)
    state.stats["sessions.reattached"] += 1
    state.note("session_reattached", session=session.id, name=session.name)
    state.answer(session, re, welcome(state, session))
    reconnected(state, session, now)      # after the welcome: what its old link lost
    receipts.send_again(state, session)
