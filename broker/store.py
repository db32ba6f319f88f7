"""The SQLite store (apsw, WAL): every table the broker keeps, behind one class.

Writes arrive as ops, tuples whose first item names the operation; :meth:`Store.apply`
runs a whole batch of them in one transaction (group commit), so one fsync covers
every op in the batch. Reads happen at startup, before the persistence worker takes
the connection over.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import time

import apsw
import msgpack

SCHEMA_VERSION = 1
IDENTITY_KEEP_S = 30 * 24 * 3600   # who held an id is remembered for 30 days

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS brokers (
    broker_id TEXT PRIMARY KEY,
    pid INTEGER NOT NULL,
    endpoint TEXT NOT NULL,
    started_at REAL NOT NULL,
    lease_until REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS runs (
    run_id TEXT PRIMARY KEY,
    record BLOB NOT NULL               -- msgpack of the run tree (broker.core.runs)
);
CREATE TABLE IF NOT EXISTS sticky (
    seq INTEGER PRIMARY KEY,
    run_id TEXT NOT NULL,
    target TEXT NOT NULL,
    sender_id TEXT NOT NULL,
    sender_name TEXT NOT NULL,
    message_id TEXT NOT NULL,
    message TEXT NOT NULL,
    attachments BLOB NOT NULL,
    sent_at REAL NOT NULL,
    ack INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS sticky_run ON sticky (run_id);
CREATE TABLE IF NOT EXISTS sticky_delivery (
    seq INTEGER NOT NULL,
    stage TEXT NOT NULL,
    transcript TEXT NOT NULL,
    state TEXT NOT NULL,
    at REAL NOT NULL,
    PRIMARY KEY (seq, stage, transcript)
);
CREATE TABLE IF NOT EXISTS session_identity (
    session_id TEXT PRIMARY KEY,
    atomic_session_id TEXT,
    token_hash TEXT NOT NULL,
    name TEXT NOT NULL,
    updated_at REAL NOT NULL
);
"""


class Store:
    """One apsw connection and the ops it understands."""

    def __init__(self, path: str | Path, synchronous: str = "FULL") -> None:
        self.path = str(path)
        self.conn = apsw.Connection(self.path)
        self.conn.setbusytimeout(5000)
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute(f"PRAGMA synchronous={synchronous}")
        with self.conn:
            self.conn.execute(_SCHEMA)
            self.conn.execute("INSERT OR IGNORE INTO meta VALUES ('schema_version', ?)",
                              (str(SCHEMA_VERSION),))
        self._ops: dict[str, Callable[..., Any]] = {
            "identity": self._identity,
            "lease": self._lease,
            "release": self._release,
            "run": self._run,
            "run_end": self._run_end,
            "sticky": self._sticky,
            "sticky_delivery": self._sticky_delivery,
            "sticky_drop": self._sticky_drop,
        }

    def apply(self, ops: list[tuple]) -> None:
        """Apply ``ops`` in one transaction: all of them become durable, or none."""
        with self.conn:
            for op in ops:
                self._ops[op[0]](*op[1:])

    def close(self) -> None:
        self.conn.close()

    # -- reads ---------------------------------------------------------------------

    def identities(self, keep_s: float = IDENTITY_KEEP_S, limit: int = 200_000) -> list[tuple[str, str | None, str]]:
        """Recent identity records, oldest first; records older than ``keep_s`` are deleted."""
        with self.conn:
            self.conn.execute("DELETE FROM session_identity WHERE updated_at < ?",
                              (time.time() - keep_s,))
        rows = list(self.conn.execute(
            "SELECT session_id, atomic_session_id, token_hash FROM session_identity "
            "ORDER BY updated_at DESC LIMIT ?", (limit,)))
        return rows[::-1]

    def runs(self) -> list[dict]:
        return [msgpack.unpackb(blob, raw=False) for (blob,) in
                self.conn.execute("SELECT record FROM runs ORDER BY rowid")]

    def sticky_entries(self) -> list[tuple]:
        return [(*row[:7], msgpack.unpackb(row[7], raw=False), *row[8:]) for row in self.conn.execute(
            "SELECT seq, run_id, target, sender_id, sender_name, message_id, message, "
            "attachments, sent_at, ack FROM sticky ORDER BY seq")]

    def sticky_deliveries(self) -> list[tuple]:
        return list(self.conn.execute("SELECT seq, stage, transcript, state FROM sticky_delivery"))

    def live_brokers(self, now: float, exclude: str | None = None) -> int:
        (count,), = self.conn.execute(
            "SELECT count(*) FROM brokers WHERE lease_until > ? AND broker_id IS NOT ?",
            (now, exclude))
        return count

    # -- ops -----------------------------------------------------------------------

    def _identity(self, session_id: str, atomic: str | None, token_hash: str, name: str,
                  now: float) -> None:
        self.conn.execute(
            "INSERT INTO session_identity VALUES (?, ?, ?, ?, ?) ON CONFLICT(session_id) DO "
            "UPDATE SET atomic_session_id=excluded.atomic_session_id, "
            "token_hash=excluded.token_hash, name=excluded.name, updated_at=excluded.updated_at",
            (session_id, atomic, token_hash, name, now))

    def _lease(self, broker_id: str, pid: int, endpoint: str, now: float, until: float) -> None:
        self.conn.execute(
            "INSERT INTO brokers VALUES (?, ?, ?, ?, ?) ON CONFLICT(broker_id) DO "
            "UPDATE SET lease_until=excluded.lease_until", (broker_id, pid, endpoint, now, until))

    def _run(self, run_id: str, record: dict) -> None:
        self.conn.execute("INSERT INTO runs VALUES (?, ?) ON CONFLICT(run_id) DO UPDATE SET "
                          "record=excluded.record", (run_id, msgpack.packb(record, use_bin_type=True)))

    def _run_end(self, run_id: str) -> None:
        self.conn.execute("DELETE FROM sticky_delivery WHERE seq IN (SELECT seq FROM sticky WHERE run_id = ?)",
                          (run_id,))
        self.conn.execute("DELETE FROM sticky WHERE run_id = ?", (run_id,))
        self.conn.execute("DELETE FROM runs WHERE run_id = ?", (run_id,))

    def _sticky(self, seq: int, run_id: str, target: str, sender_id: str, sender_name: str,
                message_id: str, message: str, attachments: list, sent_at: float, ack: bool) -> None:
        self.conn.execute("INSERT INTO sticky VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                          (seq, run_id, target, sender_id, sender_name, message_id, message,
                           msgpack.packb(attachments, use_bin_type=True), sent_at, int(ack)))

    def _sticky_delivery(self, seq: int, stage: str, transcript: str, state: str, at: float) -> None:
        self.conn.execute("INSERT INTO sticky_delivery VALUES (?, ?, ?, ?, ?) ON CONFLICT DO UPDATE "
                          "SET state=excluded.state, at=excluded.at", (seq, stage, transcript, state, at))

    def _sticky_drop(self, seq: int) -> None:
        self.conn.execute("DELETE FROM sticky_delivery WHERE seq = ?", (seq,))
        self.conn.execute("DELETE FROM sticky WHERE seq = ?", (seq,))

    def _release(self, broker_id: str) -> None:
        self.conn.execute("DELETE FROM brokers WHERE broker_id = ?", (broker_id,))
