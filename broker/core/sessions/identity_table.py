"""Who last held each session id: the table a reclaim is checked against.

An id goes back to a client only with the reclaim secret of its last holder, and
only while some broker remembers that holder: this table in memory, or the store's
identity rows (see :mod:`broker.core.cluster.claims`). The table is bounded: past its bound
it forgets the identities remembered longest ago, *except* those that hold anything
(a live session, runs hosted now or before, conversations, subagents with held
sends, children, queued entries; see :func:`broker.core.sessions.identities.holders`), which
stay whatever the churn of other ids.

Invariants:

* oldest first: a record remembered again moves to the end;
* forgetting is done in sweeps: once the table is ``slack`` past the bound, the
  oldest records that hold nothing go until it is back at the bound, so the set of
  holders (a walk over runs and conversations) is computed once per ``slack`` new
  records, never per hello;
* when holders alone fill the table past the bound, it stays past it (holders are
  bounded by their own limits) and the next sweep waits for ``slack`` more records.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Callable, Iterator


@dataclass(frozen=True, slots=True)
class IdentityRecord:
    """Who last held a session id (persisted so a restart keeps the rule)."""

    atomic_session_id: str | None
    token_hash: str


class IdentityTable:
    """Session id -> :class:`IdentityRecord`, oldest first, bounded as described above."""

    def __init__(self) -> None:
        self._records: OrderedDict[str, IdentityRecord] = OrderedDict()
        self._settled = 0    # the size the last sweep left (at least the bound then)

    def __len__(self) -> int:
        return len(self._records)

    def __contains__(self, session_id: object) -> bool:
        return session_id in self._records

    def __iter__(self) -> Iterator[str]:
        return iter(self._records)

    def get(self, session_id: str) -> IdentityRecord | None:
        return self._records.get(session_id)

    def restore(self, session_id: str, record: IdentityRecord) -> None:
        """Take a record back from the store (no sweep: the next :meth:`remember` does)."""
        self._records[session_id] = record
        self._records.move_to_end(session_id)

    def remember(self, session_id: str, record: IdentityRecord, bound: int,
                 holding: Callable[[], set[str]]) -> list[str]:
        """Remember ``record`` as the newest; returns the ids forgotten to stay bounded
        (``holding()`` names the ids that must stay; called only when sweeping)."""
        self.restore(session_id, record)
        if len(self._records) <= max(bound, self._settled) + max(1, bound // 16):
            return []
        keep = holding()
        excess = len(self._records) - bound
        forgotten = []
        for old in self._records:
            if len(forgotten) >= excess:
                break
            if old not in keep:
                forgotten.append(old)
        for old in forgotten:
            del self._records[old]
        self._settled = len(self._records)
        return forgotten
