"""Receipts: what became of each live message, and the messages a client does not have yet.

Every message handed to a session of this broker (:func:`delivered`, called from the
one delivery path, :mod:`broker.core.messaging.delivery`, and for messages another
broker relays here) becomes a :class:`Batch`: the ids of one delivery, who sent them,
and the time each state was reached. A sender reads them by id
(:func:`message_status`, the ``status`` action with ``messageId``); the receiver's
client reports what it read and saw (:func:`reported`, through
:mod:`broker.core.assembly.reports`):

``delivered``    handed to the receiver's connection here;
``read``         its client has it: it reported reading (``hb.read``, a byte count
                 since its hello) every byte up to the frame that carried it;
``seen``         handed to the program or the model (``hb.seenThrough``: the newest id
                 handed over; it and everything delivered before it are seen);
``replied``      the receiver replied to it (an ask's answer, or a reply naming it);
``undelivered``  it never reached the receiver (``reason``): the session ended and did
                 not come back within the reclaim window (``session_ended``; or
                 ``never_seen`` when its client had it and never handed it over), or
                 more was kept for it than the bound (``bound_reached``).

Rules:

* A live message is kept until its receiver's client has it: read, or, for a session
  whose hello said ``keepUntil: "seen"`` (the MCP server), seen. When the same
  session comes back (a new connection, a reclaimed id after it ended, or on another
  broker) the broker sends every kept message again, in order; the client drops copies
  by id. Messages queued for a workflow stage are not kept here: their queue keeps
  them (:mod:`broker.core.workflow.sticky_queue`), they only get receipts.
* A session that ends (bye, silence, dropped) leaves its kept messages *parked* for
  ``Limits.reclaim_window_s``; a client that takes the id back here gets them, one
  that takes it back on another broker gets them relayed there (:func:`moved_to`);
  when the window passes, each is reported ``undelivered`` to its sender.
* The sender hears ``undelivered`` once per message, as an ``undelivered`` event.
* What is kept is bounded: a live session's kept bytes are its backlog
  (:mod:`broker.core.sessions.backlog`: sends past it are refused, never dropped);
  parked messages are bounded per session by the backlog bound and broker-wide by
  ``MAX_KEPT_BYTES`` (the oldest are reported ``bound_reached``); receipts are
  answered for the last ``RECEIPTS_KEPT`` messages, for ``RECEIPT_KEEP_S``; a
  session's deliveries read and not yet seen are followed to ``seen`` for its last
  ``READ_TRACKED`` of them (older ones stay ``read``), and a read one keeps no text.
* A receipt is the sender's alone: anyone else asking gets ``unknown_message``. A
  message that went to another broker is asked there (``elsewhere``, used by
  :mod:`broker.core.cluster.placement`), and one whose receiver moved on is asked where
  it went.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field, replace
from typing import Any

from schemas import envelopes
from schemas.errors import BusError
from schemas.limits import MAX_KEPT_BYTES, READ_TRACKED, RECEIPT_KEEP_S, RECEIPTS_KEPT

from broker.core.kernel.bounded import RecentMap
from broker.core.kernel.commands import Deliver, LinkSend, Send
from broker.core.kernel.outbox import delivery
from broker.core.kernel.state import State
from broker.core.messaging import inbound_gate as gate
from broker.core.sessions import backlog
from broker.core.sessions.registry import Session

SEEN = "seen"
KEEP_UNTIL = ("read", SEEN)
SESSION_ENDED, BOUND_REACHED, NEVER_SEEN = "session_ended", "bound_reached", "never_seen"


@dataclass(slots=True, eq=False)
class Batch:
    """One delivery to one session, and its receipt. ``deliver``: what to send again
    (None: a queued entry, whose queue sends it again; ``env``: an envelope relayed
    from another broker, sent again as it came)."""

    ids: list[str]
    sender_id: str
    to_id: str
    to_name: str
    size: int
    delivered_at: float
    deliver: Deliver | None = None
    env: dict | None = None
    end: int = -1                   # the connection's bytes once it was written (-1: not yet)
    read_at: float | None = None
    seen: int = 0                   # how many of ``ids``, from the first, were seen
    # When ``seen`` grew: (its new value, wall clock), so each id has its own seenAt.
    seen_steps: list[tuple[int, float]] | None = None
    replied: dict[str, float] | None = None
    undelivered_from: int | None = None    # ids from this index on never reached the receiver
    undelivered_at: float | None = None
    reason: str | None = None
    moved_to: str | None = None     # the broker its receiver moved to, with it

    @property
    def kept(self) -> bool:
        return self.deliver is not None or self.env is not None


@dataclass(slots=True)
class Parked:
    batches: list[Batch]
    until: float
    size: int


@dataclass(eq=False)
class Receipts:
    """The messaging room's receipt tables."""

    by_id: RecentMap[str, Batch] = field(default_factory=lambda: RecentMap(RECEIPTS_KEPT))
    # Sent from here to a session of another broker: id -> (that broker, sender id).
    elsewhere: RecentMap[str, tuple[str, str]] = field(
        default_factory=lambda: RecentMap(RECEIPTS_KEPT))
    parked: dict[str, Parked] = field(default_factory=dict)    # by session id, oldest first
    parked_bytes: int = 0


