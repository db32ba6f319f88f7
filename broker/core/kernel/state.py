"""The kernel's part of a broker's state, and the few verbs every handler uses.

:class:`State` is plain data: who the broker is and its limits, counters, the command
list the current input is filling, the tickets of durable writes awaited, the
lifecycle listeners and hooks. Each room keeps its own tables (the session registry,
asks, message ids, runs, sticky queues, ...); the aggregate that holds them beside
this part is :class:`broker.core.assembly.state.BrokerState`, built by the engine.
Handlers are functions of a ``State``; none of them keeps state of its own, and no
room holds a reference to another.

Invariants:

* ``out`` holds the commands of the input being handled, in order; the engine
  renders and empties it when the input is done;
* a durable write that someone waits for has exactly one entry in ``tickets`` until
  the store reports it committed, failed, or (a sticky entry) kept already;
* ``wall`` is the wall-clock time of the current input (for ``sentAt`` and records
  people read); every deadline and liveness check uses the monotonic ``now``.
"""

from __future__ import annotations

from collections import Counter, deque
from dataclasses import dataclass, field, replace
from typing import Any, Callable

from schemas.errors import BusError
from schemas import limits
from schemas.limits import ASK_TIMEOUT_S, LIVENESS_S, MAX_PENDING_ASKS

from broker.core.kernel.bounded import RecentMap
from broker.core.kernel.commands import Answer, Command, Persist
from broker.core.kernel.hooks import Hooks
from broker.core.kernel.records import (Record, StickyAnswered, StickyDelivery, StickyDropped,
                                        StickyRow, StickySaved)

# Writes for a run that this broker fences with the run's epoch as it holds it (see
# broker.core.cluster.ownership); RunSaved and RunEnded carry theirs from the run.
_FENCED_WRITES = frozenset({StickySaved, StickyAnswered, StickyDelivery, StickyDropped})
RECENT_PER_SESSION = 512      # ordinary messages a session can still reply to: 256 to 512
REFUSALS_KEPT = 32            # the latest refusals, for stats (broker.core.assembly.figures)
NOTES_KEPT = 10_000           # notes not yet taken by the shell; past it they are counted, not kept


@dataclass(frozen=True, slots=True)
class Ticket:
    """Who waits for one store write, by outcome (see :meth:`State.persist`)."""

    on_durable: OnDone
    on_failed: OnFailed | None = None
    on_kept: OnKept | None = None


@dataclass(frozen=True, slots=True)
class Limits:
    """Timeouts and the resource bounds (declared with their flags in schemas.bounds)."""

    max_pending_asks: int = MAX_PENDING_ASKS
    ask_timeout_s: float = ASK_TIMEOUT_S
    liveness_s: float = LIVENESS_S
    max_sessions: int = limits.MAX_SESSIONS
    max_sessions_per_connection: int = limits.MAX_SESSIONS_PER_CONNECTION
    max_new_sessions_per_second: int = limits.MAX_NEW_SESSIONS_PER_SECOND
    max_backlog_bytes: int = limits.MAX_BACKLOG_BYTES
    max_runs_per_session: int = limits.MAX_RUNS_PER_SESSION
    max_run_entries: int = limits.MAX_RUN_ENTRIES
    max_run_bytes: int = limits.MAX_RUN_BYTES
    max_sticky_bytes: int = limits.MAX_STICKY_BYTES
    max_groups: int = limits.MAX_GROUPS
    max_conversations: int = limits.MAX_CONVERSATIONS
    host_lease_s: float = limits.LEASE_S   # a run whose host left stays as it was this long
    adopt_grace_s: float = limits.ADOPT_GRACE_S   # a dead broker's runs wait this long for their host
    max_identities: int = limits.MAX_IDENTITIES   # who held which id, remembered (see identities)
    reclaim_window_s: float = limits.RECLAIM_WINDOW_S   # kept messages wait this long for a session


OnDone = Callable[[float], None]
OnFailed = Callable[[float, BusError], None]   # with the refusal the write's waiter gets
OnKept = Callable[[float, StickyRow], None]    # the same request is an entry kept already


