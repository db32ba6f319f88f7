"""The ``inbound`` kind: a session's gate, set and settled by the session or its person.

The session itself sends it, or a control connection acting for it (``actFor`` with
its reclaim secret: ``python -m client inbound``, ``held``, ``release``, ``drop``),
which is how the person at the terminal decides. Ops:

* ``policy``: set ``accept``, ``hold`` or ``refuse``; the row changes (presence tells
  who can see it), and a change made by a control connection is told to the session
  (event ``inbound_changed``), so its client states it again after a reconnect.
  Messages held already stay held until released or dropped.
* ``held``: the held messages, oldest first (:meth:`~broker.core.messaging.inbound_gate.Held.row`).
* ``release`` / ``drop``: one held message by ``messageId``, or ``all``. A released
  message is delivered as it would have been; a dropped ask fails for its asker
  (``held_dropped``). Each sender hears ``held_settled``.
"""

from __future__ import annotations

from typing import Any

from schemas import envelopes
from schemas.attention import INBOUND_CHANGED, INBOUND_POLICIES, inbound_policy
from schemas.errors import BusError

from broker.core.kernel.commands import Send
from broker.core.kernel.state import State
from broker.core.messaging import inbound_gate as gate
from broker.core.messaging.ask_actions import settle_error
from broker.core.messaging.delivery import release
from broker.core.sessions import acting
from broker.core.sessions.presence import status_changed
from broker.core.sessions.registry import Session

OPS = ("policy", "held", "release", "drop")


def inbound(state: State, session: Session, env: dict, re: str, now: float) -> None:
    """Handle an ``inbound`` request. Raises BusError(bad_envelope | invalid_params |
    unknown_held | act_for_needed | act_for_refused)."""
    op = env.get("op")
    if op not in OPS:
        raise BusError("bad_envelope", detail=f"op must be one of {', '.join(OPS)}")
    target = acting.acted_for(state, session, "inbound") if session.is_control else session
    if op == "policy":
        answer = _set_policy(state, target, env.get("policy"), by_person=target is not session)
    elif op == "held":
        rows = [held.row() for held in state.gate.held.get(target.id, {}).values()]
        answer = {"policy": target.inbound, "held": rows}
    else:
        answer = _settle(state, target, op, env)
    state.answer(session, re, answer)


def _set_policy(state: State, target: Session, policy: Any, by_person: bool) -> dict[str, Any]:
    if policy not in INBOUND_POLICIES:
        raise BusError("invalid_params",
                       detail=f"policy must be one of {', '.join(INBOUND_POLICIES)}")
    if policy != target.inbound:
        target.inbound = inbound_policy(policy)
        state.note("inbound_policy", session=target.id, policy=policy, by_person=by_person)
        status_changed(state, target)
        if by_person:
            state.out.append(Send(target.identity, envelopes.event(INBOUND_CHANGED, policy=policy)))
    return {"policy": target.inbound, "held": state.gate.count(target.id)}


def _settle(state: State, target: Session, op: str, env: dict) -> dict[str, Any]:
    if env.get("all") is True:
        taken = gate.take_all(state, target.id)
    else:
        msg_id = env.get("messageId")
        if msg_id.__class__ is not str or not msg_id:
            raise BusError("invalid_params", detail="give messageId, or all: true")
        taken = [gate.take_one(state, target.id, msg_id)]
    for held in taken:
        if op == "release":
            release(state, target, held)
            gate.settle(state, held, gate.RELEASED)
        else:
            _drop(state, held)
    done = "released" if op == "release" else "dropped"
    return {done: [held.msg_id for held in taken], "held": state.gate.count(target.id)}


def _drop(state: State, held: gate.Held) -> None:
    gate.settle(state, held, gate.DROPPED)
    ask = state.asks.by_id.get(held.msg_id) if held.expects_reply else None
    if ask is not None:          # its asker would wait out its timeout for nothing
        state.asks.close(ask)
        settle_error(state, ask, BusError("held_dropped", name=ask.target.name))
