"""The SQLite store (apsw, WAL): every table the broker keeps, behind :class:`SqliteStore`.

It implements :class:`broker.core.records.Store` with the semantics of the reference
:class:`broker.memory_store.MemoryStore` (the contract tests hold the two together).

Invariants:

* :meth:`SqliteStore.apply` runs a whole batch of typed records in one transaction
  (group commit): one fsync covers the batch, and a failing record rolls all of it
  back. Each record type has one writer, looked up in one table; SQL parameters are
  bound by field name, never by position;
* rows are read by column name only (:func:`_rows` yields every row as a dict), so a
  column order is nobody's contract; columns carry the record field names, and the
  two that predate the records are renamed in the query (``updated_at AS at``);
* payloads (run records, attachments, answered-to lists) are msgpack blobs;
* the schema is versioned in ``meta``: a new file gets :data:`SCHEMA_VERSION`, an
  older one is migrated in place, in one transaction, by the steps in
  :data:`_MIGRATIONS`; a newer one is refused (:class:`SchemaError`);
* a file that cannot be used at start (locked, read-only, corrupt, truncated, newer)
  is refused by :func:`open_store` with one :class:`StoreOpenError` line that names
  the file and what to do, within about :data:`BUSY_TIMEOUT_MS`; a write that fails
  while serving is classified by :func:`failure_code`, so its waiter learns whether
  the store is unavailable (retry later) or refused the record (a bug).

One thread uses a store at a time: the shell reads the snapshot at start, then the
persistence worker owns the connection until it closes it.
"""

from __future__ import annotations

import dataclasses
import json
import secrets
import time
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import apsw
import msgpack

from .core.records import (RECORD_TYPES, ConversationDeleted, ConversationSaved, IdentitySaved,
                           InvocationSaved, InvocationState, LeaseReleased, LeaseRenewed, Record,
                           RecoveryDeleted, RecoverySaved, RunEnded, RunSaved, SessionClaimed,
                           SessionReleased, Snapshot, StickyAnswered, StickyDelivery, StickyDropped,
                           StickyRow, StickySaved)
from .memory_store import FINISHED_KEEP_S, IDENTITY_KEEP_S, IDENTITY_LIMIT, writer_for

SCHEMA_VERSION = 4
SYNCHRONOUS_MODES = ("OFF", "NORMAL", "FULL", "EXTRA")
# How long a statement waits for another process's transaction on the file. Another
# broker on the same file commits in milliseconds; anything longer is a lock held by
# someone else, and a sender waiting on it is better told so at once.
BUSY_TIMEOUT_MS = 1000

# respond/invoke (version 3). response_recovery holds agents' exact undelivered output:
# sensitive, never read back through a session (see the README).
_AGENT_TABLES = """
CREATE TABLE IF NOT EXISTS conversations (
    agent TEXT NOT NULL,
    channel TEXT NOT NULL,
    remote INTEGER NOT NULL,
    last_active_at REAL,
    session_id TEXT,
    PRIMARY KEY (agent, channel)
);
CREATE TABLE IF NOT EXISTS invocations (
    id TEXT PRIMARY KEY,
    agent TEXT NOT NULL,
    channel TEXT NOT NULL,
    from_channel TEXT NOT NULL,
    reason TEXT NOT NULL,
    created_at REAL NOT NULL,
    request TEXT NOT NULL,
    state TEXT NOT NULL,               -- queued, started, done, failed
    updated_at REAL NOT NULL,
    error TEXT
);
CREATE INDEX IF NOT EXISTS invocations_destination ON invocations (agent, channel, state);
CREATE TABLE IF NOT EXISTS response_recovery (
    agent TEXT NOT NULL,
    channel TEXT NOT NULL,
    turn TEXT NOT NULL,
    drafts BLOB NOT NULL,              -- msgpack [{id, text, completion, outcome}]
    outcome TEXT NOT NULL,             -- pending, recovered, failed
    updated_at REAL NOT NULL,
    PRIMARY KEY (agent, channel)
);
"""

_CLAIMS_TABLE = """
CREATE TABLE IF NOT EXISTS session_claims (
    session_id TEXT PRIMARY KEY,       -- held by one live broker at most (SessionClaimed)
    broker_id TEXT NOT NULL,
    at REAL NOT NULL
);
"""

