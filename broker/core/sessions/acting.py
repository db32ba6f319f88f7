"""What a control connection may do beyond reading: act for a session, see the whole bus.

Both are decided once, at the control connection's hello, and kept on its session:

* **Acting for a session.** A hello with ``actFor`` (a session id) and
  ``actForToken`` (that session's reclaim secret, from its
  ``intercom_session_identity`` history entry) lets the control connection make the
  calls of :data:`~schemas.names.ACTING_ACTIONS` (``reply``, ``pending``, ``join``,
  ``leave``) as that session: the secret is what a reclaim proves, so whoever may
  take the id back may also answer its asks and move its memberships. The session
  must be live and held here (not a mirror, not a control connection), at the hello
  and again at every call; otherwise the call is refused ``act_for_refused``. The
  answer goes to the control connection; a membership change is also told to the
  session itself (event ``memberships_changed``), so its client states the new set
  after a reconnect instead of undoing it.
* **The operator.** A control connection from this broker's own host (the ROUTER
  serves ipc, or its TCP peer is a loopback address) or one whose CURVE key is the
  broker's own may ask for the ``overview`` (every session and run held here).
  With CURVE, only the broker's key counts: the peer's address is then not known.
"""

from __future__ import annotations

import hmac
import ipaddress
from typing import Any

from schemas import envelopes
from schemas.errors import BusError
from schemas.names import MEMBERSHIPS_CHANGED

from broker.core.kernel.commands import Send
from broker.core.sessions.registry import Session
from broker.core.kernel.state import State

_USER_ID, _ADDRESS = "User-Id=", "Peer-Address="


def proven(state: State, env: dict[str, Any]) -> str | None:
    """The id a control hello acts for (None: it acts for nobody).

    Raises BusError(act_for_refused) when no live local session has that id and secret.
    """
    session_id = env.get("actFor")
    if session_id is None:
        return None
    _live(state, session_id, env.get("actForToken"))
    return session_id


def acted_for(state: State, control: Session, action: str) -> Session:
    """The session a control connection's ``action`` is made for.

    Raises BusError(act_for_needed | act_for_refused)."""
    if control.acts_for is None:
        raise BusError("act_for_needed", action=action)
    return _live(state, control.acts_for, control.acts_for_token)


def acted(state: State, session: Session, action: str, answer: dict[str, Any]) -> None:
    """After a control connection's ``action`` for ``session``: a membership change
    is told to the session itself."""
    if action in ("join", "leave") and isinstance(answer.get("groups"), list):
        state.out.append(Send(session.identity, envelopes.event(
            MEMBERSHIPS_CHANGED, groups=list(session.groups))))


def on_own_host(state: State) -> bool:
    """Whether the peer of the current input (a hello) is this broker's operator."""
    peer = state.peer
    if peer.startswith(_USER_ID):
        own = state.cluster.curve_public
        return bool(own) and hmac.compare_digest(peer[len(_USER_ID):], own)
    if not peer.startswith(_ADDRESS):
        return False
    if not state.peer_is_address:
        return True            # ipc: only processes of this host reach the socket
    address = peer[len(_ADDRESS):].strip("[]")
    try:
        return ipaddress.ip_address(address.removeprefix("::ffff:")).is_loopback
    except ValueError:
        return False


def _live(state: State, session_id: object, token: object) -> Session:
    session = state.registry.by_id.get(session_id) if session_id.__class__ is str else None
    if session is None or session.broker is not None or session.is_control \
            or token.__class__ is not str or not hmac.compare_digest(token, session.token):
        raise BusError("act_for_refused", id=session_id)
    return session
