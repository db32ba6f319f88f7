"""Control connections: a look at the bus and one-shot calls, for the command line and tools.

A ``hello`` with ``sessionKind: "control"`` opens a control connection. The whole
rule is here:

* **Nobody's peer.** The registry finds it by id and routing identity only
  (:mod:`broker.core.sessions.registry`): no other session lists it, ``groups`` does not count
  it, presence never mentions it (no ``session_joined``/``session_left``, nothing on
  PUB), other brokers are never told of it, and a send or ask naming it, even by its
  full id, is ``target_not_found`` like any unknown target.
* **Never a conversation, stage or child.** A hello naming ``agent``, ``channel``,
  ``stage``, ``parent`` or ``grant`` is refused (``bad_envelope``), so it never takes
  an invocation and never becomes an agent's ``last``. Nothing of the connection is
  written to the store; it takes back no id (each control hello gets a fresh one).
* **What it may do.** It sees as a member of its home group (resolved as any
  session's, and no more than a member may see). It makes exactly the requests of
  :data:`CONTROL_KINDS`; of the intercom calls, those of :data:`OWN_ACTIONS` as
  itself: ``list``, ``groups`` and ``status`` (with the read-only ``group`` filter),
  and ``send`` and ``ask`` from its home group (an ask's reply comes back to it, a
  session on another broker is refused ``control_other_broker``: nobody there knows
  the sender). Nobody can message it, so a send from it cannot be answered
  after it is gone, only an ask while it waits. The calls of :data:`ACTING_ACTIONS`
  (``reply``, ``pending``, ``join``, ``leave``) are about a session's own asks and
  memberships, which a control connection has none of: it makes them only for the
  live session it proved in its hello (:mod:`broker.core.sessions.acting`), else they are
  refused ``act_for_needed``. ``sessions`` of a named agent (the ``agent`` field,
  which only a control connection may give), ``stats`` (which only a control
  connection may ask: :func:`require`) and, for the broker's operator, ``overview``
  read too. Anything else (respond, invoke, workflow, grant,
  supervisor, sends, ...) is refused ``control_read_only``: it needs a session.

A control connection still counts against the broker's session bounds and the
new-session rate, and is expired when silent, like any session. When it goes, its
open asks go with it.
"""

from __future__ import annotations

import hmac
from typing import Any

from schemas.agent_config import safe_agent_name
from schemas.errors import BusError
from schemas.groups import clean_group, resolve_home_group
from schemas.limits import MAX_AGENT_CHARS
from schemas.names import ACTING_ACTIONS, CONTROL, CONTROL_ACTIONS

from broker.core.sessions import acting
from broker.core.kernel.lifecycle import ControlLeft, emit
from broker.core.sessions.authority import check_claimed
from broker.core.sessions.registry import Session
from broker.core.kernel.state import State

CONTROL_KINDS = frozenset({"call", "sessions", "overview", "stats", "end_run", "inbound", "hb", "bye"})
OWN_ACTIONS = frozenset(CONTROL_ACTIONS)          # of ``call``, as itself
ACTS_FOR = frozenset(ACTING_ACTIONS)              # of ``call``, for the session it acts for
_NOT_FOR_CONTROL = ("agent", "channel", "stage", "parent", "grant", "inbound")


def check_request(kind: str, env: dict[str, Any]) -> None:
    """A control connection may make this request. Raises BusError(control_read_only)."""
    if kind not in CONTROL_KINDS:
        raise BusError("control_read_only", what=f"{kind!r}")
    if kind == "call":
        action = env.get("action")
        if action not in OWN_ACTIONS and action not in ACTS_FOR:
            raise BusError("control_read_only", what=f"intercom {action!r}")


def actor(state: State, session: Session, action: str) -> Session:
    """Who a control connection's intercom ``action`` is made as: itself, or the
    session it acts for. Raises BusError(act_for_needed | act_for_refused)."""
    if action in ACTS_FOR:
        return acting.acted_for(state, session, action)
    return session


def open_control(state: State, identity: bytes, env: dict[str, Any], now: float, name: str,
                 peer: str) -> Session:
    """The control connection a hello opens (the caller answers with the welcome).

    Raises BusError(bad_envelope | invalid_group | reserved_group | workflow_different_group
    | act_for_refused).
    """
    named = [field for field in _NOT_FOR_CONTROL if env.get(field) is not None]
    if named:
        raise BusError("bad_envelope", detail="a control connection is no agent conversation, "
                       f"stage or child: drop {', '.join(named)}")
    home = clean_group(env.get("homeGroup") or resolve_home_group(
        explicit=env.get("group"), config=env.get("fallbackGroup")))
    check_claimed([home], home, False)
    acts_for = acting.proven(state, env)
    earlier = state.registry.by_id.get(env.get("sessionId") or "")
    token = env.get("token")
    if earlier is not None and earlier.is_control and isinstance(token, str) \
            and hmac.compare_digest(token, earlier.token):
        close(state, earlier)       # its client came back on a new connection
    session = Session(
        id=state.new_id(), name=name, identity=identity, token=state.new_token(),
        home_group=home, groups={home: None}, kind=CONTROL,
        status_suffix=env.get("statusSuffix"), connected_at=now, connected_wall=state.wall,
        last_seen_at=now, peer=peer, acts_for=acts_for,
        acts_for_token=env.get("actForToken") if acts_for else None,
        operator=acting.on_own_host(state))
    state.registry.add(session)
    state.stats["sessions.control_opened"] += 1
    return session


def close(state: State, session: Session) -> None:
    """A control connection's departure: it leaves without a trace; its asks end."""
    state.registry.remove(session)
    emit(state, ControlLeft(session))
    state.stats["sessions.control_closed"] += 1


def require(session: Session, what: str) -> None:
    """Refuse a request only control connections may make. Raises BusError(control_only)."""
    if not session.is_control:
        raise BusError("control_only", what=what)


def listed_agent(session: Session, env: dict[str, Any]) -> str | None:
    """Whose conversations ``sessions`` lists: the named agent for a control
    connection, None (the caller's own agent) for any other session.

    Raises BusError(control_only | missing_param | invalid_agent).
    """
    agent = env.get("agent")
    if not session.is_control:
        if agent is not None:
            raise BusError("control_only", what="sessions of a named agent")
        return None
    if agent is None:
        raise BusError("missing_param", action="sessions", param="agent")
    if not safe_agent_name(agent):
        raise BusError("invalid_agent", agent=agent, limit=MAX_AGENT_CHARS)
    return agent
