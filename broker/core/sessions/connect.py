"""Sessions coming and going, the sessions room's part: ids and their reclaim, rooms
for new sessions, heartbeats, bye and every departure. The hello's steps across the
rooms (binding a stage, held sends, conversations) are put together above them, in
:mod:`broker.core.assembly.arrival`, which uses the rules here; ``hb`` and ``bye``
with the receipts' part in :mod:`broker.core.assembly.reports`.

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
from schemas.groups import clean_group
from schemas.welcome import HOLDER_LIVE

from broker.core.sessions import backlog, control
from broker.core.sessions.authority import check_claimed
from broker.core.kernel.commands import Send
from broker.core.sessions.membership import change_groups
from broker.core.sessions.identities import remember
from broker.core.sessions.identity_table import IdentityRecord
from broker.core.kernel.records import IdentitySaved, SessionReleased
from broker.core.sessions.registry import Session
from broker.core.kernel.lifecycle import SessionLeft, emit
from broker.core.kernel.state import State

NOT_REMEMBERED = "that id is not remembered here and came without a reclaim secret"


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def hello_attempt(env: dict) -> int:
    """The hello's ``attempt`` (0 when absent or unusable)."""
    attempt = env.get("attempt")
    if attempt.__class__ is float and attempt.is_integer():
        attempt = int(attempt)          # msgpack from JavaScript: a double past 2**32
    return attempt if attempt.__class__ is int and 0 < attempt < 2 ** 63 else 0


def heartbeat(state: State, session: Session, env: dict, re: str | None, now: float) -> None:
    backlog.report_read(session, env.get("read"))
    state.out.append(Send(session.identity, envelopes.heartbeat()))


def bye(state: State, session: Session, env: dict, re: str | None, now: float) -> None:
    state.stats["sessions.closed"] += 1
    disconnect(state, session, "closed", now)
    if re is not None:
        state.answer(session, re)


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


def returning(state: State, live: Session, env: dict, now: float) -> bool:
    """Whether the hello is ``live``'s client on a new connection: with the token of
    its welcome (see :func:`_same_client`), or, from the same process, with the secret
    the id came back with: a welcome can go unread (the hello was left in a connection
    the client had given up on, and a restarted broker read it), and the client then
    still holds the secret before."""
    token = env.get("token")
    if token_ok(live, token):
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


def counted_as(state: State, identity: bytes) -> str:
    """Whom a session from ``identity`` counts against for the per-connection bound:
    its peer (a client process, a CURVE key), or the connection itself where the
    peer is only an address that every local client shares (plain TCP)."""
    return f"{state.peer} via {identity.hex()}" if state.peer_is_address else state.peer


def check_room(state: State, peer: str) -> None:
    """A new session fits the broker-wide and per-peer bounds. Raises BusError(too_many_sessions)."""
    limits, registry = state.limits, state.registry
    if len(registry) >= limits.max_sessions:
        raise BusError("too_many_sessions", count=len(registry), scope="",
                       flag="max-sessions", limit=limits.max_sessions)
    from_peer = registry.by_peer.get(peer, 0)
    if from_peer >= limits.max_sessions_per_connection:
        raise BusError("too_many_sessions", count=from_peer, scope=" from this connection",
                       flag="max-sessions-per-connection", limit=limits.max_sessions_per_connection)


def fit_groups(state: State, home: str, groups: list[str]) -> tuple[list[str], list[str]]:
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


def adopt_claimed(state: State, session: Session, env: dict) -> None:
    """A returning client states its memberships as it knows them; take them, so a
    change it was never told succeeded (answer lost, or given up on) is undone. A
    claim this session could not make at connect leaves its memberships as they are
    (the welcome tells the client which)."""
    claimed = env.get("groups")
    if not claimed or session.is_control:     # a control connection's groups never change
        return
    try:
        groups, _ = fit_groups(state, session.home_group, [clean_group(g) for g in claimed])
        check_claimed(groups, session.home_group, session.stage is not None)
    except BusError:
        return
    if groups != list(session.groups):
        change_groups(state, session, groups)


def remember_holder(state: State, session: Session) -> None:
    record = IdentityRecord(session.atomic_session_id, token_hash(session.token))
    remember(state, session.id, record)
    state.persist(IdentitySaved(session.id, record.atomic_session_id, record.token_hash,
                                session.name, state.wall))


def grant_id(state: State, env: dict) -> tuple[str, str | None, str | None]:
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
        return state.new_id(), HOLDER_LIVE, None
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


def token_ok(session: Session, token: Any) -> bool:
    return isinstance(token, str) and token == session.token