_SCHEMA = _AGENT_TABLES + _CLAIMS_TABLE + """
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
    attachments BLOB NOT NULL,         -- msgpack list
    sent_at REAL NOT NULL,
    ack INTEGER NOT NULL,
    position INTEGER,                  -- FIFO position when queued (1-based)
    not_in_known_set INTEGER NOT NULL DEFAULT 0,
    delivered_to BLOB                  -- msgpack list of stage names; NULL: none recorded
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

# Step from the keyed version to the next one. Version 1 kept no position, known-set
# flag or answer; an old entry's position is its rank among the entries still queued
# for the same (run, target), which is what the version-1 broker reported.
_MIGRATIONS: dict[int, str] = {
    1: """
ALTER TABLE sticky ADD COLUMN position INTEGER;
ALTER TABLE sticky ADD COLUMN not_in_known_set INTEGER NOT NULL DEFAULT 0;
ALTER TABLE sticky ADD COLUMN delivered_to BLOB;
UPDATE sticky SET position = ranked.rank FROM (
    SELECT seq, row_number() OVER (PARTITION BY run_id, target ORDER BY seq) AS rank
    FROM sticky) AS ranked
WHERE sticky.seq = ranked.seq;
""",
    # Both v3s (agents' tables; session claims) existed on branches: each step makes
    # both, idempotently, so either upgrades to v4.
    2: _AGENT_TABLES + _CLAIMS_TABLE,
    3: _AGENT_TABLES + _CLAIMS_TABLE,
}
assert set(_MIGRATIONS) == set(range(1, SCHEMA_VERSION)), "one migration step per old version"

# -- writes, one per record type; parameters named after the record's fields -----------

_UPSERT_IDENTITY = """
INSERT INTO session_identity (session_id, atomic_session_id, token_hash, name, updated_at)
VALUES (:session_id, :atomic_session_id, :token_hash, :name, :at)
ON CONFLICT (session_id) DO UPDATE SET atomic_session_id = excluded.atomic_session_id,
    token_hash = excluded.token_hash, name = excluded.name, updated_at = excluded.updated_at
"""
_UPSERT_LEASE = """
DELETE FROM brokers WHERE endpoint = :endpoint AND broker_id != :broker_id;
INSERT INTO brokers (broker_id, pid, endpoint, started_at, lease_until)
VALUES (:broker_id, :pid, :endpoint, :started_at, :until)
ON CONFLICT (broker_id) DO UPDATE SET lease_until = excluded.lease_until
"""
_DELETE_LEASE = "DELETE FROM brokers WHERE broker_id = :broker_id"
_FORGET_CLAIMS = """
DELETE FROM session_claims WHERE broker_id NOT IN (SELECT broker_id FROM brokers)
"""
# One statement, so the check and the write are one step under the write lock.
_CLAIM = """
INSERT INTO session_claims (session_id, broker_id, at) VALUES (:session_id, :broker_id, :at)
ON CONFLICT (session_id) DO UPDATE SET broker_id = excluded.broker_id, at = excluded.at
WHERE session_claims.broker_id = excluded.broker_id
   OR session_claims.broker_id NOT IN (SELECT broker_id FROM brokers WHERE lease_until > :at)
   OR session_claims.broker_id IN (SELECT value FROM json_each(:gone))
"""
_CLAIM_HOLDER = "SELECT broker_id FROM session_claims WHERE session_id = :session_id"
_UNCLAIM = "DELETE FROM session_claims WHERE session_id = :session_id AND broker_id = :broker_id"
_UPSERT_RUN = """
INSERT INTO runs (run_id, record) VALUES (:run_id, :record)
ON CONFLICT (run_id) DO UPDATE SET record = excluded.record
"""
_DELETE_RUN = """
DELETE FROM sticky_delivery WHERE seq IN (SELECT seq FROM sticky WHERE run_id = :run_id);
DELETE FROM sticky WHERE run_id = :run_id;
DELETE FROM runs WHERE run_id = :run_id;
"""
_INSERT_STICKY = """
INSERT INTO sticky (seq, run_id, target, sender_id, sender_name, message_id, message,
                    attachments, sent_at, ack, position, not_in_known_set)
VALUES (:seq, :run_id, :target, :sender_id, :sender_name, :message_id, :message,
        :attachments, :sent_at, :ack, :position, :not_in_known_set)
