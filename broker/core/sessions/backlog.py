"""How far each session's client is behind in reading what the broker sent it.

The shell reports the bytes it wrote to each routing identity (:func:`wrote`, from
``Engine.wrote``); the client reports in its heartbeats the bytes it has read since
its last ``hello`` (``hb.read``). The difference is the session's backlog: frames in
the broker's socket buffers, the kernel's, and the client's unread inbox.

Rules (the limit is ``Limits.max_backlog_bytes``):

* past the limit, a send or ask to the session is refused with ``target_backlogged``
  before anything is delivered, so nothing a sender was told ``delivered`` is dropped;
* past twice the limit (the client still is not reading while answers and events
  keep coming), the session is disconnected as not reading, which bounds what the
  broker holds for it;
* both counters start at 0 when a session gets its connection (``hello``, a
  reattach); a report is clamped to what was sent, so a client can only make its
  backlog look larger, never hide one.
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
            if session.sent_bytes - session.read_bytes > hard:
                over.append(session)
    return over


def report_read(session: Session, read: object) -> None:
    """The client's count of bytes read on this connection (``hb.read``)."""
    if read.__class__ is int and read > session.read_bytes:
        session.read_bytes = min(read, session.sent_bytes)


def restart(session: Session) -> None:
    """A new connection: nothing is in flight on it yet."""
    session.sent_bytes = session.read_bytes = 0


def check(state: State, target: Session) -> None:
    """Raises BusError(target_backlogged) when ``target`` is past the limit."""
    unread = target.sent_bytes - target.read_bytes
    if unread > state.limits.max_backlog_bytes:
        state.stats["backlog.refused"] += 1
        raise BusError("target_backlogged", name=target.name, size=unread,
                       limit=state.limits.max_backlog_bytes)
