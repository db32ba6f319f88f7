"""The PostgreSQL store (psycopg 3): the tables of one bus in one schema of a database
that brokers on several hosts share.

:class:`PostgresStore` implements :class:`broker.store.Store` with the semantics of
the reference :class:`broker.store.memory.MemoryStore` (the contract tests hold them
together).

Invariants:

* :meth:`PostgresStore.apply` is one transaction, sent in one pipeline: every
  statement of the batch goes out before any answer is read, so a batch costs two
  round trips (its statements, then the commit) whatever its size; the commit returns
  once the server made it durable (``synchronous_commit`` as the server has it), and
  only then does the worker report the batch kept;
* a compare-and-set (a session claim, a job start, an entry's request, a run
  adoption) is one conditional statement whose answer says whether it took: never a
  read in Python followed by a write;
* the schema is created or migrated by :meth:`PostgresStore.open`, in one
  transaction under an advisory lock, so brokers starting at once take turns; a
  newer schema is refused (:class:`SchemaError`);
* a connection lost while serving fails the batch (nothing of it is kept) with an
  error :meth:`PostgresStore.failure_code` calls unavailable; a new one is opened in
  the background, and until it is every use fails at once; every call but ``load``
  is cut past ``CALL_LIMIT_S`` (see :mod:`broker.store.postgres_connection`).
"""

from __future__ import annotations

import secrets
import time
from typing import Any, Callable, Sequence

import msgpack
import psycopg
from psycopg import sql as pgsql
from psycopg.rows import dict_row

from broker.core.kernel.records import (ConversationDeleted, ConversationSaved, IdentitySaved,
                                        InvocationSaved, InvocationState, LeaseReleased,
                                        LeaseRenewed, Record, RecoveryDeleted, RecoverySaved,
                                        RunEnded, RunSaved, SessionClaimed, SessionReleased,
                                        Snapshot, StickyAnswered, StickyDelivery, StickyDropped,
                                        StickyKept, StickySaved, ClaimStale)
from broker.store import (FINISHED_KEEP_S, IDENTITY_KEEP_S, IDENTITY_LIMIT, UNAVAILABLE,
                          SchemaError, StoreOpenError, named_ids, writers_of)
from broker.store import postgres_schema as sql
from broker.store.postgres_connection import (CALL_LIMIT_S, UNAVAILABLE_ERRORS, Connection,
                                              lock_key, open_connection)
from broker.store.postgres_problems import open_problem
from broker.store.postgres_sticky import StickyBurst, sticky_row
from broker.store.sql_shared import (fields_by_name, pack as _pack, read_runs, stale_claim,
                                     unpack as _unpack)
from broker.store.urls import split_url

SCHEMA_VERSION = sql.SCHEMA_VERSION
# What reading the database at start may raise for the database's sake (see open_problem).
LOAD_ERRORS = (psycopg.Error, msgpack.UnpackException, ValueError, TypeError)

Deferred = Callable[[], Any]     # a writer's outcome, read once the pipeline is synced
# The records whose writes are fenced by their run's owner and epoch (see sql.FENCE);
# RunSaved is its own fence (an upsert locks its row).
_FENCED = frozenset({RunEnded, StickySaved, StickyAnswered, StickyDelivery, StickyDropped})


def connect(url: str, schema: str | None = None) -> PostgresStore:
    """The store on the database ``url`` names, its schema created or migrated.

    Raises StoreOpenError (one line naming the URL, password masked, and what to do)."""
    try:
        return PostgresStore.open(url, schema)
    except (psycopg.Error, SchemaError, ValueError) as exc:
        raise StoreOpenError(open_problem(url, exc)) from None