"""
_ANSWER_STICKY = "UPDATE sticky SET delivered_to = :delivered_to WHERE seq = :seq"
_UPSERT_DELIVERY = """
INSERT INTO sticky_delivery (seq, stage, transcript, state, at)
VALUES (:seq, :stage, :transcript, :state, :at)
ON CONFLICT (seq, stage, transcript) DO UPDATE SET state = excluded.state, at = excluded.at
"""
_DELETE_STICKY = """
DELETE FROM sticky_delivery WHERE seq = :seq;
DELETE FROM sticky WHERE seq = :seq;
"""

_UPSERT_CONVERSATION = """
INSERT INTO conversations (agent, channel, remote, last_active_at, session_id)
VALUES (:agent, :channel, :remote, :last_active_at, :session_id)
ON CONFLICT (agent, channel) DO UPDATE SET remote = excluded.remote,
    last_active_at = excluded.last_active_at, session_id = excluded.session_id
"""
_DELETE_CONVERSATION = """
DELETE FROM invocations WHERE agent = :agent AND channel = :channel AND state = 'queued';
DELETE FROM response_recovery WHERE agent = :agent AND channel = :channel;
DELETE FROM conversations WHERE agent = :agent AND channel = :channel;
"""
_INSERT_INVOCATION = """
INSERT INTO invocations (id, agent, channel, from_channel, reason, created_at, request, state,
                         updated_at)
VALUES (:id, :agent, :channel, :from_channel, :reason, :created_at, :request, :state, :created_at)
"""
_INVOCATION_STATE = """
UPDATE invocations SET state = :state, updated_at = :at, error = :error WHERE id = :id
"""
_UPSERT_RECOVERY = """
INSERT INTO response_recovery (agent, channel, turn, drafts, outcome, updated_at)
VALUES (:agent, :channel, :turn, :drafts, :outcome, :at)
ON CONFLICT (agent, channel) DO UPDATE SET turn = excluded.turn, drafts = excluded.drafts,
    outcome = excluded.outcome, updated_at = excluded.updated_at
"""
_DELETE_RECOVERY = "DELETE FROM response_recovery WHERE agent = :agent AND channel = :channel"

# -- reads, columns named as the record fields they fill --------------------------------

_META_TABLE = "SELECT name FROM sqlite_master WHERE type = 'table' AND name = 'meta'"
_PRUNE_IDENTITIES = "DELETE FROM session_identity WHERE updated_at < :cutoff"
_SELECT_IDENTITIES = """
SELECT session_id, atomic_session_id, token_hash, name, updated_at AS at
FROM session_identity ORDER BY updated_at DESC, session_id DESC LIMIT :limit
"""
_SELECT_RUNS = "SELECT run_id, record FROM runs ORDER BY rowid"
_SELECT_STICKY = """
SELECT seq, run_id, target, sender_id, sender_name, message_id, message, attachments,
       sent_at, ack, position, not_in_known_set, delivered_to
