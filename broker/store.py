"""The SQLite store (apsw, WAL): every table the broker keeps, behind one class.

Writes arrive as ops, tuples whose first item names the operation; :meth:`Store.apply`
runs a whole batch of them in one transaction (group commit), so one fsync covers
every op in the batch. Reads happen at startup, before the persistence worker takes
the connection over.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import apsw

SCHEMA_VERSION = 1

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS brokers (
    broker_id TEXT PRIMARY KEY,
    pid INTEGER NOT NULL,
    endpoint TEXT NOT NULL,
    started_at REAL NOT NULL,
    lease_until REAL NOT NULL
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
        }

    def register(self, name: str, op: Callable[..., Any]) -> None:
        self._ops[name] = op

    def apply(self, ops: list[tuple]) -> None:
        """Apply ``ops`` in one transaction: all of them become durable, or none."""
        with self.conn:
            for op in ops:
                self._ops[op[0]](*op[1:])

    def close(self) -> None:
        self.conn.close()

    # -- reads ---------------------------------------------------------------------

    def identities(self) -> list[tuple[str, str | None, str]]:
        return list(self.conn.execute(
            "SELECT session_id, atomic_session_id, token_hash FROM session_identity"))

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

    def _release(self, broker_id: str) -> None:
        self.conn.execute("DELETE FROM brokers WHERE broker_id = ?", (broker_id,))
