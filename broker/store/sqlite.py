"""The SQLite store (apsw, WAL): every table the broker keeps, in one file.

:class:`SqliteStore` implements :class:`broker.store.Store` with the semantics of the
reference :class:`broker.store.memory.MemoryStore` (the contract tests hold them together).

Invariants:

* :meth:`SqliteStore.apply` runs a whole batch of typed records in one transaction
  (group commit): one fsync covers the batch, and a failing record rolls all of it
  back. Each record type has one writer (:data:`broker.store.RECORD_HANDLERS`); SQL
  parameters are bound by field name, never by position;
* rows are read by column name only (:func:`_rows` yields every row as a dict), so a
  column order is nobody's contract; columns carry the record field names, and the
  two that predate the records are renamed in the query (``updated_at AS at``);
* payloads (run records, attachments, answered-to lists) are msgpack blobs;
* the schema is versioned in ``meta``: a new file gets :data:`SCHEMA_VERSION`, an
  older one is migrated in place, in one transaction, by the steps in
  :data:`~broker.store.sqlite_schema.MIGRATIONS`; a newer one is refused (:class:`SchemaError`);
* a file that cannot be used at start (locked, read-only, corrupt, truncated, newer)
  is named by :func:`open_problem` in one line that says what to do, within about
  :data:`BUSY_TIMEOUT_MS`; a write that fails while serving is classified by
  :meth:`SqliteStore.failure_code`, so its waiter learns whether the store is
  unavailable (retry later) or refused the record (a bug).

One thread uses a store at a time: the shell reads the snapshot at start, then the
persistence worker owns the connection until it closes it.
"""

from __future__ import annotations

import json
import secrets
import time
from pathlib import Path
from typing import Any, Iterator, Sequence

import apsw
import msgpack

from broker.core.kernel.records import (ConversationDeleted, ConversationSaved, IdentitySaved,
                                        InvocationSaved, InvocationState, LeaseReleased,
                                        LeaseRenewed, Record, RecoveryDeleted, RecoverySaved,
                                        RunEnded, RunSaved, SessionClaimed, SessionReleased,
                                        Snapshot, StickyAnswered, StickyDelivery, StickyDropped,
                                        StickyKept, StickyRow, StickySaved, ClaimStale)
from broker.store import (FINISHED_KEEP_S, IDENTITY_KEEP_S, IDENTITY_LIMIT, UNAVAILABLE,
                          SchemaError, StoreOpenError, apply_each, named_ids, writers_of)
from broker.store import sqlite_schema as sql
from broker.store.sql_shared import (fields_by_name, pack as _pack, read_runs, stale_claim,
                                     unpack as _unpack)
from broker.store.sqlite_schema import BUSY_TIMEOUT_MS, SCHEMA_VERSION, SYNCHRONOUS_MODES

# Failures of the file rather than of the records written: retrying once the lock is
# gone, space is freed or the file is repaired may succeed.
_UNAVAILABLE = (apsw.BusyError, apsw.LockedError, apsw.ReadOnlyError, apsw.CantOpenError,
                apsw.FullError, apsw.IOError, apsw.CorruptError, apsw.NotADBError)
# What reading a file at start may raise for the file's sake (see open_problem).
LOAD_ERRORS = (apsw.Error, msgpack.UnpackException, ValueError, TypeError)


def open_problem(path: str, exc: BaseException) -> str:
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


