"""The lease renewal and the reading of other brokers' rows are engine timers: the fake
clock reaches them and next_deadline includes them."""

from __future__ import annotations

from broker.core import Engine
from broker.core.cluster.lease_clock import DISCOVERY_S
from broker.core.kernel import inputs
from broker.core.kernel.commands import ReadBrokers, RenewLease


def leases(out):
    """The lease commands of ``out``, renewals without their tickets."""
    return [RenewLease(c.lease_s) if isinstance(c, RenewLease) else c
            for c in out if isinstance(c, (RenewLease, ReadBrokers))]


def test_the_lease_is_renewed_every_third_and_rows_read_between_on_the_fake_clock():
    engine = Engine(broker_id="b1", lease_s=6.0)
    assert engine.next_deadline() == 0.0
    assert leases(engine.handle(inputs.Tick(100.0))) == [RenewLease(6.0)]
    assert engine.lease_clock.next_deadline == 100.0 + DISCOVERY_S
    assert engine.next_deadline() <= 100.0 + DISCOVERY_S
    assert leases(engine.handle(inputs.Tick(100.5))) == []
    assert leases(engine.handle(inputs.Tick(101.0))) == [ReadBrokers()]
    assert leases(engine.handle(inputs.Tick(102.0))) == [RenewLease(6.0)]   # 6 / 3 s on


def test_a_short_lease_reads_rows_every_third_of_it():
    engine = Engine(broker_id="b1", lease_s=0.9)
    assert leases(engine.handle(inputs.Tick(0.0))) == [RenewLease(0.9)]
    assert abs(engine.lease_clock.next_deadline - 0.3) < 1e-9
    assert engine.next_deadline() <= engine.lease_clock.next_deadline
