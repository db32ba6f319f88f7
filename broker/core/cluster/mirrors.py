"""Mirrors: the sessions other brokers hold, kept in this broker's registry.

A ``link`` or ``link_presence`` from broker X carries rows of X's sessions; each one
becomes or updates a mirror (:mod:`broker.core.cluster.peers`), and each id X says left,
or every mirror of X once X is gone, leaves through
:func:`broker.core.sessions.connect.disconnect` like any session. Every change goes through
the same presence rules as a local one (:mod:`broker.core.sessions.presence`), so sessions on
this broker hear about sessions on X in-band, and this broker's PUB publishes it; the
events addressed to mirrors are dropped on the way out (X tells its own sessions).

Invariants: a mirror is never mistaken for a local session (``broker`` is set, its
identity is a mirror identity); its ``list`` row is the one its broker shows (a
stage session's ``stage`` included, from the row: the binding stays on its broker);
a row naming an id that a local session holds means that session's client moved to
X with its reclaim secret, so the local one leaves.
"""

from __future__ import annotations

from typing import Any

from schemas.attention import clean_capabilities, inbound_policy
from schemas.names import IDLE, INTERACTIVE, LIVE

from broker.core.cluster import remote_conversations as conversation_mirrors
from broker.core.workflow import held_sends as held
from broker.core.cluster.peers import Peer, mirror_identity
from broker.core.sessions.presence import membership_changed, status_changed
from broker.core.sessions.registry import Session
from broker.core.sessions.identities import remember
from broker.core.sessions.identity_table import IdentityRecord
from broker.core.workflow.stage_binding import host_returned
from broker.core.kernel.state import State


def upsert(state: State, peer: Peer, row: Any, now: float) -> None:
    """Add or update the mirror a row of ``peer`` describes (a bad row is counted).

    The caller has already made a session of that id held elsewhere leave."""
    if row.__class__ is not dict or not isinstance(row.get("id"), str) or not row.get("groups") \
            or not isinstance(row["groups"], list):
        state.stats["link.bad_row"] += 1
        return
    held = state.registry.by_id.get(row["id"])
    if held is not None and held.broker != peer.broker_id and stale(held, row):
        state.stats["link.stale_row"] += 1
        return
    if held is None:
        _add(state, peer, row, now)
    elif held.broker == peer.broker_id:
        _update(state, held, row)
    else:
        return
    hosts = row.get("hosts")
    state.cluster.set_hosted(row["id"], hosts if isinstance(hosts, list) else ())
    mirror = state.registry.by_id[row["id"]]
    if mirror.agent is not None:
        conversation_mirrors.mirrored(state, mirror, row, now)


def moved(state: State, peer: Peer, row: Any) -> Session | None:
    """The session a row of ``peer`` takes over: the same id held here or mirrored from
    another broker (its client reconnected to ``peer`` with its reclaim secret)."""
    held = state.registry.by_id.get(row.get("id")) if row.__class__ is dict else None
    if held is None or held.broker == peer.broker_id or stale(held, row):
        return None
    return held


def _attempt(row: dict) -> int:
    attempt = row.get("attempt")
    return attempt if attempt.__class__ is int and attempt > 0 else 0


def _attempt_of(row: dict) -> str:
    tag = row.get("attemptOf")
    return tag if isinstance(tag, str) and len(tag) <= 64 else ""


def stale(held: Session, row: Any) -> bool:
    """Whether a row for ``held``'s id comes from an older hello of its client than the
    one ``held`` was opened or taken back with (both said their attempts): a session
    opened by a hello delivered late, which must not take the id from its client."""
    return row.__class__ is dict and _attempt_of(row) == held.attempt_of != "" and \
        0 < _attempt(row) < held.attempt


def _add(state: State, peer: Peer, row: dict[str, Any], now: float) -> None:
    groups = [g for g in row["groups"] if isinstance(g, str)]
    connected_wall = row.get("connectedAt") if isinstance(row.get("connectedAt"), (int, float)) else state.wall
    session = Session(
        id=row["id"], name=str(row.get("name") or "?"),
        identity=mirror_identity(peer.broker_id, row["id"]), token="",
        home_group=str(row.get("homeGroup") or groups[0]), groups=dict.fromkeys(groups),
        kind=str(row.get("kind") or INTERACTIVE), agent=row.get("agent"),
        atomic_session_id=row.get("atomicSessionId") or None, parent_id=row.get("parent"),
        status=str(row.get("status") or IDLE), status_suffix=row.get("statusSuffix"),
        reply_capability=str(row.get("replyCapability") or LIVE),
        # Connection order across brokers: its wall-clock start, on this broker's clock.
        connected_at=now - max(0.0, state.wall - connected_wall), connected_wall=connected_wall,
        last_seen_at=now, peer=f"link:{peer.broker_id}", broker=peer.broker_id,
        cwd=row["cwd"] if isinstance(row.get("cwd"), str) else None,
        mirrored_stage=_stage(row), attempt=_attempt(row), attempt_of=_attempt_of(row),
        capabilities=clean_capabilities(row.get("capabilities")),
        inbound=inbound_policy(row.get("inbound")))
    state.registry.add(session)
    state.cluster.remote[session.id] = session
    # A subagent of a run held here, back on another broker: it gets what was held.
    held.adopt(state, session, state.registry.by_id.get(session.parent_id or ""))
    token_hash = row.get("tokenHash")
    if isinstance(token_hash, str) and token_hash:
        # Who holds the id, so its secret (and only that) takes it back here.
        remember(state, session.id, IdentityRecord(session.atomic_session_id, token_hash))
    peer.mirrors.add(session.id)
    membership_changed(state, session, set(), set(session.groups), connecting=True)
    # A host that failed over to ``peer`` while its run stayed here (its broker was
    # back first) still hosts it, through forwarded operations.
    host_returned(state, session)


def _update(state: State, session: Session, row: dict[str, Any]) -> None:
    if _attempt_of(row) != session.attempt_of:
        session.attempt, session.attempt_of = _attempt(row), _attempt_of(row)
    else:
        session.attempt = max(session.attempt, _attempt(row))
    groups = [g for g in row["groups"] if isinstance(g, str)]
    if groups != list(session.groups):
        before = set(session.groups)
        state.registry.set_groups(session, groups)
        membership_changed(state, session, before, set(session.groups))
    status, suffix = row.get("status") or IDLE, row.get("statusSuffix")
    capability = row.get("replyCapability") or LIVE
    stage = _stage(row)
    reach = (clean_capabilities(row.get("capabilities")), inbound_policy(row.get("inbound")))
    if (status, suffix, capability, stage, *reach) != (
            session.status, session.status_suffix, session.reply_capability,
            session.mirrored_stage, session.capabilities, session.inbound):
        session.status, session.status_suffix = str(status), suffix
        session.reply_capability = str(capability)
        session.mirrored_stage = stage
        session.capabilities, session.inbound = reach
        status_changed(state, session)


def _stage(row: dict[str, Any]) -> str | None:
    """The stage path a row names (its broker checked the binding), if any."""
    stage = row.get("stage")
    return stage if isinstance(stage, str) and stage else None
