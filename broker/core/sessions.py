"""Connected sessions and the indexes that find them.

Invariants the registry keeps:

* every live session is reachable by id, routing identity, lower-cased name,
  8-hex id prefix, Atomic session id and each group it belongs to, and by nothing
  once it is removed;
* a session always belongs to at least one group;
* visibility is membership intersection and is decided only by :func:`visible`
  (workflow invocation control extends it through the ``extra_visibility`` hook).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from schemas.limits import PREFIX_LEN


@dataclass(slots=True, eq=False)
class Session:
    id: str
    name: str
    identity: bytes
    token: str
    home_group: str
    groups: dict[str, None]                 # insertion-ordered set
    kind: str = "interactive"
    agent: str | None = None
    atomic_session_id: str | None = None
    parent_id: str | None = None
    stage: str | None = None                # canonical workflow path for kind="stage"
    status: str = "idle"
    status_suffix: str | None = None
    reply_capability: str = "live"
    connected_at: float = 0.0
    last_seen_at: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def prefix(self) -> str:
        return self.id[:PREFIX_LEN].lower()

    @property
    def status_text(self) -> str:
        return f"{self.status} · {self.status_suffix}" if self.status_suffix else self.status

    def public(self) -> dict[str, Any]:
        """The row other sessions see in list and presence events."""
        row = {
            "id": self.id,
            "name": self.name,
            "status": self.status_text,
            "kind": self.kind,
            "groups": list(self.groups),
            "replyCapability": self.reply_capability,
            "connectedAt": self.connected_at,
        }
        if self.agent:
            row["agent"] = self.agent
        if self.atomic_session_id:
            row["atomicSessionId"] = self.atomic_session_id
        if self.stage:
            row["stage"] = self.stage
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
        # Extra visibility beyond shared membership (workflow invocation control):
        # whether a viewer sees a session, who may see a set of groups that way, and
        # whether a viewer sees into a set of groups that way.
        self.extra_visibility: Callable[[Session, Session], bool] | None = None
        self.extra_watchers: Callable[[Iterable[str]], set[str]] | None = None
        self.sees_into: Callable[[Session, Iterable[str]], bool] | None = None

    def __len__(self) -> int:
        return len(self.by_id)

    def add(self, session: Session) -> None:
        self.by_id[session.id] = session
        self.by_identity[session.identity] = session
        self.by_name[session.name.lower()].add(session.id)
        self.by_prefix[session.prefix].add(session.id)
        if session.atomic_session_id:
            self.by_atomic[session.atomic_session_id].add(session.id)
        for group in session.groups:
            self.by_group[group].add(session.id)

    def remove(self, session: Session) -> None:
        self.by_id.pop(session.id, None)
        if self.by_identity.get(session.identity) is session:
            del self.by_identity[session.identity]
        _discard(self.by_name, session.name.lower(), session.id)
        _discard(self.by_prefix, session.prefix, session.id)
        if session.atomic_session_id:
            _discard(self.by_atomic, session.atomic_session_id, session.id)
        for group in session.groups:
            _discard(self.by_group, group, session.id)

    def rebind(self, session: Session, identity: bytes) -> None:
        """Move a session to a new routing identity (a reconnect)."""
        if self.by_identity.get(session.identity) is session:
            del self.by_identity[session.identity]
        session.identity = identity
        self.by_identity[identity] = session

    def set_groups(self, session: Session, groups: Iterable[str]) -> None:
        for group in session.groups:
            _discard(self.by_group, group, session.id)
        session.groups = dict.fromkeys(groups)
        for group in session.groups:
            self.by_group[group].add(session.id)

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

    def visible(self, viewer: Session, other: Session) -> bool:
        if viewer is other:
            return True
        if not viewer.groups.keys().isdisjoint(other.groups):
            return True
        return bool(self.extra_visibility and self.extra_visibility(viewer, other))

    def visible_to(self, viewer: Session) -> list[Session]:
        """Every other session the viewer may see, in connection order."""
        ids = self.neighbours(viewer)
        if self.extra_visibility:
            ids |= {s.id for s in self.by_id.values()
                    if s.id not in ids and s is not viewer and self.extra_visibility(viewer, s)}
        return sorted((self.by_id[i] for i in ids), key=lambda s: (s.connected_at, s.id))


def _discard(index: dict[str, set[str]], key: str, value: str) -> None:
    bucket = index.get(key)
    if bucket is not None:
        bucket.discard(value)
        if not bucket:
            del index[key]
