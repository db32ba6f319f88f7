"""Asks: a message whose sender waits for one correlated reply.

Invariants:

* an ask is keyed by its message id (ids are unique across senders, see
  :mod:`broker.core.messaging.dedup`); it is settled exactly once: by a reply from its exact
  target, by the target leaving or becoming terminal, by its deadline, or dropped
  silently when its asker leaves;
* every unresolved ask is listed in its target's inbound table, in arrival order,
  and nowhere else: ``pending`` and ``reply`` read only that table, so a reply can
  never settle an ask that was not sent to the replier;
* at most ``max_pending_asks`` ordinary asks and one supervisor ask per asker;
* an ask of a session held here to a session another broker holds is *away*: that
  broker opens and settles it; here it is listed in ``away`` (by id, target and
  asker) until its answer comes back, that broker goes or the asker leaves, as an
  edge of the wait-for graph (:mod:`broker.core.messaging.ask_cycles`) and nothing else.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Any

from schemas.errors import BusError
from schemas.limits import MAX_PREVIEW_CHARS

from broker.core.sessions.registry import Session

# Who waits on an asker, as one broker tells another: (session id, the index of the
# one it waits on next, -1 for the asker), nearest first (broker.core.messaging.ask_cycles).
Waiters = tuple[tuple[str, int], ...]


@dataclass(slots=True, eq=False)
class Ask:
    id: str
    asker: Session
    target: Session
    message: str
    sent_at: float
    deadline_at: float
    supervisor: bool = False
    settled: bool = field(default=False)
    # An asker held by another broker: the sessions waiting on it, as that broker
    # told (forward's waitedBy, then link_waiters); see broker.core.messaging.ask_cycles.
    waited_by: Waiters = ()

    def row(self, now: float) -> dict[str, Any]:
        preview = self.message if len(self.message) <= MAX_PREVIEW_CHARS else \
            self.message[:MAX_PREVIEW_CHARS - 1] + "…"
        return {"messageId": self.id, "from": self.asker.id, "fromName": self.asker.name,
                "elapsedS": round(now - self.sent_at, 3), "preview": preview,
                "supervisor": self.supervisor}


@dataclass(slots=True, eq=False)
class AwayAsk:
    """An ask of a session held here, forwarded to the broker holding its target."""

    id: str
    asker_id: str
    target_id: str
    broker_id: str
    told: Waiters = ()              # the asker's waiters as last told to that broker


class AskTable:
    """Unresolved asks, by id, by target and by asker, plus their deadlines; and the
    asks away (forwarded), by id, target and asker."""

    def __init__(self) -> None:
        self.by_id: dict[str, Ask] = {}
        self.inbound: dict[str, dict[str, Ask]] = {}    # target id -> ask id -> Ask
        self.outbound: dict[str, dict[str, Ask]] = {}   # asker id -> ask id -> Ask
        self._deadlines: list[tuple[float, str]] = []
        self.away: dict[str, AwayAsk] = {}
        self.away_to: dict[str, dict[str, AwayAsk]] = {}     # target id -> ask id -> AwayAsk
        self.away_from: dict[str, dict[str, AwayAsk]] = {}   # asker id -> ask id -> AwayAsk
        # While asks are away: the targets of asks opened or closed since the cluster
        # last told other brokers who waits on their askers (broker.core.cluster.waiters).
        self.touched: set[str] = set()
        # The waitedBy of the forwarded request being handled (set around it by
        # broker.core.cluster.links, read as its ask opens).
        self.carried: Waiters = ()

    # -- admission -------------------------------------------------------------------

    def check_capacity(self, asker: Session, supervisor: bool, limit: int) -> None:
        """Raises BusError(supervisor_busy | too_many_asks)."""
        mine = self.outbound.get(asker.id)
        if mine is None:
            return                      # the common case: no ask of its own waits
        if supervisor:
            if any(a.supervisor for a in mine.values()):
                raise BusError("supervisor_busy")
        elif len(mine) >= limit and sum(not a.supervisor for a in mine.values()) >= limit:
            raise BusError("too_many_asks", limit=limit)

    def open(self, ask: Ask) -> None:
        self.by_id[ask.id] = ask
        self.inbound.setdefault(ask.target.id, {})[ask.id] = ask
        self.outbound.setdefault(ask.asker.id, {})[ask.id] = ask
        heapq.heappush(self._deadlines, (ask.deadline_at, ask.id))
        if self.away:
            self.touched.add(ask.target.id)

    def open_away(self, away: AwayAsk) -> None:
        self.close_away(away.id)        # a resent ask is forwarded again
        self.away[away.id] = away
        self.away_to.setdefault(away.target_id, {})[away.id] = away
        self.away_from.setdefault(away.asker_id, {})[away.id] = away

    # -- lookups -----------------------------------------------------------------------

    def pending_for(self, target: Session) -> list[Ask]:
        return list(self.inbound.get(target.id, {}).values())

    def next_deadline(self) -> float | None:
        while self._deadlines and self._deadlines[0][1] not in self.by_id:
            heapq.heappop(self._deadlines)
        return self._deadlines[0][0] if self._deadlines else None

    # -- settlement --------------------------------------------------------------------

    def close(self, ask: Ask) -> None:
        ask.settled = True
        self.by_id.pop(ask.id, None)
        _pop(self.inbound, ask.target.id, ask.id)
        _pop(self.outbound, ask.asker.id, ask.id)
        if self.away:
            self.touched.add(ask.target.id)

    def close_away(self, ask_id: str) -> None:
        away = self.away.pop(ask_id, None)
        if away is not None:
            _pop(self.away_to, away.target_id, ask_id)
            _pop(self.away_from, away.asker_id, ask_id)

    def expire(self, now: float) -> list[Ask]:
        due = []
        while self._deadlines and self._deadlines[0][0] <= now:
            _, ask_id = heapq.heappop(self._deadlines)
            ask = self.by_id.get(ask_id)
            if ask is not None:
                self.close(ask)
                due.append(ask)
        return due

    def to_target(self, target: Session) -> list[Ask]:
        asks = self.pending_for(target)
        for ask in asks:
            self.close(ask)
        return asks

    def from_asker(self, asker: Session) -> list[Ask]:
        asks = list(self.outbound.get(asker.id, {}).values())
        for ask in asks:
            self.close(ask)
        for ask_id in list(self.away_from.get(asker.id, ())):
            self.close_away(ask_id)
        return asks


def _pop(index: dict[str, dict[str, Any]], key: str, ask_id: str) -> None:
    bucket = index.get(key)
    if bucket is not None:
        bucket.pop(ask_id, None)
        if not bucket:
            del index[key]
