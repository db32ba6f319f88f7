"""The nemesis: one function per fault, each applying it, holding it, and healing it.

What it owns: the faults' table :data:`FAULTS` (letter -> :class:`Fault`) and the
timeline each fault writes (:meth:`Stage.mark`: what was done, at which monotonic
time), which the checker and the report read. Every fault targets broker ``b1`` (the
home of worker 1's runs and sessions), holds for :data:`HOLD_S` unless it says
otherwise (past the 12 s broker lease where the lease matters), and leaves the system
whole: partitions dropped, paused processes continued, killed ones restarted on
their data directory and endpoint.

Holding a fault is waiting on the schedule, not for anything to settle; the harness
waits for answers (the drain) after the faults are healed.
"""

from __future__ import annotations

import signal
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

from .cluster import LEASE_S, Broker, Postgres
from .net import Network

HOLD_S = 20.0          # past the 12 s lease: a fault the lease should see
SHORT_S = 6.0          # clients cut from their broker: past the 3 s liveness window
SKEW = "+15s"          # clock skew of one broker: past the lease


@dataclass
class Stage:
    """What a fault acts on, and the timeline it leaves."""
    net: Network
    pg: Postgres
    brokers: list[Broker]
    clients: list[str]                    # client host names
    stop: threading.Event
    hold_s: float = HOLD_S
    lease_s: float = LEASE_S
    timeline: list[tuple[float, str]] = field(default_factory=list)
    # Clients cut from the target: (cut made, healed), monotonic; the checker counts
    # the live sends made meanwhile to receivers homed there.
    cut_window: tuple[float, float] | None = None

    def mark(self, what: str) -> None:
        self.timeline.append((time.monotonic(), what))

    def hold(self, seconds: float) -> None:
        self.stop.wait(seconds)

    @property
    def target(self) -> Broker:
        return self.brokers[0]

    def others(self) -> list[str]:
        return [b.name for b in self.brokers[1:]]


@dataclass(frozen=True)
class Fault:
    letter: str
    title: str
    act: Callable[[Stage], None]
    skew: str | None = None      # the target broker starts with this clock offset


def cut_from_postgres(stage: Stage) -> None:
    stage.mark("cut b1 from postgres")
    stage.net.cut(stage.target.name, ["pg"])
    stage.hold(stage.hold_s)
    stage.net.heal(stage.target.name)
    stage.mark("healed")


def cut_from_brokers(stage: Stage) -> None:
    stage.mark(f"cut b1 from {', '.join(stage.others())}")
    stage.net.cut(stage.target.name, stage.others())
    stage.hold(stage.hold_s)
    stage.net.heal(stage.target.name)
    stage.mark("healed")


def cut_clients(stage: Stage, seconds: float = SHORT_S, title: str = "cut clients from b1") -> None:
    stage.mark(title)
    for client in stage.clients:
        stage.net.cut(client, [stage.target.name])
    began = time.monotonic()
    stage.hold(seconds)
    for client in stage.clients:
        stage.net.heal(client)
    stage.mark("healed")
    stage.cut_window = (began, time.monotonic())


def cut_clients_for(seconds: float) -> Callable[[Stage], None]:
    """Fault ``c<seconds>``: as ``c``, held ``seconds``. Below the 3 s liveness window
    (2 s) the connections outlive the cut and TCP sends again what was dropped; past it
    (5, 10 s) the clients take the broker for gone, fail over to the next endpoint and
    the broker ends their sessions, so what it wrote to the old connections must come
    back from what it kept (receipts)."""
    def act(stage: Stage) -> None:
        cut_clients(stage, seconds, f"cut clients from b1 for {seconds:g} s")
    return act


def pause_past_lease(stage: Stage) -> None:
    stage.mark(f"SIGSTOP b1 for {stage.hold_s:g} s (lease {stage.lease_s:g} s)")
    stage.target.signal(signal.SIGSTOP)
    try:
        stage.hold(stage.hold_s)
    finally:
        stage.target.signal(signal.SIGCONT)
    stage.mark("SIGCONT b1")


def kill_postgres(stage: Stage) -> None:
    stage.mark("kill -9 postmaster")
    down_s = stage.pg.kill9_and_restart()
    stage.mark(f"postgres back after {down_s:.1f} s")


def minority_split(stage: Stage) -> None:
    stage.mark(f"split b1 | {', '.join(stage.others())}, pg")
    stage.net.cut(stage.target.name, [*stage.others(), "pg"])
    stage.hold(stage.hold_s)
    stage.net.heal(stage.target.name)
    stage.mark("healed")


def kill_in_partition(stage: Stage) -> None:
    stage.mark(f"split b1 | {', '.join(stage.others())}, pg")
    stage.net.cut(stage.target.name, [*stage.others(), "pg"])
    stage.hold(stage.hold_s / 4)
    stage.target.kill()
    stage.mark("kill -9 b1")
    stage.hold(stage.hold_s / 2)
    stage.net.heal(stage.target.name)
    stage.mark("healed")
    stage.target.start()
    stage.mark("b1 restarted")


def skewed_clock(stage: Stage) -> None:
    """b1 started with its clock ahead (see :attr:`Fault.skew`); the fault's window is
    the whole round, so nothing is done here but to mark it."""
    stage.mark(f"b1 clock {SKEW} since start")


FAULTS = {f.letter: f for f in [
    Fault("a", "broker cut from PostgreSQL", cut_from_postgres),
    Fault("b", "broker cut from the other brokers", cut_from_brokers),
    Fault("c", "clients cut from their broker", cut_clients),
    Fault("d", "broker paused past its lease", pause_past_lease),
    Fault("e", "PostgreSQL killed and restarted", kill_postgres),
    Fault("f", "minority split: broker alone vs brokers + PostgreSQL", minority_split),
    Fault("g", "broker killed in a partition, healed, restarted", kill_in_partition),
    Fault("h", f"clock skew {SKEW} on one broker", skewed_clock, skew=SKEW),
]}
DEFAULT = list(FAULTS)        # run when no faults are named
# Variants, named only: clients cut from b1 for 2, 5 and 10 s (c holds SHORT_S).
FAULTS.update({f"c{s}": Fault(f"c{s}", f"clients cut from their broker for {s} s",
                              cut_clients_for(float(s))) for s in (2, 5, 10)})
