"""What the routing core asks the IO shell to do.

The core never performs IO: every handler appends commands to one list, in order.
Handlers speak in two higher-level commands, :class:`Deliver` (messages for a
session) and :class:`Answer` (the answer to requests); a final pass
(:mod:`broker.core.kernel.outbox`) turns them into :class:`Send` commands holding envelopes,
batching deliveries into ``msgs`` and quiet successes into ``acks``. The shell only
ever sees :class:`Send`, :class:`Publish` and :class:`Persist`, and when other brokers
share the database the link commands (:class:`LinkOpen`, :class:`LinkSend`,
:class:`LinkClose`) and :class:`ReadJobs`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from schemas.errors import BusError

from broker.core.kernel.records import Record


@dataclass(frozen=True, slots=True)
class Send:
    """Deliver ``env`` to the peer connected as ``identity`` (a ROUTER routing id)."""

    identity: bytes
    env: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Publish:
    """Publish an event on the PUB socket under ``topic`` (a group name)."""

    topic: str
    env: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Persist:
    """Write ``record`` to the store; when ``ticket`` is set, report back once it is durable."""

    record: Record
    ticket: int | None = None


@dataclass(slots=True)
class Deliver:
    """Messages ``ids``/``texts`` from one sender to the session at ``identity``.

    ``attachments`` None: plain text messages (no attachments, no extra fields), sent
    as one ``msgs``. Otherwise one message, sent as a ``msg`` with its
    ``attachments``, ``expects_reply`` and the optional declared fields in ``extra``.
    """

    identity: bytes
    sender_id: str
    sender_name: str
    sent_at: float
    ids: list[str]
    texts: list[str]
    attachments: list | None = None
    expects_reply: bool = False
    extra: dict[str, Any] | None = None


@dataclass(slots=True)
class Answer:
    """The answer to the requests ``ids`` of the session at ``identity``.

    ``value`` is the answer's fields (each id's own ``messageId`` added when
    ``own_id``) or the refusal. ``quiet``: the caller asked for ``acks``; a quiet
    answer is acknowledged by id only when ``ackable`` (a plain live delivery), and
    sent whole otherwise, so no answer is ever shortened.
    """

    identity: bytes
    ids: list[str | None]
    value: dict[str, Any] | BusError
    quiet: bool = False
    ackable: bool = False
    own_id: bool = False




@dataclass(frozen=True, slots=True)
class ReadJobs:
    """Read the store's queued invoke jobs for the conversation (``agent``, ``channel``)
    after every write asked for before it; the shell hands them to
    :meth:`~broker.core.assembly.engine.Engine.jobs_read`. Not a write."""

    agent: str
    channel: str


@dataclass(frozen=True, slots=True)
class LinkOpen:
    """Open a link to broker ``broker_id`` (a DEALER to its ROUTER ``endpoint``), anew
    if one is open. ``server_key``: the CURVE key that ROUTER must prove it holds ("":
    a link without CURVE)."""

    broker_id: str
    endpoint: str
    server_key: str = ""


@dataclass(frozen=True, slots=True)
class LinkSend:
    """Send ``envs`` to broker ``broker_id`` over this broker's link to it, in order."""

    broker_id: str
    envs: list


@dataclass(frozen=True, slots=True)
class LinkClose:
    broker_id: str


@dataclass(frozen=True, slots=True)
class AdoptRuns:
    """Ask the store for the runs of dead broker ``broker_id`` (see
    :mod:`broker.core.cluster.ownership`); the answer comes back as ``Engine.runs_adopted``."""

    broker_id: str


Command = (Send | Publish | Persist | Deliver | Answer | ReadJobs | LinkOpen | LinkSend
           | LinkClose | AdoptRuns)


@dataclass(frozen=True, slots=True)
class RenewLease:
    """Write this broker's lease row, valid ``lease_s`` seconds from now by the
    store's clock (other processes read it), and read the other brokers' rows in the
    same batch. ``ticket``: its commit (or failure) is reported like a record's, so the
    engine knows how long it may act as the owner of its runs."""

    lease_s: float
    ticket: int = 0


@dataclass(frozen=True, slots=True)
class ReadBrokers:
    """Read the other brokers' lease rows (no write): a new broker is linked, and a
    dead one's lease end seen, within a second."""
