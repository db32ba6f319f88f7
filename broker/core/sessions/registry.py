"""Connected sessions and the indexes that find them.

Invariants the registry keeps:

* every live session is reachable by id, routing identity, lower-cased name,
  8-hex id prefix, Atomic session id and each group it belongs to, and by nothing
  once it is removed;
* a session always belongs to at least one group;
* a control connection (:mod:`broker.core.sessions.control`) is found by id and routing
  identity only: no group, name, prefix or Atomic index holds it, so nothing that
  looks sessions up by those (list, groups, presence, targets) ever meets it;
* ``subgroups[run_id]`` names exactly the groups ``workflow:<run_id>/...`` that have
  a member, so authority over a run's subgroups is found without a scan.

Who may see whom is not decided here but in :mod:`broker.core.sessions.authority`.
"""

from __future__ import annotations

import hashlib

from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import Any, Iterable

from schemas.attention import ACCEPT
from schemas.limits import PREFIX_LEN
from schemas.names import CONTROL, IDLE, INTERACTIVE, LIVE, run_of_group


@dataclass(frozen=True, slots=True)
class StageBinding:
    """What a stage session is bound to: its run, its node, its transcript."""

    run_id: str
    node_key: str          # the node's name path inside the run (Node.key())
    path: str              # canonical ``workflow:<run>/<stage>[/...]``
    transcript: str        # same transcript again: no duplicate pre-start entries


@dataclass(slots=True, eq=False)
class Session:
    id: str
    name: str
    identity: bytes
    token: str
    home_group: str
    groups: dict[str, None]                 # insertion-ordered set
    kind: str = INTERACTIVE
    agent: str | None = None
    atomic_session_id: str | None = None
    parent_id: str | None = None
    instance: str | None = None             # the client's per-process nonce (see broker.core.assembly.arrival.hello)
    reclaimed_with: str | None = None       # hash of the secret its id came back with
    attempt: int = 0                        # its client's latest hello attempt (0: none)
    attempt_of: str = ""                    # instance_tag of the client that said it
    binding: StageBinding | None = None     # set once a stage session is bound
    status: str = IDLE
    status_suffix: str | None = None
    reply_capability: str = LIVE
    notify_undeliverable: bool = True       # wants undeliverable notices for its sticky sends
    connected_at: float = 0.0               # monotonic: connection order
    connected_wall: float = 0.0             # wall clock: what people read
    last_seen_at: float = 0.0               # monotonic: liveness
    cwd: str | None = None                  # the client's working directory (hello)
    peer: str = ""                          # who connected it (see Limits.max_sessions_per_connection)
    broker: str | None = None               # the broker holding it when not this one (a mirror)
    mirrored_stage: str | None = None       # a mirror's stage path (its broker holds the binding)
    sent_bytes: int = 0                     # written to its connection (broker.core.sessions.backlog)
    read_bytes: int = 0                     # of which its client reported read
    pending_bytes: int = 0                  # handed to it this round, not written yet
    # Targets its pipelined sends were refused target_backlogged for, and the first
    # id refused: later sends wait behind that one (broker.core.sessions.backlog).
    latches: dict | None = None
    # Live messages not yet seen, in delivery order, as the messaging room's receipts
    # batches (broker.core.messaging.receipts): the first ``kept_read`` are read. With
    # keep_until "seen" the read ones are kept too, and their bytes (``unseen_bytes``)
    # count against the backlog bound.
    keep_until: str = "read"
    kept: Any = None
    kept_read: int = 0
    unseen_bytes: int = 0
    serial: int = 0                         # the registry's count when it was added
    # How messages reach the agent behind it, and its inbound gate (schemas.attention;
    # broker.core.messaging.inbound_gate): both are in its row.
    capabilities: dict | None = None
    inbound: str = ACCEPT
    # Its flood and loop guard (broker.core.messaging.guard.GuardSettings); None: off.
    # A mirror's is its own broker's business: None here.
    guard: Any = None
    # A control connection's: the session it acts for, and the broker's operator (acting)
    acts_for: str | None = None
    acts_for_token: str | None = None
    operator: bool = False

    @property
    def stage(self) -> str | None:
        """The canonical path of the stage it is bound to, here or on its broker."""
        return self.binding.path if self.binding else self.mirrored_stage

    @property
    def is_control(self) -> bool:
        """A read-only control connection (see broker.core.sessions.control)."""
        return self.kind == CONTROL

    @property
    def prefix(self) -> str:
        return self.id[:PREFIX_LEN].lower()

    @property
    def status_text(self) -> str:
        return f"{self.status} · {self.status_suffix}" if self.status_suffix else self.status

    def public(self) -> dict[str, Any]:
        """The row other sessions see in list and presence events: ``id`` first (the
        field a reader copies), then its status and working directory, then the rest."""
        row = {
            "id": self.id,
            "status": self.status_text,
            "cwd": self.cwd,
            "name": self.name,
            "kind": self.kind,
            "groups": list(self.groups),
            "replyCapability": self.reply_capability,
            "connectedAt": self.connected_wall,
        }
        if self.agent:
            row["agent"] = self.agent
        if self.atomic_session_id:
            row["atomicSessionId"] = self.atomic_session_id
        if self.stage:
            row["stage"] = self.stage
        if self.capabilities is not None:
            row["capabilities"] = self.capabilities
        row["inbound"] = self.inbound
        return row


