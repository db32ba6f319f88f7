"""What the broker keeps: typed records the core emits and the store applies.

The core never talks to a database. It describes every durable change as one of the
frozen records below, inside a :class:`~broker.core.kernel.commands.Persist` command; the
shell hands them to the persistence worker, which applies a whole batch through the
:class:`broker.store.Store` interface in one transaction. At start the shell reads a
:class:`Snapshot` back from the store and gives it to the engine.

Invariants:

* a record names every field it writes; the store maps fields to columns by name
  (no positional tuples anywhere between the core and the database);
* records are plain values (str, int, float, bool, None, lists and dicts of them), so
  any store implementation can encode them;
* times in records are wall-clock seconds (people and other brokers read them), never
  the monotonic ``now`` the core runs on.

Every store implements exactly :class:`broker.store.Store`; a new record type is
a class here, a member of :data:`Record`, and a row of :data:`broker.store.RECORD_HANDLERS`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, get_args


@dataclass(frozen=True, slots=True)
class IdentitySaved:
    """Who last held a session id, so a later claim of that id can be checked."""

    session_id: str
    atomic_session_id: str | None
    token_hash: str
    name: str
    at: float


@dataclass(frozen=True, slots=True)
class LeaseRenewed:
    """This broker is alive until ``until`` (wall clock), serving ``endpoint``.

    It replaces any other broker's row on the same endpoint: two live brokers cannot
    serve one endpoint (the bind or the ipc lock refuses the second), so such a row is
    a dead predecessor's, and a restarted broker never counts it as another broker.
    ``curve_public``: the z85 public key its ROUTER serves CURVE with ("" without
    CURVE); the other brokers verify it and allow it on their own ROUTERs."""

    broker_id: str
    pid: int
    endpoint: str
    started_at: float
    until: float
    curve_public: str = ""
    # When set, the lease's length: the store ends it ``lease_s`` after *its own* clock
    # (PostgreSQL's ``clock_timestamp()``; the host's for SQLite), and ``until`` is
    # ignored, so no broker's wall clock decides who is alive.
    lease_s: float = 0.0


@dataclass(frozen=True, slots=True)
class LeaseReleased:
    broker_id: str


@dataclass(frozen=True, slots=True)
class SessionClaimed:
    """Broker ``broker_id`` grants ``session_id`` to a live session of its own.

    Store-wide, at most one live broker holds an id: the claim takes the id when
    nobody holds it, when ``broker_id`` does, or when its holder's lease has ended at
    ``at`` or is among ``gone`` (brokers the claimant saw die, whose lease runs on);
    with ``token_hash`` (a reclaim the claimant could not check itself), only if the
    store's identity row for the id has that hash. ``attempt`` orders one client's
    hellos (see the field). Otherwise it is *refused*: nothing
    of it is written, the rest of its batch is, and :meth:`Store.apply` returns it."""

    session_id: str
    broker_id: str
    at: float
    gone: list[str] = field(default_factory=list)
    token_hash: str | None = None
    # The client's hello attempt (0: none said) and its ``instance`` nonce. Between
    # hellos of one instance (one client object), a newer attempt than the one that
    # took the id takes it even from a live holder (the client moved: its newest hello
    # is the client), and an older one never takes it (a stale hello, delivered late).
    # Another instance is another process: the other rules alone decide.
    attempt: int = 0
    instance: str = ""


@dataclass(frozen=True, slots=True)
class SessionReleased:
    """The session left ``broker_id``: its claim goes (a claim of another broker stays)."""

    session_id: str
    broker_id: str


@dataclass(frozen=True, slots=True)
class RunSaved:
    """The whole tree of a workflow run (see :meth:`broker.core.runs.run_tree.Run.record`), and
    the broker that owns it (the one that wrote it; see :mod:`broker.core.cluster.ownership`).
    It is *refused* (nothing written, the store returns it) when the stored run has
    another owner: that broker adopted it, or registered it before this one knew."""

    run_id: str
    record: dict[str, Any]
    owner: str = ""
    epoch: int = 0                  # the owner's epoch of the run: see Fence


@dataclass(frozen=True, slots=True)
class RunEnded:
    """The run is gone, with every sticky entry and delivery record of it."""

    run_id: str
    owner: str = ""
    epoch: int = 0


@dataclass(frozen=True, slots=True)
class StickySaved:
    """One retained message for workflow stages, and the answer its sender got."""

    seq: int
    run_id: str
    target: str
    sender_id: str
    sender_name: str
    message_id: str
    message: str
    attachments: list
    sent_at: float
    ack: bool                       # the sender wants undeliverable notices
    position: int                   # its FIFO position when it was queued
    not_in_known_set: bool          # the target matched no known stage then
    owner: str = ""                 # the run's owner and epoch as the writer holds them
    epoch: int = 0


@dataclass(frozen=True, slots=True)
class StickyAnswered:
    """Live stages that received an entry at the moment it was queued."""

    seq: int
    delivered_to: list[str]
    run_id: str = ""
    owner: str = ""
    epoch: int = 0


@dataclass(frozen=True, slots=True)
class StickyDelivery:
    """One hand-over of an entry to a stage and transcript: ``sent`` or ``acked``."""

    seq: int
    stage: str
    transcript: str
    state: str
    at: float
    run_id: str = ""
    owner: str = ""
    epoch: int = 0


@dataclass(frozen=True, slots=True)
class StickyDropped:
    seq: int
    run_id: str = ""
    owner: str = ""
    epoch: int = 0


@dataclass(frozen=True, slots=True)
class ConversationSaved:
    """A persistent conversation of an agent (upserted by agent and channel)."""

    agent: str
    channel: str
    remote: bool
    last_active_at: float | None
    session_id: str | None          # its last live session


@dataclass(frozen=True, slots=True)
class ConversationDeleted:
    """The conversation is gone, with its response_recovery row and its queued invocations."""

    agent: str
    channel: str


@dataclass(frozen=True, slots=True)
class InvocationSaved:
    """One invoke job, as queued (see broker.core.agents.invocation_table for its states)."""

    id: str
    agent: str
    channel: str                    # the destination conversation
    from_channel: str               # the caller's conversation
    reason: str
    created_at: float
    request: str                    # the caller's session id and request id: a resend finds it
    state: str = "queued"


@dataclass(frozen=True, slots=True)
class InvocationState:
    """A job moved to ``state`` (started, done or failed); an unknown id changes nothing.

    The move to ``started`` is a compare-and-set, so brokers sharing the store hand a
    job over at most once between them: it applies only to a job still ``queued``, and
    is *refused* otherwise (another broker started it, or its conversation was
    deleted): nothing is written, the rest of its batch is, and :meth:`Store.apply`
    returns it, like a refused :class:`SessionClaimed`."""

    id: str
    state: str
    at: float
    error: str | None = None
    broker_id: str = ""             # for ``started``: the broker handing it over


@dataclass(frozen=True, slots=True)
class RecoverySaved:
    """The latest rejected-output turn of a persistent conversation (replaces the last).

    Sensitive: the drafts are the agent's exact undelivered output."""

    agent: str
    channel: str
    turn: str
    drafts: list                    # [{id, text, completion, outcome}]
    outcome: str
    at: float