class PostgresStore:
    """One connection (opened again after a loss) and a writer per record type."""

    def __init__(self, connection: Connection, *, identity_limit: int = IDENTITY_LIMIT) -> None:
        """Use ``connection``, whose schema is ready (see :meth:`open`)."""
        self.connection = connection
        self.identity_limit = identity_limit
        self._writers = writers_of(self)
        self._cursor: psycopg.Cursor | None = None     # the current batch's shared cursor
        self._committing = False                       # the current batch's COMMIT is sent
        self._burst: StickyBurst | None = None         # its entries not sent yet

    @classmethod
    def open(cls, url: str, schema: str | None = None, *,
             identity_limit: int = IDENTITY_LIMIT) -> PostgresStore:
        """Connect to ``url`` (``schema``: the bus's schema, else the URL's ``?schema=``
        or ``intercom``), creating or migrating the schema.

        Raises ValueError for a bad schema name, SchemaError for a schema from a newer
        broker, psycopg errors for a server that cannot be used."""
        url, schema = split_url(url, schema)
        conn = open_connection(url, schema)
        try:
            _prepare_schema(conn, schema)
        except BaseException:
            conn.close()
            raise
        return cls(Connection(url, schema, conn), identity_limit=identity_limit)

    # -- the Store interface -------------------------------------------------------------

    def apply(self, records: Sequence[Record]) -> list[Record]:
        """Apply ``records`` in order in one transaction: all become durable, or none;
        returns the records not written (see :meth:`broker.store.Store.apply`).

        A connection that served before and is found broken before the commit was
        sent (the server restarted meanwhile) kept nothing: the batch is sent once more
        on a new one. One that breaks during the commit is not retried: the commit may
        have happened, and a sender's resend is answered from what was kept.

        Raises TypeError for a value that is not a record or a payload msgpack cannot
        encode, ValueError or psycopg's IntegrityError for a sticky seq or job id
        already stored, other psycopg errors as the server or the network report them."""
        opened = self.connection.reconnects
        conn = self.connection.get()
        try:
            with self.connection.bounded(conn):
                return self._apply_on(conn, records)
        except UNAVAILABLE_ERRORS:
            if not self._forget_if_broken(conn) or self._committing \
                    or self.connection.reconnects != opened:
                raise
        conn = self.connection.get()
        try:
            with self.connection.bounded(conn):
                return self._apply_on(conn, records)
        except UNAVAILABLE_ERRORS:
            self._forget_if_broken(conn)
            raise

    def _apply_on(self, conn: psycopg.Connection, records: Sequence[Record]) -> list[Record]:
        self._committing = False
        self._burst = None
        try:
            with conn.transaction(), conn.pipeline() as pipeline:
                self._cursor = conn.cursor()
                deferred: list[tuple[Record, Deferred]] = []
                fenced = sorted({r.run_id for r in records if type(r) in _FENCED and r.epoch})
                if fenced:
                    self._cursor.execute(sql.LOCK_RUNS, {"runs": fenced})
                for record in records:
                    try:
                        writer = self._writers[type(record)]
                    except KeyError:
                        raise TypeError(f"not a store record: {type(record).__name__}") from None
                    later = writer(record)
                    if later is not None:
                        deferred.append((record, later))
                self._send_burst()
                pipeline.sync()
                refused = []
                for record, later in deferred:
                    outcome = later()
                    if outcome is False:
                        refused.append(record)
                    elif outcome.__class__ is StickyKept or outcome.__class__ is ClaimStale:
                        refused.append(outcome)
                self._committing = True       # the block's end sends COMMIT
            return refused
        finally:
            self._cursor = None

    def _send_burst(self) -> None:
        """Send the entries saved since the last other statement (see postgres_sticky)."""
        if self._burst is not None:
            burst, self._burst = self._burst, None
            burst.send(self._cursor.connection)

    def _forget_if_broken(self, conn: psycopg.Connection) -> bool:
        """Drop ``conn`` when the failure broke it (the next use opens another); whether it did."""
        if conn.broken or conn.closed:
            self.connection.drop()
            return True
        return False

    def load(self, owner: str | None = None, gone: Sequence[str] = ()) -> Snapshot:
        """The committed state, oldest first; see :meth:`broker.store.Store.load`."""
        gone = list(gone)
        with self._transaction(limit_s=None) as cur:     # at start: as long as it takes
            if owner is None:
                run_ids = [row["run_id"] for row in _rows(cur, sql.ALL_RUN_IDS)]
                owners = {}
            else:
                run_ids = [row["run_id"] for row in _rows(cur, sql.TAKE_RUNS, {
                    "owner": owner, "now": time.time(), "gone": gone})]
                owners = {row["run_id"]: row["owner"]
                          for row in _rows(cur, sql.RUN_OWNERS, {"owner": owner})}
            runs, sticky, deliveries = _runs(cur, run_ids, everything=owner is None)
            conversations = [ConversationSaved(**row) for row in _rows(cur, sql.SELECT_CONVERSATIONS)]
            cur.execute(sql.PRUNE_IDENTITIES, {"cutoff": time.time() - IDENTITY_KEEP_S})
            identities = [IdentitySaved(**row) for row in _rows(cur, sql.SELECT_IDENTITIES, {
                "limit": max(self.identity_limit, 0),
                "named": named_ids(runs, sticky, conversations)})]
            cur.execute(sql.PRUNE_INVOCATIONS, {"cutoff": time.time() - FINISHED_KEEP_S})
            invocations = [InvocationSaved(**row) for row in _rows(cur, sql.SELECT_INVOCATIONS, {
                "owner": owner, "now": time.time(), "gone": gone})]
            recoveries = [RecoverySaved(**{**row, "drafts": _unpack(row["drafts"])})
                          for row in _rows(cur, sql.SELECT_RECOVERIES)]
            cur.execute(sql.GRANT_KEY_MAKE, {"value": secrets.token_hex(32)})
            (key,) = (row["value"] for row in _rows(cur, sql.GRANT_KEY_READ))
        return Snapshot(identities=identities, runs=runs, sticky=sticky, deliveries=deliveries,
                        conversations=conversations, invocations=invocations,
                        recoveries=recoveries, grant_key=bytes.fromhex(key), owners=owners)

    def adopt_runs(self, dead: str, owner: str) -> Snapshot:
        with self._transaction() as cur:
            run_ids = [row["run_id"] for row in
                       _rows(cur, sql.ADOPT_RUNS, {"dead": dead, "owner": owner})]
            runs, sticky, deliveries = _runs(cur, run_ids)
        return Snapshot(runs=runs, sticky=sticky, deliveries=deliveries)

    def claims(self) -> dict[str, str]:
        with self._transaction() as cur:
            return {row["session_id"]: row["broker_id"] for row in _rows(cur, sql.SELECT_CLAIMS)}

    def queued_jobs(self, agent: str, channel: str) -> list[InvocationSaved]:
        with self._transaction() as cur:
            return [InvocationSaved(**row) for row in
                    _rows(cur, sql.SELECT_QUEUED_JOBS, {"agent": agent, "channel": channel})]

    def live_brokers(self, now: float, exclude: str | None = None) -> int:
        with self._transaction() as cur:
            (row,) = _rows(cur, sql.COUNT_LIVE, {"now": now, "exclude": exclude})
        return row["live"]

    def brokers(self, now: float, exclude: str | None = None) -> list[LeaseRenewed]:
        with self._transaction() as cur:
            return [LeaseRenewed(**row) for row in
                    _rows(cur, sql.SELECT_LIVE, {"now": now, "exclude": exclude})]

    def failure_code(self, exc: BaseException) -> str:
        """``store_unavailable`` when the server cannot take writes now (gone,
        unreachable, shutting down, read-only, or a row lock held too long);
        ``internal_error`` for anything else (a record refused is a bug)."""
        return UNAVAILABLE if isinstance(exc, UNAVAILABLE_ERRORS) else "internal_error"

    def close(self) -> None:
        self.connection.close()

    def _transaction(self, limit_s: float | None = CALL_LIMIT_S):
        return _Transaction(self.connection, limit_s)

    # -- writers, one per record type (broker.store.RECORD_HANDLERS); each sends its
    # statements into the batch's pipeline and returns None, or what to read after it

    def _run(self, params: dict[str, Any], *statements: str) -> None:
        """Send ``statements`` into the pipeline, in order, each bound to ``params``."""
        self._send_burst()
        for statement in statements:
            self._cursor.execute(statement, params)

    def _ask(self, statement: str, params: dict[str, Any]) -> psycopg.Cursor:
        """Send ``statement`` on a cursor of its own, whose answer is read after the sync."""
        self._send_burst()
        cursor = self._cursor.connection.cursor()
        cursor.execute(statement, params)
        return cursor

    def save_identity(self, record: IdentitySaved) -> None:
        self._run(fields_by_name(record), sql.UPSERT_IDENTITY)

    def renew_lease(self, record: LeaseRenewed) -> None:
        self._run(fields_by_name(record), sql.DELETE_ENDPOINT_PREDECESSOR, sql.UPSERT_LEASE,
                  sql.FORGET_CLAIMS)

    def release_lease(self, record: LeaseReleased) -> None:
        self._run(fields_by_name(record), sql.DELETE_LEASE)

    def claim_session(self, record: SessionClaimed) -> Deferred:
        cursor = self._ask(sql.CLAIM, fields_by_name(record, gone=list(record.gone)))
        # After the claim, in the same transaction: the row as it stands (the holder's,
        # when refused), to tell a stale hello from a second process.
        holder = self._ask(sql.CLAIM_ROW, {"session_id": record.session_id})

        def outcome() -> bool | ClaimStale:
            if cursor.fetchone() is not None:
                return True
            row = holder.fetchone()
            stored = {"instance": row[0], "attempt": row[1]} if row is not None else None
            return ClaimStale(record) if stored and stale_claim(record, stored) else False
        return outcome

    def release_session(self, record: SessionReleased) -> None:
        self._run(fields_by_name(record), sql.UNCLAIM)

    def save_run(self, record: RunSaved) -> Deferred:
        cursor = self._ask(sql.UPSERT_RUN, fields_by_name(record, record=_pack(record.record)))
        return lambda: cursor.fetchone() is not None        # no row: another broker owns it

    def end_run(self, record: RunEnded) -> None:
        self._run(fields_by_name(record), sql.DELETE_RUN_DELIVERIES, sql.DELETE_RUN_ENTRIES,
                  sql.DELETE_RUN)

    def save_sticky(self, record: StickySaved) -> Deferred:
        if self._burst is None:
            self._burst = StickyBurst()       # sent when another statement or the sync comes
        burst, index = self._burst, self._burst.add(record)
        return lambda: burst.outcome(index)

    def answer_sticky(self, record: StickyAnswered) -> None:
        self._run(fields_by_name(record, delivered_to=_pack(record.delivered_to)),
                  sql.ANSWER_STICKY)

    def record_delivery(self, record: StickyDelivery) -> None:
        self._run(fields_by_name(record), sql.UPSERT_DELIVERY)

    def drop_sticky(self, record: StickyDropped) -> None:
        self._run(fields_by_name(record), sql.DELETE_ENTRY_DELIVERIES, sql.DELETE_ENTRY)

    def save_conversation(self, record: ConversationSaved) -> None:
        self._run(fields_by_name(record, remote=bool(record.remote)), sql.UPSERT_CONVERSATION)

    def delete_conversation(self, record: ConversationDeleted) -> None:
        self._run(fields_by_name(record), sql.DELETE_QUEUED_JOBS, sql.DELETE_RECOVERY,
                  sql.DELETE_CONVERSATION)

    def save_invocation(self, record: InvocationSaved) -> None:
        self._run(fields_by_name(record), sql.INSERT_INVOCATION)

    def set_invocation_state(self, record: InvocationState) -> Deferred | None:
        if record.state != "started":
            self._run(fields_by_name(record), sql.INVOCATION_STATE)
            return None
        cursor = self._ask(sql.START_INVOCATION, fields_by_name(record))
        return lambda: cursor.fetchone() is not None        # no row: not queued any more

    def save_recovery(self, record: RecoverySaved) -> None:
        self._run(fields_by_name(record, drafts=_pack(record.drafts)), sql.UPSERT_RECOVERY)

    def delete_recovery(self, record: RecoveryDeleted) -> None:
        self._run(fields_by_name(record), sql.DELETE_RECOVERY)


