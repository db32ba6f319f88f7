"""When this broker renews its lease row and reads the other brokers' rows, and how
long it may act on its lease.

Both are timers of the engine, so the fake clock of the tests reaches them and
``Engine.next_deadline`` includes them: the lease is renewed every third of its length
(so two renewals may fail before it runs out), and between renewals the other rows
are read at most every :data:`DISCOVERY_S` seconds.

The lease is this broker's right to act as the owner of its runs, and only the
store's clock ends it. A renewal sent at (monotonic) ``t`` that commits ends no
earlier than ``t + lease_s`` by the store's clock, since the store stamps it later;
so the broker holds its lease until ``t + lease_s - margin`` on its own clock
(:attr:`LeaseClock.valid_until`), the margin covering a clock running slightly fast.
Past that, with no newer renewal committed, it must stop acting as the owner before
another broker may take its runs (:func:`broker.core.cluster.ownership.lapse`): the
check runs before every input, so a process resumed after a pause never acts on what
it held before the pause until a renewal commits again.
"""

from __future__ import annotations

from dataclasses import dataclass

from broker.core.kernel.commands import ReadBrokers, RenewLease

DISCOVERY_S = 1.0            # how often the other brokers' lease rows are read, at most
MARGIN_SHARE = 6             # the margin is this share of the lease (2 s of a 12 s lease)


@dataclass(slots=True)
class LeaseClock:
    lease_s: float
    renew_at: float = 0.0
    discover_at: float = 0.0
    valid_until: float | None = None   # monotonic: the lease holds until then (None: not
                                       # confirmed yet; the store took it at start)
    lapsed: bool = False               # past valid_until: acting as owner of nothing

    @property
    def next_deadline(self) -> float:
        return min(self.renew_at, self.discover_at)

    @property
    def margin_s(self) -> float:
        return self.lease_s / MARGIN_SHARE

    def due(self, now: float, ticket: int = 0) -> RenewLease | ReadBrokers | None:
        """What is due at ``now``, if anything (at most one of the two); a renewal
        carries ``ticket``."""
        if now >= self.renew_at:
            self.renew_at = now + self.lease_s / 3
            self.discover_at = now + min(DISCOVERY_S, self.lease_s / 3)
            return RenewLease(self.lease_s, ticket)
        if now >= self.discover_at:
            self.discover_at = now + min(DISCOVERY_S, self.lease_s / 3)
            return ReadBrokers()
        return None

    def renewed(self, sent_at: float, now: float) -> bool:
        """A renewal sent at ``sent_at`` committed (seen at ``now``). True when it ends
        a lapse: the lease holds again."""
        self.valid_until = max(self.valid_until or 0.0, sent_at + self.lease_s - self.margin_s)
        if self.lapsed and now < self.valid_until:
            self.lapsed = False
            return True
        return False

    def lapses(self, now: float) -> bool:
        """Whether the lease may have ended at ``now`` while the broker still acted on
        it (True once per lapse). The first call starts the count: the broker's lease
        was written as it started."""
        if self.valid_until is None:
            self.valid_until = now + self.lease_s - self.margin_s
        if self.lapsed or now < self.valid_until:
            return False
        self.lapsed = True
        return True
