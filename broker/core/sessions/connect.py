"""Sessions coming and going: hello, welcome, id reclaim, lifecycle status, departure.

A ``hello`` on a connection without a session opens one; a ``hello`` naming a live
session with its token and its client's ``instance`` nonce (or naming a holder gone
silent; or, same instance, with the secret the id was taken back with, when the
welcome went unread) moves that session to the new connection (a client
reconnecting) and keeps everything; with another instance it is a second process and
gets a fresh id. An id is granted to a new session only when no
live session holds it, and only to the holder of its last holder's reclaim secret: as
this broker remembers it, or (an id it does not remember) as the store's identity row
has it (:mod:`broker.core.cluster.claims`); anyone else gets a fresh id and the reason. A
hello that opens a session under a new identity takes a token of its connection's
and its peer's rate (:mod:`broker.core.sessions.session_rate`). Every departure (close,
silence, a replaced connection) goes through :func:`disconnect`.

Invariants:

* a routing identity speaks for at most one session, and only for that one;
* a session always has a home group and at least one membership;
* memberships claimed at connect obey the same authority as ``join``.
"""

from __future__ import annotations

import hashlib
import hmac
from typing import Any

from schemas import envelopes
from schemas.uuids import is_uuid
from schemas.errors import BusError
from schemas.groups import clean_group, has_control_chars, resolve_home_group
from schemas.limits import MAX_NAME_CHARS
from schemas.names import (CONTROL, IDLE, INTERACTIVE, NONINTERACTIVE, REPLY_CAPABILITIES, SESSION_KINDS,
                           STAGE, TERMINAL, TERMINAL_CHILD_STATUSES, THINKING, TOOL_PREFIX)

from broker.core.messaging import ask_actions as asking
from broker.core.sessions import backlog, control
from broker.core.workflow import held_sends as held
from broker.core.agents import conversations, invoke_actions as invoking
from broker.core.agents.registry import welcome_fields
from broker.core.sessions.authority import check_claimed
from broker.core.kernel.commands import Send
from broker.core.sessions.grants import admit_child, session_token
from broker.core.sessions.membership import change_groups
from broker.core.sessions.presence import membership_changed, status_changed
from broker.core.sessions.identities import remember
from broker.core.sessions.identity_table import IdentityRecord
from broker.core.kernel.records import IdentitySaved, SessionReleased
from broker.core.sessions.registry import Session, instance_tag
from broker.core.runs.paths import path_run
from broker.core.workflow.stage_binding import bind, host_returned, stage_home
from broker.core.kernel.lifecycle import SessionLeft, SessionOpened, emit
from broker.core.kernel.state import State

NOT_REMEMBERED = "that id is not remembered here and came without a reclaim secret"


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def hello(state: State, identity: bytes, current: Session | None, env: dict, re: str,
          now: float) -> None:
    """Raises BusError(already_connected | invalid_name | bad_envelope | unknown_run |
    invalid_path | workflow_different_group | invalid_agent | invalid_channel |
    channel_in_use | too_many_sessions | session_rate_limited)."""
    if current is not None:
        if env.get("sessionId") == current.id and _token_ok(current, env.get("token")):
            backlog.restart(current)
            _adopt_claimed(state, current, env)
            state.answer(current, re, welcome(state, current))
            return
        raise BusError("already_connected")
    name = env["name"].strip()
    if not name or len(name) > MAX_NAME_CHARS or has_control_chars(name):
        raise BusError("invalid_name", limit=MAX_NAME_CHARS)
    kind = env.get("sessionKind") or INTERACTIVE
    if kind not in SESSION_KINDS:
        raise BusError("bad_envelope", detail=f"sessionKind must be one of {', '.join(SESSION_KINDS)}")
    if kind == CONTROL:     # a read-only look, nobody's peer: broker.core.sessions.control
        peer = _counted_as(state, identity)
        _check_room(state, peer)
        state.session_rate.admit(identity, state.peer, now, state.limits.max_new_sessions_per_second)
        session = control.open_control(state, identity, env, now, name, peer)
        state.answer(session, re, welcome(state, session))
        return

    live = state.registry.by_id.get(env.get("sessionId") or "")
    if live is not None and env.get("instance") == live.instance and \
            0 < hello_attempt(env) < live.attempt:
        # Its client has said a newer hello since (this one was late): keep the route.
        state.stats["hello.stale"] += 1
        raise BusError("stale_hello", attempt=hello_attempt(env), session_id=live.id)
    if live is not None and _returning(state, live, env, now):
        _reattach(state, live, identity, env, re, now)
        return
    if identity in state.cluster.claiming:
        state.stats["hello.while_claiming"] += 1    # the first hello's answer is coming
        return

    conversation_claim = conversations.claim(state, env)
    peer = _counted_as(state, identity)
    _check_room(state, peer)
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
    groups, dropped = _fit_groups(state, home, groups)
    check_claimed(groups, home, stage is not None)
    session_id, refusal, unverified = _grant_id(state, env)
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

    attempt = hello_attempt(env)
    instance = env.get("instance") if isinstance(env.get("instance"), str) else ""
    state.hooks.claim(state, identity, session_id, refusal, bool(env.get("sessionId")), open_as,
                      now, unverified, (instance, attempt))