class _Transaction:
    """A transaction on the store's connection with a dict-row cursor; a connection
    lost meanwhile is dropped, so the next use opens another."""

    def __init__(self, connection: Connection, limit_s: float | None = CALL_LIMIT_S) -> None:
        self._connection = connection
        self._limit_s = limit_s

    def __enter__(self) -> psycopg.Cursor:
        self._conn = self._connection.get()
        self._bound = self._connection.bounded(self._conn, self._limit_s)
        self._bound.__enter__()
        try:
            self._tx = self._conn.transaction()
            self._tx.__enter__()
        except BaseException:
            self._leave()
            raise
        return self._conn.cursor(row_factory=dict_row)

    def __exit__(self, kind, exc, tb) -> bool | None:
        try:
            return self._tx.__exit__(kind, exc, tb)
        finally:
            self._leave()

    def _leave(self) -> None:
        self._bound.__exit__(None, None, None)
        if self._conn.broken or self._conn.closed:
            self._connection.drop()


def _rows(cur: psycopg.Cursor, statement: str, params: dict[str, Any] | None = None
          ) -> list[dict[str, Any]]:
    cur.execute(statement, params)
    return cur.fetchall() if cur.description is not None else []


def _runs(cur: psycopg.Cursor, run_ids: list[str], everything: bool = False
          ) -> tuple[list, list, list]:
    """The runs ``run_ids``, their sticky entries and delivery states (``everything``:
    every delivery state, even one whose entry is gone)."""
    return read_runs(lambda statement, params: _rows(cur, statement, params), sql, run_ids,
                     bool(run_ids), everything, sticky_row)


