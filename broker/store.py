"""The SQLite store (apsw, WAL): every table the broker keeps, behind :class:`SqliteStore`.

It implements :class:`broker.core.kernel.records.Store` with the semantics of the reference
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
  :data:`sql.MIGRATIONS`; a newer one is refused (:class:`SchemaError`);
* a file that cannot be used at start (locked, read-only, corrupt, truncated, newer)
  is refused by :func:`open_store` with one :class:`StoreOpenError` line that names
  the file and what to do, within about :data:`sql.BUSY_TIMEOUT_MS`; a write that fails
  while serving is classified by :func:`failure_code`, so its waiter learns whether
  the store is unavailable (retry later) or refused the record (a bug).

One thread uses a store at a time: the shell reads the snapshot at start, then the
persistence worker owns the connection until it closes it.
"""

from __future__ import annotations

import dataclasses
import json
import os
import secrets
import time
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import apsw
import msgpack

from broker.core.kernel.records import (RECORD_TYPES, ConversationDeleted, ConversationSaved, IdentitySaved,
                           InvocationSaved, InvocationState, LeaseReleased, LeaseRenewed, Record,
                           RecoveryDeleted, RecoverySaved, RunEnded, RunSaved, SessionClaimed,
                           SessionReleased, Snapshot, StickyAnswered, StickyDelivery, StickyDropped,
                           StickyKept, StickyRow, StickySaved)
from . import store_sql as sql
from .memory_store import FINISHED_KEEP_S, IDENTITY_KEEP_S, IDENTITY_LIMIT, apply_each, named_ids

# The statements are in broker.store_sql; these names are the store's public ones.
SCHEMA_VERSION = sql.SCHEMA_VERSION
SYNCHRONOUS_MODES = sql.SYNCHRONOUS_MODES
BUSY_TIMEOUT_MS = sql.BUSY_TIMEOUT_MS

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