def connect(path: str | Path, synchronous: str = "FULL") -> SqliteStore:
    """The store on the file at ``path``, created or migrated.

    Raises StoreOpenError (one line, see :func:`open_problem`) for a file that is
    locked, read-only, corrupt, truncated or from a newer broker. ValueError for an
    unknown ``synchronous`` mode (a caller's bug)."""
    try:
        return SqliteStore(path, synchronous)
    except (apsw.Error, SchemaError) as exc:
        raise StoreOpenError(open_problem(str(path), exc)) from None


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
        self._writers = writers_of(self)

    def _prepare_schema(self) -> None:
        # IMMEDIATE: two brokers opening one file at once take turns instead of both
        # reading version 1 and both migrating.
        conn = self.conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            version = self._schema_version()
            if version is None:
                conn.execute(sql.SCHEMA)
            elif version > SCHEMA_VERSION:
                raise SchemaError(f"{self.path} has schema version {version}; this broker "
                                  f"knows versions up to {SCHEMA_VERSION}")
            else:
                for step in range(version, SCHEMA_VERSION):
                    conn.execute(sql.MIGRATIONS[step])
            conn.execute("INSERT INTO meta (key, value) VALUES ('schema_version', :v) "
                         "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                         {"v": str(SCHEMA_VERSION)})
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    def _schema_version(self) -> int | None:
        """The file's version, None for a file with no tables yet."""
        if not list(_rows(self.conn, sql.META_TABLE)):
            return None
        row = next(_rows(self.conn, "SELECT value FROM meta WHERE key = 'schema_version'"), None)
        return None if row is None else int(row["value"])

    # -- the Store interface -------------------------------------------------------------

    def apply(self, records: Sequence[Record]) -> list[Record]:
        """Apply ``records`` in order in one transaction: all become durable, or none;
        returns the records not written: refused claims, run saves and job starts (see
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
                run_ids = [row["run_id"] for row in _rows(conn, sql.TAKE_RUNS, {
                    "owner": owner, "now": time.time(), "gone": json.dumps(list(gone))})]
                owners = {row["run_id"]: row["owner"]
                          for row in _rows(conn, sql.RUN_OWNERS, {"owner": owner})}
            runs, sticky, deliveries = self._runs(run_ids, everything=owner is None)
            conversations = [ConversationSaved(**{**row, "remote": bool(row["remote"])})
                             for row in _rows(conn, sql.SELECT_CONVERSATIONS)]
            conn.execute(sql.PRUNE_IDENTITIES, {"cutoff": time.time() - IDENTITY_KEEP_S})
            identities = [IdentitySaved(**row) for row in _rows(conn, sql.SELECT_IDENTITIES, {
                "limit": max(self.identity_limit, 0),
                "named": json.dumps(named_ids(runs, sticky, conversations))})]
            conn.execute(sql.PRUNE_INVOCATIONS, {"cutoff": time.time() - FINISHED_KEEP_S})
            invocations = [InvocationSaved(**row) for row in _rows(conn, sql.SELECT_INVOCATIONS, {
                "owner": owner, "now": time.time(), "gone": json.dumps(list(gone))})]
            recoveries = [RecoverySaved(**{**row, "drafts": _unpack(row["drafts"])})
                          for row in _rows(conn, sql.SELECT_RECOVERIES)]
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
            run_ids = [row["run_id"] for row in _rows(self.conn, sql.ADOPT_RUNS, {
                "dead": dead, "owner": owner, "now": time.time()})]
            runs, sticky, deliveries = self._runs(run_ids)
        return Snapshot(runs=runs, sticky=sticky, deliveries=deliveries)

    def _runs(self, run_ids: list[str], everything: bool = False) -> tuple[list, list, list]:
        """The runs ``run_ids``, their sticky entries and delivery states
        (``everything``: every delivery state, even one whose entry is gone)."""
        return read_runs(lambda statement, params: _rows(self.conn, statement, params), sql,
                         json.dumps(run_ids), bool(run_ids), everything, _sticky_row)

    def claims(self) -> dict[str, str]:
        """Who holds each claimed id (for tests and tools)."""
        return {row["session_id"]: row["broker_id"]
                for row in _rows(self.conn, "SELECT session_id, broker_id FROM session_claims")}

    def queued_jobs(self, agent: str, channel: str) -> list[InvocationSaved]:
        return [InvocationSaved(**row) for row in
                _rows(self.conn, sql.SELECT_QUEUED_JOBS, {"agent": agent, "channel": channel})]

    def live_brokers(self, now: float, exclude: str | None = None) -> int:
        (row,) = _rows(self.conn, sql.COUNT_LIVE, {"now": now, "exclude": exclude})
        return row["live"]

    def brokers(self, now: float, exclude: str | None = None) -> list[LeaseRenewed]:
        return [LeaseRenewed(**row) for row in
                _rows(self.conn, sql.SELECT_LIVE, {"now": now, "exclude": exclude})]

    def failure_code(self, exc: BaseException) -> str:
        """``store_unavailable`` when the file cannot take writes now (locked by another
        process, read-only, full, failing or damaged); ``internal_error`` for anything
        else (a record the store refuses, such as a sticky seq stored twice, is a bug)."""
        return UNAVAILABLE if isinstance(exc, _UNAVAILABLE) else "internal_error"

    def close(self) -> None:
        self.conn.close()

    # -- writers, one per record type (broker.store.RECORD_HANDLERS); each runs inside
    # the transaction of apply --------------------------------------------------------

    def save_identity(self, record: IdentitySaved) -> None:
        self.conn.execute(sql.UPSERT_IDENTITY, fields_by_name(record))

    def renew_lease(self, record: LeaseRenewed) -> None:
        # The store's clock is the host's, which every broker on the file shares.
        until = time.time() + record.lease_s if record.lease_s > 0 else record.until
        self.conn.execute(sql.UPSERT_LEASE, fields_by_name(record, until=until))
        self.conn.execute(sql.FORGET_CLAIMS)

    def claim_session(self, record: SessionClaimed) -> bool | ClaimStale:
        if record.token_hash is not None and not any(_rows(self.conn, sql.IDENTITY_HAS, {
                "session_id": record.session_id, "token_hash": record.token_hash})):
            return False
        self.conn.execute(sql.CLAIM, fields_by_name(record, gone=json.dumps(record.gone)))
        (row,) = _rows(self.conn, sql.CLAIM_HOLDER, {"session_id": record.session_id})
        if row["broker_id"] == record.broker_id:
            return True
        return ClaimStale(record) if stale_claim(record, row) else False

    def release_session(self, record: SessionReleased) -> None:
        self.conn.execute(sql.UNCLAIM, fields_by_name(record))

    def release_lease(self, record: LeaseReleased) -> None:
        self.conn.execute(sql.DELETE_LEASE, fields_by_name(record))

    def save_run(self, record: RunSaved) -> bool:
        self.conn.execute(sql.UPSERT_RUN, fields_by_name(record, record=_pack(record.record)))
        return self.conn.changes() == 1        # False: another broker owns the run, or a
                                               # later epoch of this one (fenced out)

    def end_run(self, record: RunEnded) -> None:
        self.conn.execute(sql.DELETE_RUN, fields_by_name(record))

    def save_sticky(self, record: StickySaved) -> StickyKept | bool | None:
        conn = self.conn
        params = fields_by_name(record, attachments=_pack(record.attachments))
        conn.execute(sql.INSERT_STICKY, params)
        if conn.changes():
            return None
        # The same request is an entry already (the insert did nothing): that one answers.
        found = list(_rows(conn, sql.SELECT_STICKY_REQUEST,
                           {"sender_id": record.sender_id, "message_id": record.message_id}))
        if not found:
            (fence,) = _rows(conn, sql.FENCE_HOLDS, params)
            if not fence["holds"]:
                return False           # refused: the run is no longer the writer's
        (row,) = found
        # The request's conflict is looked at first: a seq stored too must still fail.
        if next(_rows(conn, sql.STICKY_SEQ_TAKEN, {"seq": record.seq}), None) is not None:
            raise apsw.ConstraintError(f"sticky entry {record.seq} is already stored")
        return StickyKept(record, _sticky_row(row))

    def answer_sticky(self, record: StickyAnswered) -> None:
        self.conn.execute(sql.ANSWER_STICKY, fields_by_name(record, delivered_to=_pack(record.delivered_to)))

    def record_delivery(self, record: StickyDelivery) -> None:
        self.conn.execute(sql.UPSERT_DELIVERY, fields_by_name(record))

    def drop_sticky(self, record: StickyDropped) -> None:
        self.conn.execute(sql.DELETE_STICKY, fields_by_name(record))

    def save_conversation(self, record: ConversationSaved) -> None:
        self.conn.execute(sql.UPSERT_CONVERSATION, fields_by_name(record))

    def delete_conversation(self, record: ConversationDeleted) -> None:
        self.conn.execute(sql.DELETE_CONVERSATION, fields_by_name(record))

    def save_invocation(self, record: InvocationSaved) -> None:
        self.conn.execute(sql.INSERT_INVOCATION, fields_by_name(record))

    def set_invocation_state(self, record: InvocationState) -> bool | None:
        if record.state != "started":
            self.conn.execute(sql.INVOCATION_STATE, fields_by_name(record))
            return None
        self.conn.execute(sql.START_INVOCATION, fields_by_name(record))
        return self.conn.changes() == 1        # False: refused, not queued any more

    def save_recovery(self, record: RecoverySaved) -> None:
        self.conn.execute(sql.UPSERT_RECOVERY, fields_by_name(record, drafts=_pack(record.drafts)))

    def delete_recovery(self, record: RecoveryDeleted) -> None:
        self.conn.execute(sql.DELETE_RECOVERY, fields_by_name(record))