def _prepare_schema(conn: psycopg.Connection, schema: str) -> None:
    """Create or migrate the bus's schema, in one transaction under an advisory lock.

    Raises SchemaError for a schema a newer broker wrote."""
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", [lock_key(f"{sql.MIGRATION_LOCK}:{schema}")])
        # Looked up first: a user who may not create a schema may still use one made for it.
        if conn.execute(sql.SCHEMA_EXISTS, [schema]).fetchone() is None:
            conn.execute(pgsql.SQL("CREATE SCHEMA {}").format(pgsql.Identifier(schema)))
        if conn.execute(sql.META_EXISTS).fetchone()[0] is None:
            conn.execute(sql.META)
            version = None
        else:
            row = conn.execute(sql.SCHEMA_VERSION_READ).fetchone()
            version = None if row is None else int(row[0])
        if version is None:
            conn.execute(sql.TABLES)
        elif version > sql.SCHEMA_VERSION:
            raise SchemaError(f"schema {schema} has version {version}; this broker knows "
                              f"versions up to {sql.SCHEMA_VERSION}")
        else:
            for step in range(version, sql.SCHEMA_VERSION):
                conn.execute(sql.MIGRATIONS[step])
        if version != sql.SCHEMA_VERSION:
            conn.execute(sql.SCHEMA_VERSION_WRITE, {"version": str(sql.SCHEMA_VERSION)})