def open_store(path: str | Path, synchronous: str = "FULL", owner: str | None = None,
               endpoint: str = "") -> tuple["SqliteStore", Snapshot]:
    """Open the file at ``path`` and read everything it keeps: the store and its snapshot.

    ``owner``: the starting broker's id, which takes the runs no live broker owns (see
    :meth:`SqliteStore.load`); a lease row of its predecessor on ``endpoint`` whose
    process is gone does not count as live.

    Raises StoreOpenError (one line, see :func:`_open_problem`) for a file that is
    locked, read-only, corrupt, truncated or from a newer broker; the file is closed
    again then. ValueError for an unknown ``synchronous`` mode (a caller's bug)."""
    try:
        store = SqliteStore(path, synchronous)
    except (apsw.Error, SchemaError) as exc:
        raise StoreOpenError(_open_problem(str(path), exc)) from None
    try:
        if owner is None:
            return store, store.load()
        gone = [row.broker_id for row in store.brokers(time.time())
                if row.endpoint == endpoint and not _process_alive(row.pid)]
        return store, store.load(owner, gone)
    except (apsw.Error, msgpack.UnpackException, ValueError, TypeError) as exc:
        store.close()
        raise StoreOpenError(_open_problem(str(path), exc)) from None


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:          # another user's process: alive
        return True
    return True


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
        if synchronous.upper() not in sql.SYNCHRONOUS_MODES:
            raise ValueError(f"synchronous must be one of {', '.join(sql.SYNCHRONOUS_MODES)}")
        self.path = str(path)
        self.identity_limit = identity_limit
        self.conn = apsw.Connection(self.path)
        try:
            self.conn.set_busy_timeout(sql.BUSY_TIMEOUT_MS)
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
                conn.execute(sql._SCHEMA)
            elif version > sql.SCHEMA_VERSION:
                raise SchemaError(f"{self.path} has schema version {version}; this broker "
                                  f"knows versions up to {sql.SCHEMA_VERSION}")
            else:
                for step in range(version, sql.SCHEMA_VERSION):
                    conn.execute(sql.MIGRATIONS[step])
            conn.execute("INSERT INTO meta (key, value) VALUES ('schema_version', :v) "
                         "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                         {"v": str(sql.SCHEMA_VERSION)})
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    def _schema_version(self) -> int | None:
        """The file's version, None for a file with no tables yet."""
        if not list(_rows(self.conn, sql._META_TABLE)):
            return None
        row = next(_rows(self.conn, "SELECT value FROM meta WHERE key = 'schema_version'"), None)
        return None if row is None else int(row["value"])

    # -- the Store interface -------------------------------------------------------------

    def apply(self, records: Sequence[Record]) -> list[Record]:
        """Apply ``records`` in order in one transaction: all become durable, or none;
        returns the records not written: refused claims and job starts (see
        :class:`~broker.core.kernel.records.SessionClaimed` and
        :class:`~broker.core.kernel.records.InvocationState`) and entries whose request is
        stored already (:class:`~broker.core.kernel.records.StickyKept`).

        Raises TypeError for a value that is not a record or a payload msgpack cannot
        encode, apsw.ConstraintError for a sticky seq already stored, other apsw errors
        (disk full, busy past the timeout) as SQLite reports them."""
        with self.conn:
            return apply_each(records, self._writers)

    def load(self, owner: str | None = None, gone: Sequence[str] = ()) -> Snapshot:
        """The committed state, oldest first; forgets identities past the keep window.

        ``owner`` (a broker id) takes the runs no live broker owns (``gone``: brokers
        whose lease row is live but which are known dead) and loads only those; the
        others are named in ``owners``. Without ``owner``, every run."""
        conn = self.conn
        with conn:   # one transaction: a consistent picture while other brokers write
            if owner is None:
                run_ids = [row["run_id"] for row in
                           _rows(conn, "SELECT run_id FROM runs UNION SELECT run_id FROM sticky")]
                owners = {}
            else:
                run_ids = [row["run_id"] for row in _rows(conn, sql._TAKE_RUNS, {
                    "owner": owner, "now": time.time(), "gone": json.dumps(list(gone))})]
                owners = {row["run_id"]: row["owner"]
                          for row in _rows(conn, sql._RUN_OWNERS, {"owner": owner})}
            runs, sticky, deliveries = self._runs(run_ids, everything=owner is None)
            conversations = [ConversationSaved(**{**row, "remote": bool(row["remote"])})
                             for row in _rows(conn, sql._SELECT_CONVERSATIONS)]
            conn.execute(sql._PRUNE_IDENTITIES, {"cutoff": time.time() - IDENTITY_KEEP_S})
            identities = [IdentitySaved(**row) for row in _rows(conn, sql._SELECT_IDENTITIES, {
                "limit": max(self.identity_limit, 0),
                "named": json.dumps(named_ids(runs, sticky, conversations))})]
            conn.execute(sql._PRUNE_INVOCATIONS, {"cutoff": time.time() - FINISHED_KEEP_S})
            invocations = [InvocationSaved(**row) for row in _rows(conn, sql._SELECT_INVOCATIONS, {
                "owner": owner, "now": time.time(), "gone": json.dumps(list(gone))})]
            recoveries = [RecoverySaved(**{**row, "drafts": _unpack(row["drafts"])})
                          for row in _rows(conn, sql._SELECT_RECOVERIES)]
            conn.execute("INSERT OR IGNORE INTO meta (key, value) VALUES ('grant_key', :v)",
                         {"v": secrets.token_hex(32)})
            (key,) = (row["value"] for row in _rows(conn, "SELECT value FROM meta WHERE key = 'grant_key'"))
        return Snapshot(identities=identities, runs=runs, sticky=sticky, deliveries=deliveries,
                        conversations=conversations, invocations=invocations,
                        recoveries=recoveries, grant_key=bytes.fromhex(key), owners=owners)

    def adopt_runs(self, dead: str, owner: str) -> Snapshot:
        """The runs of broker ``dead`` become ``owner``'s: each to exactly one adopter
        store-wide. Returns them (runs, sticky entries, delivery states)."""
        with self.conn:
            run_ids = [row["run_id"] for row in
                       _rows(self.conn, sql._ADOPT_RUNS, {"dead": dead, "owner": owner})]
            runs, sticky, deliveries = self._runs(run_ids)
        return Snapshot(runs=runs, sticky=sticky, deliveries=deliveries)

    def _runs(self, run_ids: list[str], everything: bool = False) -> tuple[list, list, list]:
        """The runs ``run_ids``, their sticky entries and delivery states
        (``everything``: every delivery state, even one whose entry is gone)."""
        param = {"runs": json.dumps(run_ids)}
        conn = self.conn
        runs = [RunSaved(row["run_id"], _unpack(row["record"]), row["owner"])
                for row in _rows(conn, sql._SELECT_RUNS, param)] if run_ids else []
        sticky = [_sticky_row(row) for row in _rows(conn, sql._SELECT_STICKY, param)] if run_ids else []
        deliveries = [StickyDelivery(**row) for row in _rows(
            conn, sql._SELECT_ALL_DELIVERIES if everything else sql._SELECT_DELIVERIES, param)]
        return runs, sticky, deliveries

    def queued_jobs(self, agent: str, channel: str) -> list[InvocationSaved]:
        return [InvocationSaved(**row) for row in
                _rows(self.conn, sql._SELECT_QUEUED_JOBS, {"agent": agent, "channel": channel})]

    def live_brokers(self, now: float, exclude: str | None = None) -> int:
        (row,) = _rows(self.conn, sql._COUNT_LIVE, {"now": now, "exclude": exclude})
        return row["live"]

    def brokers(self, now: float, exclude: str | None = None) -> list[LeaseRenewed]:
        return [LeaseRenewed(**row) for row in
                _rows(self.conn, sql._SELECT_LIVE, {"now": now, "exclude": exclude})]

    def close(self) -> None:
        self.conn.close()

    # -- writers -------------------------------------------------------------------------

    def _identity(self, record: IdentitySaved) -> None:
        self.conn.execute(sql._UPSERT_IDENTITY, _params(record))

    def _lease(self, record: LeaseRenewed) -> None:
        self.conn.execute(sql._UPSERT_LEASE, _params(record))
        self.conn.execute(sql._FORGET_CLAIMS)

    def _claim(self, record: SessionClaimed) -> bool:
        if record.token_hash is not None and not any(_rows(self.conn, sql._IDENTITY_HAS, {
                "session_id": record.session_id, "token_hash": record.token_hash})):
            return False
        self.conn.execute(sql._CLAIM, _params(record, gone=json.dumps(record.gone)))
        (row,) = _rows(self.conn, sql._CLAIM_HOLDER, {"session_id": record.session_id})
        return row["broker_id"] == record.broker_id

    def _unclaim(self, record: SessionReleased) -> None:
        self.conn.execute(sql._UNCLAIM, _params(record))

    def claims(self) -> dict[str, str]:
        """Who holds each claimed id (for tests)."""
        return {row["session_id"]: row["broker_id"]
                for row in _rows(self.conn, "SELECT session_id, broker_id FROM session_claims")}

    def _release(self, record: LeaseReleased) -> None:
        self.conn.execute(sql._DELETE_LEASE, _params(record))

    def _run(self, record: RunSaved) -> None:
        self.conn.execute(sql._UPSERT_RUN, _params(record, record=_pack(record.record)))

    def _run_end(self, record: RunEnded) -> None:
        self.conn.execute(sql._DELETE_RUN, _params(record))

    def _sticky(self, record: StickySaved) -> StickyKept | None:
        conn = self.conn
        conn.execute(sql._INSERT_STICKY, _params(record, attachments=_pack(record.attachments)))
        if conn.changes():
            return None
        # The same request is an entry already (the insert did nothing): that one answers.
        (row,) = _rows(conn, sql._SELECT_STICKY_REQUEST,
                       {"sender_id": record.sender_id, "message_id": record.message_id})
        # The request's conflict is looked at first: a seq stored too must still fail.
        if next(_rows(conn, sql._STICKY_SEQ_TAKEN, {"seq": record.seq}), None) is not None:
            raise apsw.ConstraintError(f"sticky entry {record.seq} is already stored")
        return StickyKept(record, _sticky_row(row))

    def _answered(self, record: StickyAnswered) -> None:
        self.conn.execute(sql._ANSWER_STICKY, _params(record, delivered_to=_pack(record.delivered_to)))

    def _delivery(self, record: StickyDelivery) -> None:
        self.conn.execute(sql._UPSERT_DELIVERY, _params(record))

    def _drop(self, record: StickyDropped) -> None:
        self.conn.execute(sql._DELETE_STICKY, _params(record))

    def _conversation(self, record: ConversationSaved) -> None:
        self.conn.execute(sql._UPSERT_CONVERSATION, _params(record))

    def _conversation_deleted(self, record: ConversationDeleted) -> None:
        self.conn.execute(sql._DELETE_CONVERSATION, _params(record))

    def _invocation(self, record: InvocationSaved) -> None:
        self.conn.execute(sql._INSERT_INVOCATION, _params(record))

    def _invocation_state(self, record: InvocationState) -> bool | None:
        if record.state != "started":
            self.conn.execute(sql._INVOCATION_STATE, _params(record))
            return None
        self.conn.execute(sql._START_INVOCATION, _params(record))
        return self.conn.changes() == 1        # False: refused, not queued any more

    def _recovery(self, record: RecoverySaved) -> None:
        self.conn.execute(sql._UPSERT_RECOVERY, _params(record, drafts=_pack(record.drafts)))

    def _recovery_deleted(self, record: RecoveryDeleted) -> None:
        self.conn.execute(sql._DELETE_RECOVERY, _params(record))


Store = SqliteStore   # the name older imports use
