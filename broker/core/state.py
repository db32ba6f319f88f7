"""All routing state of one broker, and the few verbs every handler uses.

:class:`State` is plain data: the session registry, the subsystems' tables (asks,
message ids, recent messages, runs, sticky queues), counters, and the command list
the current input is filling. Handlers are functions of a ``State``; none of them
keeps state of its own, and no subsystem holds a reference to another.

Invariants:

* ``out`` holds the commands of the input being handled, in order; the engine
  renders and empties it when the input is done;
* a durable write that someone waits for has exactly one entry in ``tickets`` until
  the store reports it committed, failed, or (a sticky entry) kept already;
* ``wall`` is the wall-clock time of the current input (for ``sentAt`` and records
  people read); every deadline and liveness check uses the monotonic ``now``.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable

from schemas.errors import BusError
from schemas import limits
from schemas.limits import ASK_TIMEOUT_S, LIVENESS_S, MAX_PENDING_ASKS

from .agents import Conversations
from .asks import AskTable
from .bounded import RecentMap
from .cluster import Cluster
from .commands import Answer, Command, Persist
from .dedup import MessageIds
from .departures import Departures
from .grants import UsedGrants
from .identity_table import IdentityTable
from .invocations import InvocationTable
from .records import Record, StickyRow
from .runs import Run
from .session_rate import SessionRate
from .sessions import Registry, Session
from .sticky import StickyQueues

RECENT_PER_SESSION = 512      # ordinary messages a session can still reply to: 256 to 512


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


OnDone = Callable[[float], None]
OnFailed = Callable[[float, BusError], None]   # with the refusal the write's waiter gets
OnKept = Callable[[float, StickyRow], None]    # the same request is an entry kept already


@dataclass(eq=False)
class State:
    broker_id: str
    limits: Limits
    new_id: Callable[[], str]
    new_token: Callable[[], str]
    registry: Registry = field(default_factory=Registry)
    # Who last held each id, newest last (bounded: see broker.core.identity_table).
    identities: IdentityTable = field(default_factory=IdentityTable)
    session_rate: SessionRate = field(default_factory=SessionRate)   # new sessions per peer
    asks: AskTable = field(default_factory=AskTable)
    ids: MessageIds = field(default_factory=MessageIds)
    # Ordinary messages each session received lately: msg id -> sender id.
    recent: dict[str, RecentMap[str, str]] = field(default_factory=dict)
    # Threads (ask or message ids) each session has replied to lately.
    answered: dict[str, RecentMap[str, bool]] = field(default_factory=dict)
    runs: dict[str, Run] = field(default_factory=dict)
    sticky: StickyQueues = field(default_factory=StickyQueues)
    # Runs by host: those each session hosts now, and those it hosted last (so a
    # returning host finds its runs without a scan of every run).
    hosted: dict[str, set[str]] = field(default_factory=dict)
    hosted_before: dict[str, set[str]] = field(default_factory=dict)
    leased: set[str] = field(default_factory=set)    # runs whose host left, lease running
    # Stages of ended runs, by host id, then by each spelling (broker.core.closed).
    closed: dict[str, dict[str, Any]] = field(default_factory=dict)
    # Agents' conversations (with their settings) and invoke jobs (respond/invoke).
    conversations: Conversations = field(default_factory=Conversations)
    invocations: InvocationTable = field(default_factory=InvocationTable)
    cluster: Cluster = field(default_factory=Cluster)   # the other brokers on the database
    departures: Departures = field(default_factory=Departures)   # peers still to be told
    stats: Counter[str] = field(default_factory=Counter)
    out: list[Command] = field(default_factory=list)
    internal_errors: list[Exception] = field(default_factory=list)
    tickets: dict[int, tuple[OnDone, OnFailed | None, OnKept | None]] = field(default_factory=dict)
    next_ticket: int = 0
    wall: float = 0.0
    grant_key: bytes = b""            # see broker.core.grants; set from the store at start
    used_grants: UsedGrants = field(default_factory=UsedGrants)   # child grants spent lately
    warnings: list[str] = field(default_factory=list)   # the operator's, shown in status
    pub_endpoint: str | None = None   # told in the welcome, so tail follows this broker
    peer: str = ""                    # who sent the current input (the shell says; see Session.peer)
    peer_is_address: bool = False     # ... and it is only an address (plain TCP), not a client

    # -- verbs ---------------------------------------------------------------------

    def answer(self, to: Session | bytes, re: str | None,
               value: dict[str, Any] | BusError | None = None, *, quiet: bool = False,
               ackable: bool = False) -> None:
        """Answer request ``re`` of ``to`` with ``value`` (fields, or a refusal)."""
        identity = to.identity if isinstance(to, Session) else to
        if isinstance(value, BusError):
            self.stats[f"refused.{value.code}"] += 1
        self.out.append(Answer(identity, [re], {} if value is None else value, quiet, ackable))

    def settle(self, to: Session | None, re: str, value: dict[str, Any] | BusError) -> None:
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
        (a sticky entry, see :class:`~broker.core.records.StickyKept`)."""
        if on_durable is None:
            self.out.append(Persist(record))
            return
        self.next_ticket += 1
        self.tickets[self.next_ticket] = (on_durable, on_failed, on_kept)
        self.out.append(Persist(record, self.next_ticket))

    def recent_for(self, session: Session) -> RecentMap[str, str]:
        """The ordinary messages ``session`` received lately (msg id -> sender id)."""
        return _table(self.recent, session)

    def answered_by(self, session: Session) -> RecentMap[str, bool]:
        return _table(self.answered, session)


def _table(tables: dict[str, RecentMap], session: Session) -> RecentMap:
    table = tables.get(session.id)
    if table is None:
        table = tables[session.id] = RecentMap(RECENT_PER_SESSION)
    return table