@dataclass(eq=False)
class State:
    """The kernel's part of a broker's state: who it is, the current input's commands,
    counters, notes, tickets and the verbs. Each room's tables are fields of the
    aggregate (broker.core.assembly.state.BrokerState), which the engine builds; the
    verbs below read the few of them they need (``registry``, ``runs``, ``ids``) by
    name, so the kernel imports no room."""

    broker_id: str
    limits: Limits
    new_id: Callable[[], str]
    new_token: Callable[[], str]
    # The target placement resolved for the request being handled: (caller, to, verb,
    # target or refusal), cleared by dispatch.handle when that request is done.
    resolved: tuple | None = None
    stats: Counter[str] = field(default_factory=Counter)
    out: list[Command] = field(default_factory=list)
    # lifecycle event type -> its listeners, in order (broker.core.kernel.lifecycle)
    listeners: dict[type, tuple] = field(default_factory=dict)
    hooks: Hooks | None = None        # the cluster's answers, installed by the engine (kernel.hooks)
    internal_errors: list[Exception] = field(default_factory=list)
    # What an operator reads in the log (sessions coming and going, refusals, brokers
    # gone, adoptions): (event, fields), drained by the shell after each input.
    notes: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    refusals: deque = field(default_factory=lambda: deque(maxlen=REFUSALS_KEPT))
    shell: Any = None                 # the shell's own figures (kernel.inputs.ShellFigures)
    tickets: dict[int, Ticket] = field(default_factory=dict)
    next_ticket: int = 0
    wall: float = 0.0
    grant_key: bytes = b""            # see broker.core.sessions.grants; set from the store at start
    warnings: list[str] = field(default_factory=list)   # the operator's, shown in status
    pub_endpoint: str | None = None   # told in the welcome, so tail follows this broker
    peer: str = ""                    # who sent the current input (the shell says; see Session.peer)
    peer_is_address: bool = False     # ... and it is only an address (plain TCP), not a client

    # -- verbs ---------------------------------------------------------------------

    def answer(self, to: Any, re: str | None,
               value: dict[str, Any] | BusError | None = None, *, quiet: bool = False,
               ackable: bool = False) -> None:
        """Answer request ``re`` of ``to`` with ``value`` (fields, or a refusal)."""
        identity = to if to.__class__ is bytes else to.identity
        if isinstance(value, BusError):
            self.refused(to, re, value.code)
        self.out.append(Answer(identity, [re], {} if value is None else value, quiet, ackable))

    def note(self, event: str, **fields: Any) -> None:
        """Tell the operator (the shell logs it at info level)."""
        if len(self.notes) < NOTES_KEPT:
            self.notes.append((event, fields))
        else:
            self.stats["notes.dropped"] += 1

    def refused(self, to: Any, re: str | None, code: str) -> None:
        """Count one refused request, keep it among the latest, and note it for one
        log line (its caller named by session id and name, or by connection when it
        has no session). The answer itself is the caller's to send."""
        self.stats[f"refused.{code}"] += 1
        session = self.registry.by_identity.get(to) if to.__class__ is bytes else to
        caller = {"session": session.id, "name": session.name} if session is not None \
            else {"connection": to.hex()}
        self.refusals.append((self.wall, code, caller, re))
        self.note("request_refused", code=code, re=re, **caller)

    def settle(self, to: Any, re: str, value: dict[str, Any] | BusError) -> None:
        """The deferred answer of request ``re`` (an ask's reply or refusal, a queued
        send's commit): remembered for retries, and sent if its caller is still here."""
        self.ids.answer(re, value)
        if to is not None:
            self.answer(to, re, value)

    def persist(self, record: Record, on_durable: OnDone | None = None,
                on_failed: OnFailed | None = None, on_kept: OnKept | None = None) -> None:
        """Queue a store write; ``on_durable`` runs once it is committed, ``on_failed``
        if the commit fails (with ``store_unavailable`` or ``internal_error``),
        ``on_kept`` if the store wrote nothing because it holds the same request
        (a sticky entry, see :class:`~broker.core.kernel.records.StickyKept`).

        A write for a run (a sticky entry, its answer, delivery or drop) is fenced here,
        the one place: it names this broker and the run's epoch, so the store refuses
        it once another broker has taken the run."""
        if record.__class__ in _FENCED_WRITES and record.epoch == 0:
            run = self.runs.get(record.run_id)
            if run is not None:
                record = replace(record, owner=self.broker_id, epoch=run.epoch)
        if on_durable is None:
            self.out.append(Persist(record))
            return
        self.next_ticket += 1
        self.tickets[self.next_ticket] = Ticket(on_durable, on_failed, on_kept)
        self.out.append(Persist(record, self.next_ticket))

    def recent_for(self, session: Any) -> RecentMap[str, str]:
        """The ordinary messages ``session`` received lately (msg id -> sender id)."""
        return _table(self.recent, session)

    def answered_by(self, session: Any) -> RecentMap[str, bool]:
        return _table(self.answered, session)


def _table(tables: dict[str, RecentMap], session: Any) -> RecentMap:
    table = tables.get(session.id)
    if table is None:
        table = tables[session.id] = RecentMap(RECENT_PER_SESSION)
    return table