@dataclass(frozen=True, slots=True)
class RecoveryDeleted:
    agent: str
    channel: str


Record = (IdentitySaved | LeaseRenewed | LeaseReleased | SessionClaimed | SessionReleased
          | RunSaved | RunEnded | StickySaved | StickyAnswered | StickyDelivery | StickyDropped
          | ConversationSaved | ConversationDeleted | InvocationSaved | InvocationState
          | RecoverySaved | RecoveryDeleted)

RECORD_TYPES: dict[str, type] = {cls.__name__: cls for cls in get_args(Record)}


def refusal_code(record: Record) -> str:
    """The error code the waiter of a refused record gets (see :meth:`Store.apply`)."""
    if type(record) is InvocationState:
        return "invocation_taken"
    if type(record) is RunSaved or type(record) is StickySaved:
        # Another broker owns the run (adopted it: this one is deposed): ask again once
        return "run_moving"             # this one has its word (forwarded, or adopted)
    if type(record) is SessionClaimed and record.token_hash is not None:
        return "session_id_unverified"    # or held elsewhere: the store does not say which
    return "session_id_held"


@dataclass(slots=True)
class StickyRow:
    """A retained entry as read back, with its answered-to list (empty if none)."""

    entry: StickySaved
    delivered_to: list[str] = field(default_factory=list)


def refusal_codes(not_written) -> dict[int, str]:
    """What :meth:`Store.apply` returned, as the error code for each refused record by
    ``id`` (a :class:`ClaimStale` stands for its claim); entries kept already
    (:class:`StickyKept`) are not refusals and are left out."""
    codes: dict[int, str] = {}
    for outcome in not_written:
        if type(outcome) is ClaimStale:
            codes[id(outcome.claim)] = "stale_hello"
        elif type(outcome) is not StickyKept:
            codes[id(outcome)] = refusal_code(outcome)
    return codes


@dataclass(frozen=True, slots=True)
class StickyKept:
    """A :class:`StickySaved` the store did not write, because the same request (its
    sender id and message id) is an entry kept already, whichever broker wrote it:
    ``kept`` is that entry as stored. Not an error: the rest of the batch is written,
    and :meth:`Store.apply` returns it, so the sender is told the first outcome."""

    saved: StickySaved
    kept: StickyRow


@dataclass(frozen=True, slots=True)
class ClaimStale:
    """A :class:`SessionClaimed` the store refused because the id was taken with a newer
    ``attempt`` of the same ``instance``: the hello was a late copy (``stale_hello``),
    not a second process (which gets a fresh id). :meth:`Store.apply` returns it in
    place of the claim."""

    claim: SessionClaimed


@dataclass(slots=True)
class Snapshot:
    """Everything the engine restores at start, oldest first in each list."""

    identities: list[IdentitySaved] = field(default_factory=list)
    runs: list[RunSaved] = field(default_factory=list)
    sticky: list[StickyRow] = field(default_factory=list)
    deliveries: list[StickyDelivery] = field(default_factory=list)
    conversations: list[ConversationSaved] = field(default_factory=list)
    # Invoke jobs not finished (queued or started), oldest first; for a test to read
    # what the store kept: recovery rows (the engine never restores them).
    invocations: list[InvocationSaved] = field(default_factory=list)
    recoveries: list[RecoverySaved] = field(default_factory=list)
    # The key grants are derived from; made once per database and shared by every
    # broker on it, so a grant outlives a restart (see broker.core.sessions.grants).
    grant_key: bytes = b""
    # Runs this broker did not take because a live broker owns them: run id -> owner.
    owners: dict[str, str] = field(default_factory=dict)
