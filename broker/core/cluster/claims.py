"""Session ids are unique store-wide: each broker claims the ids it grants.

Every session a broker opens is claimed in the store (:class:`SessionClaimed`), and
released when it leaves. A fresh id is random (a UUID), so its claim is written
without waiting. An id taken back (``sessionId`` with its reclaim secret) may be
taken back on another broker at the same moment, by a client that moved or by a
copy of it: while other brokers share the store, the welcome waits for the claim's
commit, and the store (one conditional write under its write lock) lets exactly one
broker have it. The loser opens a fresh id and says why in the welcome, as for any
refused reclaim.

An id this broker does not remember (forgotten past its identity bound, or saved by
a broker it has not linked to yet: a client failing over from a broker that died
early) is never granted on this broker's word: its claim carries the hash of the
secret the client gave, the store takes it only if its identity row for the id has
the same hash, and the welcome waits for that commit even on a lone broker.

A broker that died keeps its lease row until the lease runs out; its claims do not
block anyone meanwhile, since each claim names the brokers the claimant has seen
die (``gone``), and those whose link has been silent for two heartbeats (or that
never linked back in that time since this broker met them): a client
fails over only once its own broker went silent, about as long after the last
heartbeat as this broker gives up on the link, and must not lose its id to that race.

Invariants: an identity has at most one claim in flight (``Cluster.claiming``), and
gets exactly one welcome for it.
"""

from __future__ import annotations

from typing import Callable

from schemas.errors import BusError
from schemas.limits import heartbeat_s

from broker.core.kernel.records import SessionClaimed
from broker.core.kernel.state import State

Open = Callable[["str | None", "str | None", float], None]


def claim(state: State, identity: bytes, session_id: str, refusal: str | None,
          reclaiming: bool, open_as: Open, now: float, unverified: str | None = None,
          attempt: tuple[str, int] = ("", 0)) -> None:
    """Claim ``session_id`` and open the session with ``open_as(id, refusal, now)``,
    at once or once the claim is committed. ``unverified``: the hash of the reclaim
    secret the store must hold for the id (this broker does not remember it).
    ``attempt``: the hello's instance and attempt (see SessionClaimed). A claim the
    store refused as stale (the id is held under a newer attempt of the same client:
    records.ClaimStale) is a late hello, answered ``open_as(None, ...)``: nothing is
    opened, not even a fresh id."""
    if unverified is None and not (reclaiming and refusal is None and state.cluster.peers):
        state.persist(_claim(state, session_id, now, attempt=attempt))
        open_as(session_id, refusal, now)
        return
    claiming = state.cluster.claiming
    claiming.add(identity)

    def granted(now: float) -> None:
        claiming.discard(identity)
        open_as(session_id, None, now)

    def refused(now: float, error: BusError) -> None:
        claiming.discard(identity)
        state.stats[f"claims.refused.{error.code}"] += 1
        if error.code == "stale_hello":    # the store: a newer hello of this client won
            state.stats["hello.stale"] += 1
            open_as(None, error.text, now)
            return
        fresh = state.new_id()
        state.persist(_claim(state, fresh, now, attempt=attempt))
        open_as(fresh, error.text, now)

    state.persist(_claim(state, session_id, now, unverified, attempt), granted, refused)


def _claim(state: State, session_id: str, now: float, unverified: str | None = None,
           attempt: tuple[str, int] = ("", 0)) -> SessionClaimed:
    suspect_s = 2 * heartbeat_s(state.limits.liveness_s)   # silent this long: taken for dead
    # Silent: since its last frame, or since it was met if it never linked back (it
    # died before it heard of this broker, so it never will).
    gone = [p.broker_id for p in state.cluster.peers.values()
            if p.gone or now - p.heard_at > suspect_s]
    return SessionClaimed(session_id, state.broker_id, state.wall, gone, unverified,
                          attempt[1], attempt[0])
