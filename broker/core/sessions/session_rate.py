"""How fast new sessions may be opened: token buckets per connection and per peer.

Every session a broker opens under a new identity adds a record to its identity
table, a claim and an identity row to the store, and presence events for everyone
who can see it. A client that opens and closes sessions in a loop (churn) would make
the broker do that work without bound and push other clients' records out of the
table, so each hello that opens such a session takes one token from two buckets:
its connection's (ZeroMQ routing identity) and its peer's (a client process on ipc,
a CURVE key, an address on plain TCP; see ``State.peer``). Both refill at
``Limits.max_new_sessions_per_second``; a peer's holds :data:`NEW_SESSION_BURST`
tokens (a client may open that many sessions at once), a connection's
:data:`CONNECTION_NEW_SESSION_BURST` (it holds one session at a time). A hello finding
either empty is refused ``session_rate_limited`` and takes nothing.

Invariants:

* time is only the core's ``now`` (monotonic seconds), so a fake clock drives it;
* memory is bounded: a bucket that has refilled is the same as no bucket, so buckets
  idle long enough to be full are dropped (checked from the least recently used one
  on every take); what stays are the buckets touched within one refill time.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Hashable

from schemas.errors import BusError
from schemas.limits import CONNECTION_NEW_SESSION_BURST, NEW_SESSION_BURST


@dataclass(slots=True)
class _Bucket:
    tokens: float
    at: float       # when ``tokens`` was counted


class Buckets:
    """Token buckets by key, one rate and one burst for all; least recently used first."""

    def __init__(self, burst: int) -> None:
        self.burst = burst
        self._by_key: OrderedDict[Hashable, _Bucket] = OrderedDict()

    def __len__(self) -> int:
        return len(self._by_key)

    def wait(self, key: Hashable, now: float, rate: float) -> float:
        """Seconds until ``key`` has a token (0.0: it has one now)."""
        bucket = self._by_key.get(key)
        if bucket is None:
            return 0.0
        tokens = min(self.burst, bucket.tokens + (now - bucket.at) * rate)
        return 0.0 if tokens >= 1.0 else (1.0 - tokens) / rate

    def take(self, key: Hashable, now: float, rate: float) -> None:
        """Take one token of ``key`` (the caller checked :meth:`wait`)."""
        bucket = self._by_key.pop(key, None)
        tokens = self.burst if bucket is None else \
            min(self.burst, bucket.tokens + (now - bucket.at) * rate)
        self._by_key[key] = _Bucket(tokens - 1.0, now)
        self._drop_full(now, rate)

    def _drop_full(self, now: float, rate: float) -> None:
        by_key = self._by_key
        while by_key:
            oldest = next(iter(by_key.values()))
            if oldest.tokens + (now - oldest.at) * rate < self.burst:
                return
            by_key.popitem(last=False)


@dataclass(eq=False)
class SessionRate:
    """The buckets of connections (routing identities) and of peers."""

    connections: Buckets = field(default_factory=lambda: Buckets(CONNECTION_NEW_SESSION_BURST))
    peers: Buckets = field(default_factory=lambda: Buckets(NEW_SESSION_BURST))

    def admit(self, connection: bytes, peer: str, now: float, rate: float) -> None:
        """Take a token from both buckets. Raises BusError(session_rate_limited),
        taking none, when either is empty."""
        for scope, buckets, key in (("connection", self.connections, connection),
                                    ("client", self.peers, peer)):
            wait_s = buckets.wait(key, now, rate)
            if wait_s > 0.0:
                raise BusError("session_rate_limited", scope=scope, limit=rate,
                               burst=buckets.burst, wait_s=wait_s)
        self.connections.take(connection, now, rate)
        self.peers.take(peer, now, rate)
