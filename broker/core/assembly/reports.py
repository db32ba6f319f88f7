"""A client's reports, and a sender's question about a message, as use cases across the
rooms.

``hb`` and ``bye`` say two things at once: that the session is alive or ends (the
sessions room's: :mod:`broker.core.sessions.connect`) and what its client has read and
seen (messaging's receipts: :mod:`broker.core.messaging.receipts`). The ``status``
action is either a session's own status (:mod:`broker.core.sessions.membership`) or,
with ``messageId``, a message's receipt. The rooms keep their parts; the order of the
steps is here, above both.
"""

from __future__ import annotations

from typing import Any

from broker.core.kernel.state import State
from broker.core.messaging import receipts
from broker.core.sessions import backlog, connect, membership
from broker.core.sessions.registry import Session


def heartbeat(state: State, session: Session, env: dict, re: str | None, now: float) -> None:
    """``hb``: liveness and the bytes read first, then what that read and seen settle."""
    connect.heartbeat(state, session, env, re, now)
    receipts.reported(state, session, env)


def bye(state: State, session: Session, env: dict, re: str | None, now: float) -> None:
    """``bye``: the last reports, then the session ends (what is still kept is parked)."""
    backlog.report_read(session, env.get("read"))
    receipts.reported(state, session, env)
    connect.bye(state, session, env, re, now)


def status(state: State, session: Session, params: dict, re: str, now: float,
           env: dict) -> dict[str, Any] | None:
    """The ``status`` action: with ``messageId``, that message's receipt; without it,
    the session's status. Raises BusError(unknown_message)."""
    msg_id = params.get("messageId")
    if msg_id is None:
        return membership.status(state, session, params, re, now, env)
    return receipts.message_status(state, session, msg_id, env)