# -- a message is handed over ------------------------------------------------------------

def delivered(state: State, target: Session, command: Deliver, size: int,
              keep: bool = True) -> None:
    """``command`` (from the delivery path) hands its messages to ``target``."""
    if target.broker is not None:       # a mirror: its own broker keeps and answers them
        sender = state.registry.by_id.get(command.sender_id)
        if sender is not None and sender.broker is None:
            state.receipts.elsewhere.put_all(command.ids, value=(target.broker, command.sender_id))
        return
    batch = Batch(command.ids, command.sender_id, target.id, target.name, size, state.wall,
                  command if keep else None)
    _append(state, target, batch)


def relayed(state: State, target: Session, env: dict) -> None:
    """A ``msg`` or ``msgs`` another broker relayed to local ``target`` (a reply to one
    of its messages, or what its old broker kept for it): kept and receipted here."""
    ids = env.get("ids") if env.get("k") == "msgs" else [env.get("id")]
    sender = env.get("from")
    if ids.__class__ is not list or not ids or sender.__class__ is not str or \
            not all(i.__class__ is str for i in ids):
        return
    texts = env.get("messages") if env.get("k") == "msgs" else [env.get("message")]
    size = sum(len(t) for t in texts if t.__class__ is str) + 40 * len(ids)
    _append(state, target, Batch(list(ids), sender, target.id, target.name, size, state.wall,
                                 env=env))


def _append(state: State, target: Session, batch: Batch) -> None:
    kept = target.kept
    if kept is None:
        kept = target.kept = deque()
    kept.append(batch)
    state.receipts.by_id.put_all(batch.ids, value=batch)


def written(state: State, counts: dict[bytes, int]) -> None:
    """The shell wrote to these identities: every batch handed to them so far went out
    before their byte count reached what it is now."""
    by_identity = state.registry.by_identity
    for identity in counts:
        session = by_identity.get(identity)
        if session is None or not session.kept:
            continue
        end = session.sent_bytes
        for batch in reversed(session.kept):
            if batch.end >= 0:
                break
            batch.end = end


# -- the receiver's client reports (hb and bye: broker.core.assembly.reports) ---------------

def reported(state: State, session: Session, env: dict) -> None:
    """What the client of ``session`` says it read (``read``) and saw (``seenThrough``)."""
    if session.kept:
        _read(state, session)
        through = env.get("seenThrough")
        if through.__class__ is str:
            _seen(state, session, through)


def _read(state: State, session: Session) -> None:
    kept, done, read = session.kept, session.kept_read, session.read_bytes
    count = len(kept)
    wall = state.wall
    seen_level = session.keep_until == SEEN
    while done < count:
        batch = kept[done]
        if batch.end < 0 or batch.end > read:
            break
        if batch.read_at is None:
            batch.read_at = wall
        if seen_level:
            session.unseen_bytes += batch.size
        else:
            batch.deliver = batch.env = None    # never sent again: only its receipt stays
        done += 1
    session.kept_read = done
    if not seen_level and done > READ_TRACKED:      # read is their last state we follow
        for _ in range(done - READ_TRACKED):
            kept.popleft()
        session.kept_read = READ_TRACKED