def hello_attempt(env: dict) -> int:
    """The hello's ``attempt`` (0 when absent or unusable)."""
    attempt = env.get("attempt")
    if attempt.__class__ is float and attempt.is_integer():
        attempt = int(attempt)          # msgpack from JavaScript: a double past 2**32
    return attempt if attempt.__class__ is int and 0 < attempt < 2 ** 63 else 0


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
        disconnect(state, holder, "moved", now)
    elif holder is not None:   # a session here took it while the claim was committed
        session_id, refusal = state.new_id(), "a live session holds that id"
    session = Session(
        id=session_id, name=name, identity=identity, instance=env.get("instance"),
        token=session_token(state.grant_key, parent_id, env.get("grant"), session_id, state.new_token()),
        home_group=home, groups=dict.fromkeys(groups), kind=kind,
        agent=env.get("agent"), atomic_session_id=env.get("atomicSessionId") or None,
        parent_id=parent_id,
        status_suffix=env.get("statusSuffix"),
        notify_undeliverable=env.get("notifyUndeliverable", True) is not False,
        connected_at=now, connected_wall=state.wall, last_seen_at=now, peer=peer,
        cwd=env.get("cwd"), attempt=hello_attempt(env),
        attempt_of=instance_tag(env.get("instance")))
    if refusal is None and env.get("sessionId") and isinstance(env.get("token"), str):
        session.reclaimed_with = token_hash(env["token"])    # see _returning
    state.registry.add(session)
    held.adopt(state, session, parent)
    conversation = conversations.opened(state, session, conversation_claim)
    _remember(state, session)
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


def heartbeat(state: State, session: Session, env: dict, re: str | None, now: float) -> None:
    backlog.report_read(session, env.get("read"))
    state.out.append(Send(session.identity, envelopes.heartbeat()))


def bye(state: State, session: Session, env: dict, re: str | None, now: float) -> None:
    state.stats["sessions.closed"] += 1
    disconnect(state, session, "closed", now)
    if re is not None:
        state.answer(session, re)


def lifecycle(state: State, session: Session, env: dict, re: str | None, now: float) -> None:
    """The ``status`` kind: activity and reply capability.

    Raises BusError(invalid_status | bad_envelope).
    """
    status = env.get("status")
    capability = env.get("replyCapability")
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
    status_changed(state, session)
    if status is not None:
        invoking.status_changed(state, session, now)
    if re is not None:
        state.answer(session, re, {"status": session.status_text})


def disconnect(state: State, session: Session, reason: str, now: float) -> None:
    """Remove a session and tell everyone who could see it."""
    if state.registry.by_id.get(session.id) is not session:
        return
    if session.is_control:
        control.close(state, session)
        return
    before = frozenset(session.groups)
    if session.broker is None:
        state.note("session_left", session=session.id, name=session.name, reason=reason)
    state.registry.remove(session)
    emit(state, SessionLeft(session, before))
    if session.broker is None:
        state.persist(SessionReleased(session.id, state.broker_id))


def _reattach(state: State, session: Session, identity: bytes, env: dict, re: str,
              now: float) -> None:
    """The same client came back on a new connection: keep everything, move the route."""
    state.registry.rebind(session, identity, _counted_as(state, identity))
    session.instance = env.get("instance")      # a silent holder's successor owns it now
    session.attempt = max(session.attempt, hello_attempt(env))
    session.attempt_of = instance_tag(env.get("instance"))
    backlog.restart(session)
    session.last_seen_at = now
    _adopt_claimed(state, session, env)
    state.stats["sessions.reattached"] += 1
    state.note("session_reattached", session=session.id, name=session.name)
    state.answer(session, re, welcome(state, session))


def _returning(state: State, live: Session, env: dict, now: float) -> bool:
    """Whether the hello is ``live``'s client on a new connection: with the token of
    its welcome (see :func:`_same_client`), or, from the same process, with the secret
    the id came back with: a welcome can go unread (the hello was left in a connection
    the client had given up on, and a restarted broker read it), and the client then
    still holds the secret before."""
    token = env.get("token")
    if _token_ok(live, token):
        return _same_client(state, live, env, now)
    return live.reclaimed_with is not None and isinstance(token, str) and \
        env.get("instance") is not None and env.get("instance") == live.instance and \
        hmac.compare_digest(token_hash(token), live.reclaimed_with)


