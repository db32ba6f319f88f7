"""Sticky entries in bulk for the PostgreSQL store: the consecutive ``StickySaved``
records of a batch (a burst of durable sends) go as two statements over arrays rather
than one statement each, which is what a batch of a thousand entries costs.

The outcome of each entry is the one :meth:`broker.store.Store.apply` promises, as if
they had been written one by one in order: written; not written because its request
(sender id, message id) is an entry already, kept by any broker or earlier in the same
batch (a :class:`StickyKept` with the entry as stored); not written because the run
is no longer the writer's (fenced out: refused, ``False``); or a broker bug (its seq
is stored already), which fails the batch.
"""

from __future__ import annotations

from typing import Any

import psycopg

from broker.core.kernel.records import StickyKept, StickyRow, StickySaved
from broker.store import postgres_schema as sql
from broker.store.sql_shared import pack, unpack

_KEPT_COLUMNS = ("seq", "run_id", "target", "sender_id", "sender_name", "message_id", "message",
                 "attachments", "sent_at", "ack", "position", "not_in_known_set")


def sticky_row(row: dict[str, Any]) -> StickyRow:
    """An entry as read back (columns named as StickySaved's fields, and delivered_to)."""
    answered = row.pop("delivered_to")
    entry = StickySaved(**{**row, "attachments": unpack(row["attachments"])})
    return StickyRow(entry, [] if answered is None else unpack(answered))


class StickyBurst:
    """Consecutive entries of one batch: :meth:`add` each, :meth:`send` them into the
    pipeline, and once it is synced read each one's :meth:`outcome`."""

    def __init__(self) -> None:
        self.entries: list[StickySaved] = []
        self._results: list[StickyKept | None] | None = None

    def add(self, entry: StickySaved) -> int:
        self.entries.append(entry)
        return len(self.entries) - 1

    def send(self, conn: psycopg.Connection) -> None:
        entries = self.entries
        columns = {name: [getattr(e, name) for e in entries] for name in _KEPT_COLUMNS}
        columns["attachments"] = [pack(e.attachments) for e in entries]
        columns["ack"] = [bool(e.ack) for e in entries]
        columns["not_in_known_set"] = [bool(e.not_in_known_set) for e in entries]
        columns["owner"] = [e.owner for e in entries]
        columns["epoch"] = [e.epoch for e in entries]
        self._inserted = conn.cursor()
        self._inserted.execute(sql.INSERT_STICKY_MANY, columns)
        self._kept = conn.cursor()
        self._kept.execute(sql.KEPT_STICKY_MANY, columns)
        self._fenced = None
        if any(columns["epoch"]):
            self._fenced = conn.cursor()
            self._fenced.execute(sql.FENCED_STICKY_MANY, columns)

    def outcome(self, index: int) -> StickyKept | bool | None:
        """Entry ``index``'s outcome: None when written, False when fenced out, else the
        StickyKept standing for it. Raises ValueError when its seq is stored already."""
        if self._results is None:
            self._results = self._read()
        if isinstance(self._results[index], Exception):
            raise self._results[index]
        return self._results[index]

    def _read(self) -> list:
        inserted = {seq for (seq,) in self._inserted.fetchall()}
        kept: dict[int, tuple[bool, dict]] = {}
        names = [column.name for column in self._kept.description]
        for values in self._kept.fetchall():
            row = dict(zip(names, values))
            kept[row.pop("ord") - 1] = (row.pop("seq_taken"), row)
        fenced = set() if self._fenced is None else \
            {ord_ - 1 for (ord_,) in self._fenced.fetchall()}
        results: list = []
        first_of_seq: set[int] = set()
        for index, entry in enumerate(self.entries):
            if entry.seq in inserted and entry.seq not in first_of_seq:
                first_of_seq.add(entry.seq)       # written (a later copy of it was not)
                results.append(None)
            elif index in kept and not kept[index][0]:
                results.append(StickyKept(entry, sticky_row(dict(kept[index][1]))))
            elif index in fenced:
                results.append(False)
            else:
                results.append(ValueError(f"sticky entry {entry.seq} is already stored"))
        return results