def _seen(state: State, session: Session, through: str) -> None:
    batch = state.receipts.by_id.get(through)
    kept = session.kept
    if batch is None or batch.to_id != session.id or batch not in kept:
        return
    position = batch.ids.index(through) + 1
    wall = state.wall
    seen_level = session.keep_until == SEEN
    while kept:
        first = kept[0]
        last = first is batch
        grown = max(first.seen, position if last else len(first.ids))
        if grown > first.seen:
            first.seen = grown
            if first.seen_steps is None:
                first.seen_steps = []
            first.seen_steps.append((grown, wall))
        if first.read_at is None:
            first.read_at = wall          # seen before its read was reported: it was read
        if first.seen < len(first.ids):
            break
        kept.popleft()
        if session.kept_read > 0:
            session.kept_read -= 1
            if seen_level:
                session.unseen_bytes -= first.size
        if last:
            break


def replied(state: State, session: Session, msg_id: str) -> None:
    """``session`` answered ``msg_id`` (an ask it settled, or a message it replied to)."""
    batch = state.receipts.by_id.get(msg_id)
    if batch is not None and batch.to_id == session.id:
        if batch.replied is None:
            batch.replied = {}
        batch.replied.setdefault(msg_id, state.wall)


# -- the receiver's connection comes and goes --------------------------------------------

def send_again(state: State, session: Session) -> None:
    """``session`` has a new connection (it said hello again, or a client took its id
    back): what its client may not have goes again, in order, after the welcome. A
    queued entry is not among them: its queue hands it over again itself."""
    kept = session.kept
    if not kept:
        return
    start = 0 if session.keep_until == SEEN else session.kept_read
    again = [batch for index, batch in enumerate(kept) if index >= start and batch.kept]
    while len(kept) > start:
        kept.pop()
    kept.extend(again)
    session.kept_read = start
    session.unseen_bytes = 0
    for batch in again:
        batch.end = -1
        backlog.handed(session, batch.size)
        state.stats["receipts.sent_again"] += len(batch.ids) - batch.seen
        state.out.append(Send(session.identity, _unseen_part(batch)))


def _unseen_part(batch: Batch) -> dict:
    """The envelope of ``batch`` without the ids already seen."""
    if batch.env is not None:
        env = batch.env
        if batch.seen and env.get("k") == "msgs":
            env = dict(env, ids=env["ids"][batch.seen:], messages=env["messages"][batch.seen:])
        return env
    command = batch.deliver
    if batch.seen:
        command = replace(command, ids=command.ids[batch.seen:], texts=command.texts[batch.seen:])
    return delivery(command)


def session_left(state: State, event: Any) -> None:
    """A local session ended: its kept messages wait for its client to come back."""
    session = event.session
    kept = session.kept
    if session.broker is not None or not kept:
        return
    start = 0 if session.keep_until == SEEN else session.kept_read
    batches = [b for b in list(kept)[start:] if b.kept]
    session.kept = None
    if not batches:
        return
    receipts = state.receipts
    size = sum(b.size for b in batches)
    old = receipts.parked.pop(session.id, None)
    if old is not None:            # ended twice within the window: one list, in order
        batches = old.batches + batches
        size += old.size
        receipts.parked_bytes -= old.size
    parked = Parked(batches, state.wall + state.limits.reclaim_window_s, size)
    receipts.parked[session.id] = parked
    receipts.parked_bytes += size
    while parked.size > state.limits.max_backlog_bytes and len(parked.batches) > 1:
        _drop_first(state, parked, BOUND_REACHED)
    while receipts.parked_bytes > MAX_KEPT_BYTES and receipts.parked:
        oldest = next(iter(receipts.parked))
        _undeliver_all(state, receipts.parked.pop(oldest), BOUND_REACHED)


def session_opened(state: State, event: Any) -> None:
    """A session opened here with an id whose messages are parked: they are its again."""
    session = event.session
    parked = state.receipts.parked.pop(session.id, None)
    if parked is None:
        return
    state.receipts.parked_bytes -= parked.size
    state.stats["receipts.taken_back"] += 1
    kept = session.kept
    if kept is None:
        kept = session.kept = deque()
    kept.extendleft(reversed(parked.batches))
    for batch in parked.batches:
        batch.to_name = session.name
    session.kept_read = 0
    send_again(state, session)


