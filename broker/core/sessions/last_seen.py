"""When each session that left was last here, so a send to it can say "offline since".

A send or ask to a name (or id) that no live session answers to is refused
``target_not_found``. When a session of that name or id left lately and shared a
group with the caller when it left (so the caller could see it then), the refusal
also carries ``lastSeenAt``, the wall-clock time it left: the sender can tell "offline
since" from "never existed". Nobody learns of a session outside their groups.
Bounded: between half and all of the last ``LAST_SEEN_KEPT`` departures (names and
ids counted apart).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from broker.core.kernel.bounded import RecentMap
from broker.core.kernel.state import State
from broker.core.sessions.registry import Session

LAST_SEEN_KEPT = 16_384


@dataclass(frozen=True, slots=True)
class Left:
    at: float                  # wall clock
    groups: frozenset[str]     # its memberships when it left


class LastSeen:
    """Name (lower-cased) or id -> the latest :class:`Left` under it."""

    def __init__(self) -> None:
        self.by_key: RecentMap[str, Left] = RecentMap(LAST_SEEN_KEPT)


def session_left(state: State, event: Any) -> None:
    """A session left (here or on another broker, as a mirror): remember when."""
    session = event.session
    left = Left(state.wall, event.groups)
    state.last_seen.by_key[session.id] = left
    state.last_seen.by_key[session.name.lower()] = left


def fields(state: State, caller: Session, to: str) -> dict[str, float]:
    """``{"last_seen_at": t}`` for a refusal of ``to`` when the caller could see the
    session that last went by that name or id; else nothing."""
    table = state.last_seen.by_key
    left = table.get(to) or table.get(to.lower())
    if left is None or left.groups.isdisjoint(caller.groups):
        return {}
    return {"last_seen_at": left.at}
