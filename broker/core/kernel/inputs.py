"""What the IO shell tells the engine: one frozen type per kind of input.

The shell hands each to :meth:`broker.core.assembly.engine.Engine.handle`, the engine's
one entry point (as h11's ``Connection`` takes events), and gets the commands to carry
out. Every input carries ``now`` (the monotonic clock) and ``wall`` (seconds since the
epoch, what people read; None: take ``now``), so the fake clock of the tests reaches
everything the engine decides.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from schemas.errors import BusError

from broker.core.kernel.records import InvocationSaved, LeaseRenewed, Snapshot, StickyRow


# The inputs of every round (Frame, Tick, Wrote) are named tuples: as immutable as a
# frozen dataclass, and built in a third of its time (which sets each field through
# object.__setattr__), once per frame.

class Frame(NamedTuple):
    """The decoded envelopes of one frame from connection ``identity``; ``peer`` names
    who is behind it, ``peer_is_address``: only an address every local client shares."""

    identity: bytes
    envs: list
    now: float
    wall: float | None = None
    peer: str = ""
    peer_is_address: bool = False


@dataclass(frozen=True, slots=True)
class BadFrame:
    """A frame from ``identity`` the shell could not decode."""

    identity: bytes
    error: BusError


class Tick(NamedTuple):
    """The clock reached ``now`` (see ``Engine.next_deadline``). ``heard_until``: the
    shell has read every frame that reached it before this moment (None: all until
    ``now``). A heartbeat still queued in the socket counts as heard: a session is
    silent only measured from there (see ``Engine._expire_silent``)."""

    now: float
    wall: float | None = None
    heard_until: float | None = None


class Wrote(NamedTuple):
    """The shell wrote ``counts`` bytes to these connections."""

    counts: dict
    now: float
    wall: float | None = None


@dataclass(frozen=True, slots=True)
class Committed:
    """The store write asked for with ``ticket`` is durable."""

    ticket: int
    now: float
    wall: float | None = None


@dataclass(frozen=True, slots=True)
class CommitFailed:
    """The store write asked for with ``ticket`` could not be committed (``code``)."""

    ticket: int
    now: float
    wall: float | None = None
    code: str = "internal_error"


@dataclass(frozen=True, slots=True)
class CommitKept:
    """The store wrote nothing for ``ticket``: it holds the same request (``kept``)."""

    ticket: int
    kept: StickyRow
    now: float
    wall: float | None = None


@dataclass(frozen=True, slots=True)
class BrokersRead:
    """The other brokers' live lease rows as the store has them now."""

    rows: list[LeaseRenewed]
    now: float
    wall: float | None = None


@dataclass(frozen=True, slots=True)
class RunsAdopted:
    """The store's answer to ``AdoptRuns(dead)`` (None: it failed)."""

    dead: str
    snapshot: Snapshot | None
    now: float
    wall: float | None = None


@dataclass(frozen=True, slots=True)
class RunsFenced:
    """The store refused writes for ``run_ids`` because another broker owns them now
    (their owner or epoch changed): this broker was deposed from them."""

    run_ids: list[str]
    now: float
    wall: float | None = None


@dataclass(frozen=True, slots=True)
class JobsRead:
    """Queued invoke jobs read from the store for a ``ReadJobs``."""

    rows: list[InvocationSaved]
    now: float
    wall: float | None = None


@dataclass(frozen=True, slots=True)
class LinkRefused:
    """The CURVE handshake of the link to ``broker_id`` was refused."""

    broker_id: str
    now: float
    wall: float | None = None


@dataclass(frozen=True, slots=True)
class ShellFigures:
    """What only the IO shell can measure; None where it cannot (no file to size,
    no commit yet)."""

    pid: int = 0
    started_at: float = 0.0              # wall clock
    frames_in: int = 0
    frames_out: int = 0
    store_file_bytes: int | None = None  # the database file and its WAL
    commit_p50_s: float | None = None    # over the latest commits
    commit_p99_s: float | None = None
    commits: int = 0                     # transactions committed since start
    pending_records: int = 0             # handed to the worker, not yet written



# ShellFigures (above): the store's and process's figures, once a
# second, for stats.


@dataclass(frozen=True, slots=True)
class Stopping:
    """The broker is about to stop."""

    now: float
    wall: float | None = None


Input = (Frame | BadFrame | Tick | Wrote | Committed | CommitFailed | CommitKept | BrokersRead
         | RunsAdopted | RunsFenced | JobsRead | LinkRefused | Stopping | ShellFigures)