def moved_to(state: State, session_id: str, broker_id: str) -> None:
    """The session ``session_id`` is held by ``broker_id`` now: what is parked for it here
    is relayed there, where its client gets it and its receipts are kept from now on."""
    parked = state.receipts.parked.pop(session_id, None)
    if parked is None:
        return
    state.receipts.parked_bytes -= parked.size
    state.stats["receipts.handed_over"] += 1
    envs = []
    for batch in parked.batches:
        batch.moved_to = broker_id
        envs.append(envelopes.relay(session_id, _unseen_part(batch)))
    state.out.append(LinkSend(broker_id, envs))


def expire(state: State) -> None:
    """Parked messages whose window passed (by the wall clock) are reported undelivered."""
    now = state.wall
    parked = state.receipts.parked
    while parked:
        session_id = next(iter(parked))
        if parked[session_id].until > now:
            return
        entry = parked.pop(session_id)
        state.receipts.parked_bytes -= entry.size
        _undeliver_all(state, entry, None)


def _drop_first(state: State, parked: Parked, reason: str) -> None:
    batch = parked.batches.pop(0)
    parked.size -= batch.size
    state.receipts.parked_bytes -= batch.size
    _undeliver(state, batch, reason)


def _undeliver_all(state: State, parked: Parked, reason: str | None) -> None:
    for batch in parked.batches:
        _undeliver(state, batch, reason)


def _undeliver(state: State, batch: Batch, reason: str | None) -> None:
    """Every id of ``batch`` not seen never reached its receiver: its sender is told once."""
    if batch.undelivered_from is not None or batch.seen >= len(batch.ids):
        return
    why = reason or (NEVER_SEEN if batch.read_at is not None else SESSION_ENDED)
    batch.undelivered_from, batch.undelivered_at, batch.reason = batch.seen, state.wall, why
    state.stats[f"receipts.undelivered.{why}"] += len(batch.ids) - batch.seen
    state.note("messages_undelivered", to=batch.to_id, sender=batch.sender_id,
               count=len(batch.ids) - batch.seen, reason=why)
    sender = state.registry.by_id.get(batch.sender_id)
    if sender is None:
        return
    for msg_id in batch.ids[batch.seen:]:
        state.out.append(Send(sender.identity,
                              envelopes.undelivered(msg_id, batch.to_id, batch.to_name, why)))


# -- the sender asks ---------------------------------------------------------------------

def message_status(state: State, session: Session, msg_id: str,
                   env: dict) -> dict[str, Any] | None:
    """The ``status`` action with ``messageId``: that message's receipt, for its sender
    only; None when the broker its receiver moved to answers instead.
    Raises BusError(unknown_message)."""
    batch = state.receipts.by_id.get(msg_id)
    if batch is None and state.gate.receipts:
        held = gate.receipt(state, session, msg_id)      # held, dropped or expired
        if held is not None:
            return held
    if batch is None or batch.sender_id != session.id or \
            state.wall - batch.delivered_at > RECEIPT_KEEP_S:
        raise BusError("unknown_message", message_id=msg_id)
    if batch.moved_to is not None:
        # Its receiver moved on with it: the broker holding it now answers (to the
        # asker's broker, over the link, as for any forwarded request).
        state.out.append(LinkSend(batch.moved_to, [envelopes.forward(session.id, env)]))
        return None
    answer = receipt(batch, msg_id)
    if state.gate.receipts:
        gate.released(state, answer)
    return answer


def receipt(batch: Batch, msg_id: str) -> dict[str, Any]:
    """The receipt of ``msg_id``, one of ``batch``'s ids."""
    index = batch.ids.index(msg_id)
    seen_at = next((at for count, at in batch.seen_steps if count > index), None) \
        if index < batch.seen and batch.seen_steps else None
    replied_at = batch.replied.get(msg_id) if batch.replied else None
    gone = batch.undelivered_from is not None and index >= batch.undelivered_from
    state = ("undelivered" if gone else "replied" if replied_at is not None else
             "seen" if seen_at is not None else "read" if batch.read_at is not None else
             "delivered")
    return {"messageId": msg_id, "state": state, "to": batch.to_id, "toName": batch.to_name,
            "deliveredAt": batch.delivered_at, "readAt": batch.read_at, "seenAt": seen_at,
            "repliedAt": replied_at, "undeliveredAt": batch.undelivered_at if gone else None,
            "reason": batch.reason if gone else None}