class Registry:
    """All live sessions of this broker, indexed."""

    def __init__(self) -> None:
        self.by_id: dict[str, Session] = {}
        self.by_identity: dict[bytes, Session] = {}
        self.by_group: dict[str, set[str]] = defaultdict(set)
        self.by_name: dict[str, set[str]] = defaultdict(set)
        self.by_prefix: dict[str, set[str]] = defaultdict(set)
        self.by_atomic: dict[str, set[str]] = defaultdict(set)
        self.subgroups: dict[str, set[str]] = {}    # run id -> its subgroups with members
        self.by_peer: Counter[str] = Counter()      # live sessions per peer
        self.added = 0                              # sessions added so far (Session.serial)

    def __len__(self) -> int:
        return len(self.by_id)

    def add(self, session: Session) -> None:
        self.added += 1
        session.serial = self.added
        self.by_id[session.id] = session
        self.by_identity[session.identity] = session
        self.by_peer[session.peer] += 1
        if session.is_control:
            return
        self.by_name[session.name.lower()].add(session.id)
        self.by_prefix[session.prefix].add(session.id)
        if session.atomic_session_id:
            self.by_atomic[session.atomic_session_id].add(session.id)
        for group in session.groups:
            self._join(group, session.id)

    def remove(self, session: Session) -> None:
        if self.by_id.pop(session.id, None) is not None:
            self._forget_peer(session.peer)
        if self.by_identity.get(session.identity) is session:
            del self.by_identity[session.identity]
        if session.is_control:
            return
        _discard(self.by_name, session.name.lower(), session.id)
        _discard(self.by_prefix, session.prefix, session.id)
        if session.atomic_session_id:
            _discard(self.by_atomic, session.atomic_session_id, session.id)
        for group in session.groups:
            self._leave(group, session.id)

    def rebind(self, session: Session, identity: bytes, peer: str) -> None:
        """Move a session to a new routing identity (a reconnect), from ``peer``."""
        if self.by_identity.get(session.identity) is session:
            del self.by_identity[session.identity]
        session.identity = identity
        self.by_identity[identity] = session
        self._forget_peer(session.peer)
        session.peer = peer
        self.by_peer[peer] += 1

    def _forget_peer(self, peer: str) -> None:
        left = self.by_peer[peer] - 1
        if left > 0:
            self.by_peer[peer] = left
        else:
            del self.by_peer[peer]

    def set_groups(self, session: Session, groups: Iterable[str]) -> None:
        """Change a session's memberships; costs O(groups gained and lost)."""
        new = dict.fromkeys(groups)
        if session.is_control:          # indexed by no group (see the invariants)
            session.groups = new
            return
        for group in session.groups:
            if group not in new:
                self._leave(group, session.id)
        for group in new:
            if group not in session.groups:
                self._join(group, session.id)
        session.groups = new

    def _join(self, group: str, session_id: str) -> None:
        members = self.by_group[group]
        if not members:
            owner = run_of_group(group)
            if owner is not None and owner[1]:
                self.subgroups.setdefault(owner[0], set()).add(group)
        members.add(session_id)

    def _leave(self, group: str, session_id: str) -> None:
        _discard(self.by_group, group, session_id)
        if group not in self.by_group:
            owner = run_of_group(group)
            if owner is not None and owner[1]:
                names = self.subgroups.get(owner[0])
                if names is not None:
                    names.discard(group)
                    if not names:
                        del self.subgroups[owner[0]]

    def members(self, group: str) -> list[Session]:
        ids = self.by_group.get(group, ())
        return [self.by_id[i] for i in ids]

    def neighbours(self, session: Session, groups: Iterable[str] | None = None) -> set[str]:
        """Ids of sessions sharing any of ``groups`` (default: the session's own)."""
        found: set[str] = set()
        for group in session.groups if groups is None else groups:
            found |= self.by_group.get(group, set())
        found.discard(session.id)
        return found


def _discard(index: dict[str, set[str]], key: str, value: str) -> None:
    bucket = index.get(key)
    if bucket is not None:
        bucket.discard(value)
        if not bucket:
            del index[key]


def instance_tag(instance: object) -> str:
    """What other brokers learn of a client's ``instance`` nonce (it tells a client
    from a second process holding its identity, so it is not passed on as it is)."""
    if not isinstance(instance, str) or not instance:
        return ""
    return hashlib.sha256(instance.encode()).hexdigest()[:16]
