"""What the broker keeps, behind one interface: :class:`Store`, and the one table of
record types every store applies (:data:`RECORD_HANDLERS`).

The implementations, held together by one contract suite
(``tests/unit/test_store_contract.py`` and its neighbours run over each):

* :mod:`broker.store.sqlite`: one file (apsw, WAL), the embedded default;
* :mod:`broker.store.postgres`: PostgreSQL through psycopg 3, for brokers on several
  hosts (an optional extra);
* :mod:`broker.store.memory`: plain dicts; its docstring states the semantics every
  store keeps, and the core tests run on it.

:func:`broker.store.opening.open_store` picks one from ``--db`` and reads the snapshot a
starting broker restores from.

Invariants:

* :meth:`Store.apply` runs a whole batch in one transaction: every record is kept,
  or none; the records it did not write (refused claims, run saves and job starts, entries whose
  request is kept already) are returned, not raised;
* each record type has one writer in each store: the method :data:`RECORD_HANDLERS`
  names, found by :func:`writers_of`; a new record type is a class in
  :mod:`broker.core.kernel.records`, a row here, and that method in each store;
* what a store forgets at :meth:`Store.load` (identities and finished jobs past their
  keep windows, identities past the restore bound) is defined here, once;
* a store need not be thread-safe: one thread uses it at a time (the shell before the
  persistence worker starts, then the worker alone).
"""

from __future__ import annotations

from typing import Any, Callable, Protocol, Sequence

from broker.core.kernel.records import (RECORD_TYPES, ConversationDeleted, ConversationSaved,
                                        IdentitySaved, InvocationSaved, InvocationState,
                                        LeaseReleased, LeaseRenewed, Record, RecoveryDeleted,
                                        RecoverySaved, RunEnded, RunSaved, SessionClaimed,
                                        SessionReleased, Snapshot, StickyAnswered,
                                        StickyDelivery, StickyDropped, StickyKept, StickyRow,
                                        ClaimStale,
                                        StickySaved)

IDENTITY_KEEP_S = 30 * 24 * 3600   # who held an id is remembered for 30 days
IDENTITY_LIMIT = 200_000           # newest identities restored at start, at most
FINISHED_KEEP_S = 7 * 24 * 3600    # a done or failed invoke job is kept a week
UNFINISHED = ("queued", "started")
UNAVAILABLE = "store_unavailable"  # the code of a write the store cannot take now

# Each record type and the name of the method that writes it, in every store. The
# method takes the record alone and returns None (written), False (refused: see
# SessionClaimed, RunSaved and InvocationState) or the StickyKept that stands for its record.
RECORD_HANDLERS: dict[type, str] = {
    IdentitySaved: "save_identity",
    LeaseRenewed: "renew_lease",
    LeaseReleased: "release_lease",
    SessionClaimed: "claim_session",
    SessionReleased: "release_session",
    RunSaved: "save_run",
    RunEnded: "end_run",
    StickySaved: "save_sticky",
    StickyAnswered: "answer_sticky",
    StickyDelivery: "record_delivery",
    StickyDropped: "drop_sticky",
    ConversationSaved: "save_conversation",
    ConversationDeleted: "delete_conversation",
    InvocationSaved: "save_invocation",
    InvocationState: "set_invocation_state",
    RecoverySaved: "save_recovery",
    RecoveryDeleted: "delete_recovery",
}
assert set(RECORD_HANDLERS) == set(RECORD_TYPES.values()), "one handler per record type"


class SchemaError(Exception):
    """The database was written by a newer broker; the message says which versions."""


class StoreOpenError(Exception):
    """The database cannot be used at start; the message names it and says what to do."""


class Store(Protocol):
    """The persistence interface. Implementations need not be thread-safe (see the
    module docstring); each also has one writer per record type (:data:`RECORD_HANDLERS`)."""

    def apply(self, records: Sequence[Record]) -> list[Record]:
        """Make every record durable in one transaction, or none of them (raise).

        Returns the records not written, which are not an error (the rest of the batch
        is kept): the claims refused (see :class:`SessionClaimed`), saves of runs another
        broker owns (see :class:`RunSaved`), starts of jobs no
        longer queued (see :class:`InvocationState`) and, for each entry whose request
        is stored already, a :class:`StickyKept`. Raises TypeError for a value that is
        not a record or a payload msgpack cannot encode."""

    def load(self, owner: str | None = None, gone: Sequence[str] = ()) -> Snapshot:
        """The committed state, oldest first in each list; forgets what is past its
        keep window (see the module docstring).

        ``owner`` (a broker id) takes the runs no live broker owns (``gone``: brokers
        whose lease row is live but which are known dead) and loads only those; the
        others are named in ``owners``. Without ``owner``, every run."""

    def adopt_runs(self, dead: str, owner: str) -> Snapshot:
        """The runs of broker ``dead`` become ``owner``'s, each to exactly one adopter
        store-wide. Returns them (runs, sticky entries, delivery states)."""

    def claims(self) -> dict[str, str]:
        """Who holds each claimed session id: id -> broker id (for tests and tools)."""

    def queued_jobs(self, agent: str, channel: str) -> list[InvocationSaved]:
        """The conversation's invoke jobs still ``queued``, as committed, oldest first:
        what its broker may hand over when it opens there (jobs other brokers committed)."""

    def live_brokers(self, now: float, exclude: str | None = None) -> int:
        """Brokers whose lease is still valid at wall time ``now``, ``exclude`` aside."""

    def brokers(self, now: float, exclude: str | None = None) -> list[LeaseRenewed]:
        """The rows of those brokers (their endpoints and lease ends), oldest start first:
        how brokers sharing a store find each other."""

    def failure_code(self, exc: BaseException) -> str:
        """The error code the waiters of a write that raised ``exc`` are answered with:
        :data:`UNAVAILABLE` when the database cannot take writes now (nothing was kept
        and a later retry may succeed), ``internal_error`` for anything else (a record
        the store refuses is a broker bug)."""

    def close(self) -> None:
        """Release the database; the store is unusable afterwards."""


def writers_of(target: Any) -> dict[type, Callable[[Any], Any]]:
    """``target``'s writer for each record type: its methods :data:`RECORD_HANDLERS`
    names. Raises AttributeError when one is missing."""
    return {cls: getattr(target, name) for cls, name in RECORD_HANDLERS.items()}


def apply_each(records: Sequence[Record], writers: dict[type, Callable]) -> list:
    """Write ``records`` in order with ``writers``; the records not written (see
    :meth:`Store.apply`). Raises TypeError for anything not a record."""
    refused = []
    for record in records:
        try:
            writer = writers[type(record)]
        except KeyError:
            raise TypeError(f"not a store record: {type(record).__name__}") from None
        outcome = writer(record)
        if outcome is False:
            refused.append(record)
        elif outcome.__class__ is StickyKept or outcome.__class__ is ClaimStale:
            refused.append(outcome)
    return refused


def named_ids(runs: Sequence[RunSaved], sticky: Sequence[StickyRow],
              conversations: Sequence[ConversationSaved]) -> list[str]:
    """The session ids a snapshot's runs (hosts, subagents), entries (senders) and
    conversations name: their identities are loaded whatever their age."""
    named: set[str] = set()
    for run in runs:
        record = run.record if isinstance(run.record, dict) else {}
        if isinstance(record.get("host"), str):
            named.add(record["host"])
        named.update(s["id"] for s in record.get("subagents") or ()
                     if isinstance(s, dict) and isinstance(s.get("id"), str))
    named.update(row.entry.sender_id for row in sticky)
    named.update(c.session_id for c in conversations if c.session_id)
    return sorted(named)
