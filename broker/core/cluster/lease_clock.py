"""When this broker renews its lease row and reads the other brokers' rows.

Both are timers of the engine, so the fake clock of the tests reaches them and
``Engine.next_deadline`` includes them: the lease is renewed every third of its length
(so two renewals may fail before it runs out), and between renewals the other rows
are read at most every :data:`DISCOVERY_S` seconds.
"""

from __future__ import annotations

from dataclasses import dataclass

from broker.core.kernel.commands import ReadBrokers, RenewLease

DISCOVERY_S = 1.0            # how often the other brokers' lease rows are read, at most


@dataclass(slots=True)
class LeaseClock:
    lease_s: float
    renew_at: float = 0.0
    discover_at: float = 0.0

    @property
    def next_deadline(self) -> float:
        return min(self.renew_at, self.discover_at)

    def due(self, now: float) -> RenewLease | ReadBrokers | None:
        """What is due at ``now``, if anything (at most one of the two)."""
        if now >= self.renew_at:
            self.renew_at = now + self.lease_s / 3
            self.discover_at = now + min(DISCOVERY_S, self.lease_s / 3)
            return RenewLease(self.lease_s)
        if now >= self.discover_at:
            self.discover_at = now + min(DISCOVERY_S, self.lease_s / 3)
            return ReadBrokers()
        return None
