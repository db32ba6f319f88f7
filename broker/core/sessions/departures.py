"""Telling a departed session's peers, a bounded amount per round.

A session that leaves (bye, silence, a replaced connection) is out of the registry at
once: nothing routes to it, no listing shows it, PUB hears of it in the same round.
What costs is the in-band ``session_left`` to every peer that could see it: a crowd
of D sessions leaving a group of N costs D x N events. Those events are queued here
and written at most :data:`SENDS_PER_ROUND` per round (the engine spends what is left
of the round's budget after each input, and :func:`tell` runs from ``tick`` once the
input is drained), so the sessions that stay are answered between rounds instead of
after the whole crowd.

Invariants:

* departures are told in the order they happened, each to the sessions of this
  broker that could see it when it left and are still connected (a session that
  connected later never knew it);
* a session id's queued departure is told before any other presence about that id
  (:func:`settle`), so a session that comes back is never shown leaving afterwards;
* the queue holds at most one entry per departed session, and each entry's peer list
  only while it is being told.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from schemas import envelopes
from schemas.names import SESSION_LEFT

from broker.core.kernel.commands import Send
from broker.core.sessions.registry import Session

# About 20-40 ms of work on the machines we measure: a round stays short enough that
# a request arriving behind a crowd's byes waits one round, not the crowd.
SENDS_PER_ROUND = 20_000
BRIEF_FIELDS = ("id", "name", "status", "kind")


@dataclass(eq=False, slots=True)
class Departure:
    session: Session
    groups: frozenset[str]
    event: dict
    peers: list[str]                      # ids of the sessions that saw it leave
    serial: int                           # sessions added later never saw it
    told: int = 0


@dataclass(eq=False)
class Departures:
    queue: deque[Departure] = field(default_factory=deque)
    by_id: dict[str, Departure] = field(default_factory=dict)
    budget: int = SENDS_PER_ROUND

    def __len__(self) -> int:
        return len(self.queue)


def queue(state, session: Session, groups: set[str], peers: list[str]) -> None:
    """``session`` left ``groups``; ``peers`` (the sessions here that saw it) are told
    in turn."""
    row = session.public()
    # Who it was, not what it can do: brief, as a crowd's departures go to every peer.
    event = envelopes.presence(SESSION_LEFT, {k: row[k] for k in BRIEF_FIELDS})
    departures = state.departures
    earlier = departures.by_id.pop(session.id, None)
    if earlier is not None:
        _tell_all(state, earlier)
    departure = Departure(session, frozenset(groups), event, peers, state.registry.added)
    departures.queue.append(departure)
    departures.by_id[session.id] = departure
    tell(state)


def settle(state, session_id: str) -> None:
    """Before other presence about ``session_id``: its queued departure, told now."""
    departure = state.departures.by_id.pop(session_id, None)
    if departure is not None:
        _tell_all(state, departure)


def refill(state) -> None:
    """A new round: a full budget."""
    state.departures.budget = SENDS_PER_ROUND


def tell(state) -> None:
    """Tell queued departures while the round's budget lasts."""
    departures = state.departures
    while departures.queue and departures.budget > 0:
        departure = departures.queue[0]
        if departures.by_id.get(departure.session.id) is not departure:
            departures.queue.popleft()    # told already (settle)
            continue
        departures.budget -= _tell_some(state, departure, departures.budget)
        if departure.told >= len(departure.peers):
            departures.queue.popleft()
            del departures.by_id[departure.session.id]


def _tell_all(state, departure: Departure) -> None:
    _tell_some(state, departure, len(departure.peers))


def _tell_some(state, departure: Departure, budget: int) -> int:
    """Tell up to ``budget`` more of its peers; returns how many were taken."""
    start = departure.told
    end = min(len(departure.peers), start + budget)
    out, event, serial = state.out, departure.event, departure.serial
    by_id = state.registry.by_id
    for peer_id in departure.peers[start:end]:
        peer = by_id.get(peer_id)
        # Still connected, and not back since under the same id (a new session, which
        # never saw it); a mirror's broker tells its own sessions.
        if peer is not None and peer.serial <= serial and peer.broker is None:
            out.append(Send(peer.identity, event))
    departure.told = end
    return end - start
