"""How far each session's client is behind in reading what the broker sent it.

The shell reports the bytes it wrote to each routing identity (:func:`wrote`, from
``Engine.wrote``); the client reports in its heartbeats the bytes it has read since
its last ``hello`` (``hb.read``). The difference is the session's backlog: frames in
the broker's socket buffers, the kernel's, and the client's unread inbox.

Rules (the limit is ``Limits.max_backlog_bytes``):

* past the limit, a send or ask to the session is refused with ``target_backlogged``
  before anything is delivered, so nothing a sender was told ``delivered`` is dropped;
  what was handed to it earlier in the same round counts too (:func:`handed`), and
  a pipelined run is admitted only while it fits (the first item always, as a single
  send), so many senders in one round cannot take it far past the limit;
* past twice the limit (the client still is not reading while answers and events
  keep coming), the session is disconnected as not reading, which bounds what the
  broker holds for it;
* both counters start at 0 when a session gets its connection (``hello``, a
  reattach); a report is clamped to what was sent, so a client can only make its
  backlog look larger, never hide one.

Pipelined sends (``sends``) meet the limit as a wait, not a loss: their refusal is
not remembered against their ids, so the client sends the same ids again once the
target has read (client.protocol holds them). Order is kept by a *latch* per
sender and target: the first pipelined id refused is noted, and every later
pipelined send from that sender to that target is refused too until an envelope
starting with that id comes again (:func:`check_latch`), so nothing sent after a
refused message overtakes it. A latch nobody comes back for (the client gave up)
lapses after ``LATCH_S``.
"""

from __future__ import annotations

from schemas.errors import BusError

from broker.core.sessions.registry import Session
from broker.core.kernel.state import State


def wrote(state: State, counts: dict[bytes, int]) -> list[Session]:
    """Count bytes written per identity; the sessions now past twice the limit."""
    by_identity = state.registry.by_identity
    hard = 2 * state.limits.max_backlog_bytes
    over: list[Session] = []
    for identity, size in counts.items():
        session = by_identity.get(identity)
        if session is not None:
            session.sent_bytes += size
            session.pending_bytes = 0
            if session.sent_bytes - session.read_bytes > hard:
                over.append(session)
    return over


def report_read(session: Session, read: object) -> None:
    """The client's count of bytes read on this connection (``hb.read``)."""
    if read.__class__ is int and read > session.read_bytes:
        session.read_bytes = min(read, session.sent_bytes)


def restart(session: Session) -> None:
    """A new connection: nothing is in flight on it yet."""
    session.sent_bytes = session.read_bytes = session.pending_bytes = 0


# Longer than any envelope stays in flight behind a refused one; short enough that a
# sender that gave up on a target is not refused long for the ids it never resends.
LATCH_S = 2.0
MAX_LATCHES = 64               # targets latched per sender at once (oldest dropped)


def latch(sender: Session, to: str, first_id: str, error: BusError, now: float) -> None:
    """``sender``'s pipelined sends to ``to`` were refused from ``first_id`` on."""
    latches = sender.latches
    if latches is None:
        latches = sender.latches = {}
    elif len(latches) >= MAX_LATCHES and to not in latches:
        del latches[next(iter(latches))]
    latches[to] = (first_id, now, error)


def latched(sender: Session, to: str) -> bool:
    return bool(sender.latches) and to in sender.latches


def check_latch(sender: Session, to: str, first_id: str, now: float) -> None:
    """A pipelined envelope from ``sender`` to ``to`` starting with ``first_id``:
    refused while an earlier refused id has not come again; the latch opens for it.
    Raises BusError(target_backlogged)."""
    held = sender.latches.get(to)
    if held is None:
        return
    if held[0] != first_id and now - held[1] < LATCH_S:
        raise held[2]
    del sender.latches[to]


# What a delivered plain message costs on the wire beyond its text (its id and the
# msgpack framing), for the estimate of a round's deliveries (``pending_bytes``).
ITEM_BYTES = 40


def text_bytes(texts: list[str]) -> int:
    """The UTF-8 size of ``texts`` (what they take on the wire), cheaply for ASCII."""
    size = sum(map(len, texts))
    if all(map(str.isascii, texts)):
        return size
    return sum(len(t.encode("utf-8", "surrogatepass")) for t in texts)


def handed(target: Session, size: int) -> None:
    """``size`` bytes of messages were handed to ``target`` this round: they count as
    unread before the shell has written them (:func:`wrote` replaces the estimate)."""
    if target.broker is None:          # a mirror's backlog is kept by its own broker
        target.pending_bytes += size


def unread(target: Session) -> int:
    """Bytes sent and not read yet, and (keep_until "seen") read and not seen yet."""
    return target.sent_bytes + target.pending_bytes - target.read_bytes + target.unseen_bytes


def room(state: State, target: Session) -> int:
    """Bytes ``target`` may still be handed before it is past the limit."""
    return state.limits.max_backlog_bytes - unread(target)


def refusal(state: State, target: Session, room_left: int = 0) -> BusError:
    """The ``target_backlogged`` refusal; ``room_left`` below 0: what a run being
    admitted would have added."""
    state.stats["backlog.refused"] += 1
    limit = state.limits.max_backlog_bytes
    return BusError("target_backlogged", name=target.name,
                    size=max(unread(target), limit - room_left), limit=limit)


def check(state: State, target: Session) -> None:
    """Raises BusError(target_backlogged) when ``target`` is past the limit."""
    if unread(target) > state.limits.max_backlog_bytes:
        raise refusal(state, target)
