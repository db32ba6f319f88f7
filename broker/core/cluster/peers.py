"""The other brokers on this database, as this broker knows them: plain data.

Brokers sharing a store each hold a lease row with their ROUTER endpoint; each links
to every other one over ZeroMQ (a DEALER of its own to the other's ROUTER) and tells
it, over that link, every session it holds and every change of them. A session held
by another broker is a *mirror* here: an ordinary :class:`~broker.core.sessions.registry.Session`
of the registry with ``broker`` set and a routing identity no connection can have
(:func:`mirror_identity`), so targeting, visibility and presence apply to it
unchanged. Who acts on this data: :mod:`broker.core.cluster.links` (the link protocol),
:mod:`broker.core.cluster.mirrors` (rows in, registry changes out), :mod:`broker.core.cluster.forwarding`
(requests for mirrors).

Invariants:

* every mirror is in the registry and in exactly one ``Peer.mirrors`` (its broker's),
  and a broker declared gone has none;
* a mirror's identity starts with :data:`MIRROR_PREFIX`, which libzmq never gives a
  connection (its routing ids are five bytes; a peer may not pick one starting with
  a zero byte), so nothing a client sends is ever taken for a mirror's;
* a broker using CURVE links only to brokers whose lease row names a CURVE key, and a
  broker without CURVE only to brokers whose row names none; the others are in
  ``unlinked`` (never peers) while their rows are live;
* ``forwarded`` holds each request of a local session handed to another broker until
  its answer comes back, or its broker is gone (then it fails at once), or the
  session leaves; ``listing`` likewise each ``list`` waiting for other brokers' run
  rows (:mod:`broker.core.cluster.remote_listing`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from schemas.limits import LEASE_S

from broker.core.kernel.bounded import RecentMap
from broker.core.sessions.registry import Session

MIRROR_PREFIX = b"\x00@"


def mirror_identity(broker_id: str, session_id: str) -> bytes:
    return MIRROR_PREFIX + f"{broker_id}/{session_id}".encode()


def mirror_of(identity: bytes) -> tuple[str, str] | None:
    """(broker id, session id) of a mirror's identity; None for a connection's."""
    if identity[:2] != MIRROR_PREFIX:
        return None
    broker_id, _, session_id = identity[2:].decode(errors="replace").partition("/")
    return broker_id, session_id


class RecentSet:
    """The last ``size`` names added (a bounded set)."""

    def __init__(self, size: int) -> None:
        self._names: RecentMap[str, bool] = RecentMap(size)

    def add(self, name: str) -> None:
        self._names[name] = True

    def __contains__(self, name: object) -> bool:
        return name in self._names


@dataclass(slots=True, eq=False)
class Peer:
    """Another broker on the database."""

    broker_id: str
    endpoint: str
    lease_until: float                 # wall clock: its lease row's end, as last read
    curve_public: str = ""             # the CURVE key its ROUTER serves with, from its row
    identity: bytes | None = None      # its link on our ROUTER, once it said hello
    heard_at: float = 0.0              # monotonic: last frame on its link, or when met
    gone: bool = False                 # said bye, or its lease row ended: it is dead
    # Its link has been quiet past the liveness window. It is *not* dead (only its
    # lease row decides that): requests for its sessions and runs fail at once with
    # ``broker_unreachable`` until it speaks again, nothing of it is forgotten.
    silent: bool = False
    hello_at: float = 0.0              # monotonic: when this broker says ``link`` to it again
    hello_every_s: float = 0.0         # backoff of those hellos while it has not answered
    mirrors: set[str] = field(default_factory=set)


@dataclass(slots=True)
class Forwarded:
    broker_id: str
    target_name: str
    # A request for a workflow path keeps its envelope: if the run's broker dies before
    # answering, it is handled again once the run is adopted (see broker.core.cluster.ownership).
    env: dict | None = None


@dataclass(slots=True, eq=False)
class Cluster:
    endpoint: str = ""                 # this broker's ROUTER endpoint (told in hellos)
    lease_s: float = LEASE_S           # this broker's lease (told in hellos, heartbeats)
    curve_public: str = ""             # this broker's CURVE key ("" without CURVE)
    peers: dict[str, Peer] = field(default_factory=dict)
    by_link: dict[bytes, str] = field(default_factory=dict)      # link identity -> broker id
    remote: dict[str, Session] = field(default_factory=dict)     # mirror id -> mirror
    forwarded: dict[str, dict[str, Forwarded]] = field(default_factory=dict)
    changed: dict[str, Session] = field(default_factory=dict)    # local sessions to tell about
    claiming: set[bytes] = field(default_factory=set)   # hellos waiting for their id's claim
    # Brokers that said bye: their row may still be read before its release commits.
    departed: RecentSet = field(default_factory=lambda: RecentSet(64))
    unlinked: dict[str, str] = field(default_factory=dict)   # broker id -> why not, for people
    # Links from brokers whose rows were not read yet (CURVE): broker id -> (identity,
    # envelope), taken once the rows are read (broker.core.cluster.links).
    early_hellos: dict[str, tuple[bytes, dict]] = field(default_factory=dict)
    next_heartbeat_at: float = 0.0
    # Another broker shared the store since this one started (so it may have committed
    # jobs this broker never held: see broker.core.agents.conversations.joined).
    shared: bool = False
    # Runs hosted by mirrors, as their rows say: run id -> the hosting mirror's id (kept
    # after the mirror leaves, until its broker says the run ended or dies), and back.
    # The broker of a run's host owns the run (see broker.core.cluster.forwarding).
    run_hosts: dict[str, str] = field(default_factory=dict)
    hosting: dict[str, set[str]] = field(default_factory=dict)   # mirror id -> run ids
    # Runs other brokers own, as they said: run id -> broker id (broker.core.cluster.ownership);
    # this broker's runs that others have not heard of yet (True: owned, False: ended);
    # dead brokers' runs not adopted yet: broker id -> ownership.Orphans.
    run_owners: dict[str, str] = field(default_factory=dict)
    runs_changed: dict[str, bool] = field(default_factory=dict)
    orphans: dict[str, Any] = field(default_factory=dict)
    # Runs this broker lost (fenced out: another broker took them) whose new owner has
    # not spoken yet: run id -> until when (monotonic) they are refused run_moving.
    moving: dict[str, float] = field(default_factory=dict)
    # Subagents of other brokers' dormant runs (run id -> their records), so a send to
    # one by name is forwarded to the broker that holds it.
    foreign_subagents: dict[str, list] = field(default_factory=dict)
    # Lists of local sessions waiting for the rows of runs other brokers own:
    # session id -> token -> remote_listing.WaitingList.
    listing: dict[str, dict[str, Any]] = field(default_factory=dict)
    list_seq: int = 0

    @property
    def others(self) -> bool:
        """Other brokers are (or were, with runs not adopted yet) on this database."""
        return bool(self.peers or self.orphans)

    def session_left(self, session: Session) -> None:
        """``session`` left the registry: a mirror is forgotten, a local session's
        forwarded requests are dropped (nobody is left to answer)."""
        if session.broker is None:
            self.forwarded.pop(session.id, None)
            self.listing.pop(session.id, None)
            return
        self.remote.pop(session.id, None)
        # Its runs keep it as their last host (run_hosts): if its broker dies, they
        # follow it to the broker it fails over to (broker.core.cluster.ownership).
        self.hosting.pop(session.id, None)
        peer = self.peers.get(session.broker)
        if peer is not None:
            peer.mirrors.discard(session.id)

    def set_hosted(self, mirror_id: str, run_ids) -> None:
        """The runs mirror ``mirror_id`` hosts now, as its broker said."""
        for run_id in self.hosting.pop(mirror_id, ()):
            if self.run_hosts.get(run_id) == mirror_id:
                del self.run_hosts[run_id]
        runs = {r for r in run_ids if r.__class__ is str}
        if runs:
            self.hosting[mirror_id] = runs
            for run_id in runs:
                self.run_hosts[run_id] = mirror_id

    def live_count(self, wall: float) -> int:
        """Other brokers whose lease is live and that have not been seen to go."""
        return sum(1 for p in self.peers.values() if p.lease_until > wall and not p.gone)

    def linked(self) -> list[Peer]:
        """Peers this broker talks to: every one known and not gone."""
        return [p for p in self.peers.values() if not p.gone]


def link_row(session: Session, token_hash: str, hosts: list[str]) -> dict[str, Any]:
    """What another broker needs to mirror ``session`` (``hosts``: the runs it hosts)."""
    row = session.public()
    row.update(homeGroup=session.home_group, parent=session.parent_id,
               statusSuffix=session.status_suffix, status=session.status,
               tokenHash=token_hash, hosts=hosts)
    if session.attempt:
        row.update(attempt=session.attempt, attemptOf=session.attempt_of)
    return row