def _same_client(state: State, live: Session, env: dict, now: float) -> bool:
    """Whether a hello presenting ``live``'s token is that client coming back on a new
    connection (a network blip, a failover), not a second process holding a copy of
    its identity entry: the same ``instance`` nonce, or a holder gone silent (its
    process died; the broker has not dropped it yet). A second process gets a fresh
    id, and ``live`` keeps working."""
    return env.get("instance") == live.instance or \
        now - live.last_seen_at > state.limits.liveness_s


def _counted_as(state: State, identity: bytes) -> str:
    """Whom a session from ``identity`` counts against for the per-connection bound:
    its peer (a client process, a CURVE key), or the connection itself where the
    peer is only an address that every local client shares (plain TCP)."""
    return f"{state.peer} via {identity.hex()}" if state.peer_is_address else state.peer


def _check_room(state: State, peer: str) -> None:
    """A new session fits the broker-wide and per-peer bounds. Raises BusError(too_many_sessions)."""
    limits, registry = state.limits, state.registry
    if len(registry) >= limits.max_sessions:
        raise BusError("too_many_sessions", count=len(registry), scope="",
                       flag="max-sessions", limit=limits.max_sessions)
    from_peer = registry.by_peer.get(peer, 0)
    if from_peer >= limits.max_sessions_per_connection:
        raise BusError("too_many_sessions", count=from_peer, scope=" from this connection",
                       flag="max-sessions-per-connection", limit=limits.max_sessions_per_connection)


def _fit_groups(state: State, home: str, groups: list[str]) -> tuple[list[str], list[str]]:
    """The memberships a (re)connecting session gets, and those past the bound.

    A reconnect must never be locked out by state the broker accepted before (or by a
    bound lowered since): the home group (when claimed) and the first groups that fit
    are kept, the rest are named in the welcome's ``droppedGroups``.
    """
    groups = list(dict.fromkeys(groups))
    limit = state.limits.max_groups
    if len(groups) <= limit:
        return groups, []
    first = [home] if home in groups else []
    kept = first + [g for g in groups if g != home][:limit - len(first)]
    chosen = set(kept)
    return kept, [g for g in groups if g not in chosen]


def _adopt_claimed(state: State, session: Session, env: dict) -> None:
    """A returning client states its memberships as it knows them; take them, so a
    change it was never told succeeded (answer lost, or given up on) is undone. A
    claim this session could not make at connect leaves its memberships as they are
    (the welcome tells the client which)."""
    claimed = env.get("groups")
    if not claimed or session.is_control:     # a control connection's groups never change
        return
    try:
        groups, _ = _fit_groups(state, session.home_group, [clean_group(g) for g in claimed])
        check_claimed(groups, session.home_group, session.stage is not None)
    except BusError:
        return
    if groups != list(session.groups):
        change_groups(state, session, groups)


def _remember(state: State, session: Session) -> None:
    record = IdentityRecord(session.atomic_session_id, token_hash(session.token))
    remember(state, session.id, record)
    state.persist(IdentitySaved(session.id, record.atomic_session_id, record.token_hash,
                                session.name, state.wall))


def _grant_id(state: State, env: dict) -> tuple[str, str | None, str | None]:
    """The requested id when the caller may hold it, else a fresh one and why; and
    the hash of the secret the store must confirm, when this broker cannot.

    Knowing an id (and its Atomic session id) is not enough: only its last holder's
    reclaim secret (the welcome's ``token``, kept in the session's identity history
    entry) takes it back. An id this broker does not remember (forgotten here, or
    saved by another broker it has not heard of) goes back only once the store's
    claim finds the same secret in the store's identity rows (broker.core.cluster.claims);
    without a secret it is not asked for at all.
    """
    wanted = env.get("sessionId")
    if not wanted:
        return state.new_id(), None, None
    if not is_uuid(wanted):
        return state.new_id(), "not a session id this broker issues", None
    token = env.get("token")
    held = state.registry.by_id.get(wanted)
    if held is not None and (held.broker is None or not _secret_ok(state, wanted, token)):
        return state.new_id(), "a live session holds that id", None
    if wanted in state.identities:
        if _secret_ok(state, wanted, token):
            return wanted, None, None
        return state.new_id(), "the reclaim secret does not match the id's last holder", None
    if not isinstance(token, str) or not token:
        return state.new_id(), NOT_REMEMBERED, None
    return wanted, None, token_hash(token)


def _secret_ok(state: State, session_id: str, token: Any) -> bool:
    """Whether ``token`` is the reclaim secret of the id's last holder."""
    record = state.identities.get(session_id)
    return record is not None and isinstance(token, str) and \
        hmac.compare_digest(token_hash(token), record.token_hash)


def _token_ok(session: Session, token: Any) -> bool:
    return isinstance(token, str) and token == session.token