FROM sticky ORDER BY seq
"""
_SELECT_DELIVERIES = "SELECT seq, stage, transcript, state, at FROM sticky_delivery ORDER BY rowid"
_SELECT_CONVERSATIONS = """
SELECT agent, channel, remote, last_active_at, session_id FROM conversations ORDER BY rowid
"""
_PRUNE_INVOCATIONS = """
DELETE FROM invocations WHERE state NOT IN ('queued', 'started') AND updated_at < :cutoff
"""
_SELECT_INVOCATIONS = """
SELECT id, agent, channel, from_channel, reason, created_at, request, state FROM invocations
WHERE state IN ('queued', 'started') ORDER BY rowid
"""
_SELECT_RECOVERIES = """
SELECT agent, channel, turn, drafts, outcome, updated_at AS at FROM response_recovery ORDER BY rowid
"""
_SELECT_LIVE = """
SELECT broker_id, pid, endpoint, started_at, lease_until AS until FROM brokers
WHERE lease_until > :now AND broker_id IS NOT :exclude ORDER BY started_at, broker_id
"""
_COUNT_LIVE = """
SELECT count(*) AS live FROM brokers WHERE lease_until > :now AND broker_id IS NOT :exclude
"""

_FIELD_NAMES: dict[type, tuple[str, ...]] = {
    cls: tuple(f.name for f in dataclasses.fields(cls)) for cls in RECORD_TYPES.values()}


class SchemaError(Exception):
    """The file was written by a newer broker; the message says which versions."""


class StoreOpenError(Exception):
    """The file cannot be used at start; the message names it and says what to do."""


# Failures of the file rather than of the records written: retrying once the lock is
# gone, space is freed or the file is repaired may succeed.
_UNAVAILABLE = (apsw.BusyError, apsw.LockedError, apsw.ReadOnlyError, apsw.CantOpenError,
                apsw.FullError, apsw.IOError, apsw.CorruptError, apsw.NotADBError)


def failure_code(exc: BaseException) -> str:
    """The error code a write that raised ``exc`` answers its waiters with.

    ``store_unavailable`` when the file cannot take writes now (locked by another
    process, read-only, full, failing or damaged): nothing was kept and a later retry
    may succeed. ``internal_error`` for anything else (a record the store refuses,
    such as a sticky seq stored twice, is a broker bug)."""
    return "store_unavailable" if isinstance(exc, _UNAVAILABLE) else "internal_error"


def _open_problem(path: str, exc: BaseException) -> str:
    """One line for a person: what is wrong with the file at ``path`` and what to do."""
    other = "or start with another --db"
    if isinstance(exc, SchemaError):
        return f"{exc}; start a newer broker, {other}"
    if isinstance(exc, (apsw.BusyError, apsw.LockedError)):
        return (f"database {path} is locked by another process (a broker or a tool holding "
                f"a transaction on it); stop that process, {other}")
    if isinstance(exc, apsw.ReadOnlyError):
        return (f"database {path} is read-only (the file, its -wal/-shm files or its "
                f"directory); make them writable for this user, {other}")
    if isinstance(exc, apsw.CantOpenError):
        return (f"cannot open database {path}; check that it is a file in a directory this "
                f"user can write, {other}")
    if isinstance(exc, apsw.FullError):
        return f"the disk holding database {path} is full; free some space, {other}"
    if isinstance(exc, (apsw.CorruptError, apsw.NotADBError, msgpack.UnpackException,
                        ValueError, TypeError)):
        return (f"database {path} is corrupt or truncated ({exc}); move it aside to start "
                f"with an empty one, restore it from a backup, {other}")
    return f"cannot use database {path} ({exc!r}); {other}"


def open_store(path: str | Path, synchronous: str = "FULL") -> tuple["SqliteStore", Snapshot]:
    """Open the file at ``path`` and read everything it keeps: the store and its snapshot.

    Raises StoreOpenError (one line, see :func:`_open_problem`) for a file that is
    locked, read-only, corrupt, truncated or from a newer broker; the file is closed
    again then. ValueError for an unknown ``synchronous`` mode (a caller's bug)."""
    try:
        store = SqliteStore(path, synchronous)
    except (apsw.Error, SchemaError) as exc:
        raise StoreOpenError(_open_problem(str(path), exc)) from None
    try:
        return store, store.load()
    except (apsw.Error, msgpack.UnpackException, ValueError, TypeError) as exc:
        store.close()
        raise StoreOpenError(_open_problem(str(path), exc)) from None


def _pack(value: Any) -> bytes:
    return msgpack.packb(value, use_bin_type=True)


def _unpack(blob: bytes) -> Any:
    return msgpack.unpackb(blob, raw=False)


def _params(record: Record, /, **encoded: Any) -> dict[str, Any]:
    """The record's fields by name (attribute access: ``asdict`` would deep-copy every
    run tree), with ``encoded`` replacing the fields stored as blobs."""
    params = {name: getattr(record, name) for name in _FIELD_NAMES[type(record)]}
    params.update(encoded)
    return params


def _rows(conn: apsw.Connection, sql: str, params: dict[str, Any] | None = None
          ) -> Iterator[dict[str, Any]]:
    """The rows of one query as dicts keyed by column name.

    The names are read once per query: a row factory asking for them on every row
    costs more than the rest of the load."""
    cursor = conn.execute(sql, params)
    try:
        names = [name for name, _ in cursor.getdescription()]
    except apsw.ExecutionCompleteError:   # the query finished at once: no rows
        return
    for row in cursor:
        yield dict(zip(names, row))


def _sticky_row(row: dict[str, Any]) -> StickyRow:
    answered = row.pop("delivered_to")
    entry = StickySaved(**{**row, "attachments": _unpack(row["attachments"]),
                           "ack": bool(row["ack"]),
                           "not_in_known_set": bool(row["not_in_known_set"])})
    return StickyRow(entry, [] if answered is None else _unpack(answered))


class SqliteStore:
    """One apsw connection and a writer per record type."""

    def __init__(self, path: str | Path, synchronous: str = "FULL", *,
                 identity_limit: int = IDENTITY_LIMIT) -> None:
        """Open (creating or migrating) the file at ``path``.

        Raises ValueError for an unknown ``synchronous`` mode, SchemaError for a file
        from a newer broker, apsw errors for a file SQLite cannot use."""
        if synchronous.upper() not in SYNCHRONOUS_MODES:
            raise ValueError(f"synchronous must be one of {', '.join(SYNCHRONOUS_MODES)}")
        self.path = str(path)
        self.identity_limit = identity_limit
        self.conn = apsw.Connection(self.path)
        try:
            self.conn.set_busy_timeout(BUSY_TIMEOUT_MS)
            self.conn.execute("PRAGMA journal_mode=WAL")
            self.conn.execute(f"PRAGMA synchronous={synchronous.upper()}")
            self._prepare_schema()
        except BaseException:
            self.conn.close()
            raise
        self._writers: dict[type, Callable[[Any], None]] = {
            IdentitySaved: self._identity,
            LeaseRenewed: self._lease,
            LeaseReleased: self._release,
            SessionClaimed: self._claim,
            SessionReleased: self._unclaim,
            RunSaved: self._run,
            RunEnded: self._run_end,
            StickySaved: self._sticky,
            StickyAnswered: self._answered,
            StickyDelivery: self._delivery,
            StickyDropped: self._drop,
            ConversationSaved: self._conversation,
            ConversationDeleted: self._conversation_deleted,
            InvocationSaved: self._invocation,
            InvocationState: self._invocation_state,
            RecoverySaved: self._recovery,
            RecoveryDeleted: self._recovery_deleted,
        }

    def _prepare_schema(self) -> None:
        # IMMEDIATE: two brokers opening one file at once take turns instead of both
        # reading version 1 and both migrating.
        conn = self.conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            version = self._schema_version()
            if version is None:
                conn.execute(_SCHEMA)
            elif version > SCHEMA_VERSION:
                raise SchemaError(f"{self.path} has schema version {version}; this broker "
                                  f"knows versions up to {SCHEMA_VERSION}")
            else:
                for step in range(version, SCHEMA_VERSION):
                    conn.execute(_MIGRATIONS[step])
            conn.execute("INSERT INTO meta (key, value) VALUES ('schema_version', :v) "
                         "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                         {"v": str(SCHEMA_VERSION)})
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    def _schema_version(self) -> int | None:
        """The file's version, None for a file with no tables yet."""
        if not list(_rows(self.conn, _META_TABLE)):
            return None
        row = next(_rows(self.conn, "SELECT value FROM meta WHERE key = 'schema_version'"), None)
        return None if row is None else int(row["value"])

    # -- the Store interface -------------------------------------------------------------

    def apply(self, records: Sequence[Record]) -> list[SessionClaimed]:
        """Apply ``records`` in order in one transaction: all become durable, or none;
        returns the refused claims (see :class:`~broker.core.records.SessionClaimed`).

        Raises TypeError for a value that is not a record or a payload msgpack cannot
        encode, apsw.ConstraintError for a sticky seq already stored, other apsw errors
        (disk full, busy past the timeout) as SQLite reports them."""
        with self.conn:
            return [record for record in records
                    if writer_for(record, self._writers)(record) is False]

    def load(self) -> Snapshot:
        """The committed state, oldest first; forgets identities past the keep window."""
        conn = self.conn
        with conn:   # one transaction: a consistent picture while other brokers write
            conn.execute(_PRUNE_IDENTITIES, {"cutoff": time.time() - IDENTITY_KEEP_S})
            identities = [IdentitySaved(**row) for row in
                          _rows(conn, _SELECT_IDENTITIES, {"limit": max(self.identity_limit, 0)})]
            identities.reverse()
            runs = [RunSaved(row["run_id"], _unpack(row["record"]))
                    for row in _rows(conn, _SELECT_RUNS)]
            sticky = [_sticky_row(row) for row in _rows(conn, _SELECT_STICKY)]
            deliveries = [StickyDelivery(**row) for row in _rows(conn, _SELECT_DELIVERIES)]
            conversations = [ConversationSaved(**{**row, "remote": bool(row["remote"])})
                             for row in _rows(conn, _SELECT_CONVERSATIONS)]
            conn.execute(_PRUNE_INVOCATIONS, {"cutoff": time.time() - FINISHED_KEEP_S})
            invocations = [InvocationSaved(**row) for row in _rows(conn, _SELECT_INVOCATIONS)]
            recoveries = [RecoverySaved(**{**row, "drafts": _unpack(row["drafts"])})
                          for row in _rows(conn, _SELECT_RECOVERIES)]
            conn.execute("INSERT OR IGNORE INTO meta (key, value) VALUES ('grant_key', :v)",
                         {"v": secrets.token_hex(32)})
            (key,) = (row["value"] for row in _rows(conn, "SELECT value FROM meta WHERE key = 'grant_key'"))
        return Snapshot(identities=identities, runs=runs, sticky=sticky, deliveries=deliveries,
                        conversations=conversations, invocations=invocations,
                        recoveries=recoveries, grant_key=bytes.fromhex(key))

    def live_brokers(self, now: float, exclude: str | None = None) -> int:
        (row,) = _rows(self.conn, _COUNT_LIVE, {"now": now, "exclude": exclude})
        return row["live"]

    def brokers(self, now: float, exclude: str | None = None) -> list[LeaseRenewed]:
        return [LeaseRenewed(**row) for row in
                _rows(self.conn, _SELECT_LIVE, {"now": now, "exclude": exclude})]

    def close(self) -> None:
        self.conn.close()

    # -- writers -------------------------------------------------------------------------

    def _identity(self, record: IdentitySaved) -> None:
        self.conn.execute(_UPSERT_IDENTITY, _params(record))

    def _lease(self, record: LeaseRenewed) -> None:
        self.conn.execute(_UPSERT_LEASE, _params(record))
        self.conn.execute(_FORGET_CLAIMS)

    def _claim(self, record: SessionClaimed) -> bool:
        self.conn.execute(_CLAIM, _params(record, gone=json.dumps(record.gone)))
        (row,) = _rows(self.conn, _CLAIM_HOLDER, {"session_id": record.session_id})
        return row["broker_id"] == record.broker_id

    def _unclaim(self, record: SessionReleased) -> None:
        self.conn.execute(_UNCLAIM, _params(record))

    def claims(self) -> dict[str, str]:
        """Who holds each claimed id (for tests)."""
        return {row["session_id"]: row["broker_id"]
                for row in _rows(self.conn, "SELECT session_id, broker_id FROM session_claims")}

    def _release(self, record: LeaseReleased) -> None:
        self.conn.execute(_DELETE_LEASE, _params(record))

    def _run(self, record: RunSaved) -> None:
        self.conn.execute(_UPSERT_RUN, _params(record, record=_pack(record.record)))

    def _run_end(self, record: RunEnded) -> None:
        self.conn.execute(_DELETE_RUN, _params(record))

    def _sticky(self, record: StickySaved) -> None:
        self.conn.execute(_INSERT_STICKY, _params(record, attachments=_pack(record.attachments)))

    def _answered(self, record: StickyAnswered) -> None:
        self.conn.execute(_ANSWER_STICKY, _params(record, delivered_to=_pack(record.delivered_to)))

    def _delivery(self, record: StickyDelivery) -> None:
        self.conn.execute(_UPSERT_DELIVERY, _params(record))

    def _drop(self, record: StickyDropped) -> None:
        self.conn.execute(_DELETE_STICKY, _params(record))

    def _conversation(self, record: ConversationSaved) -> None:
        self.conn.execute(_UPSERT_CONVERSATION, _params(record))

    def _conversation_deleted(self, record: ConversationDeleted) -> None:
        self.conn.execute(_DELETE_CONVERSATION, _params(record))

    def _invocation(self, record: InvocationSaved) -> None:
        self.conn.execute(_INSERT_INVOCATION, _params(record))

    def _invocation_state(self, record: InvocationState) -> None:
        self.conn.execute(_INVOCATION_STATE, _params(record))

    def _recovery(self, record: RecoverySaved) -> None:
        self.conn.execute(_UPSERT_RECOVERY, _params(record, drafts=_pack(record.drafts)))

    def _recovery_deleted(self, record: RecoveryDeleted) -> None:
        self.conn.execute(_DELETE_RECOVERY, _params(record))


Store = SqliteStore   # the name older imports use
