"""Asks: opening them, the supervisor path, ``pending``, and every way one ends.

An ask is a message whose sender waits for one correlated reply (see
:mod:`broker.core.messaging.ask_table` for the table and its invariants, :mod:`broker.core.messaging.replies`
for settlement by reply). This module opens asks and settles them by error: the
target leaving or turning terminal, or the deadline passing. Each refusal is also
remembered under the ask's id, so a retried ask gets the same answer.
"""

from __future__ import annotations

from schemas.errors import BusError
from schemas.limits import MAX_ASK_TIMEOUT_S
from schemas.names import TERMINAL

from broker.core.sessions import backlog
from broker.core.messaging import inbound_gate
from broker.core.messaging.ask_cycles import refuse_cycle
from broker.core.messaging.ask_table import Ask
from broker.core.messaging.delivery import deliver
from broker.core.sessions.registry import Session
from broker.core.kernel.lifecycle import SessionLeft
from broker.core.kernel.state import State


def open_ask(state: State, asker: Session, target: Session, ask_id: str, message: str,
             attachments: list, timeout_s: float | None, now: float, *,
             supervisor: bool, extra: dict | None = None) -> None:
    """Admit an ask and deliver it. Raises BusError(ask_cycle | terminal_child |
    target_backlogged | too_many_asks | supervisor_busy)."""
    refuse_cycle(state, asker, target)
    if target.reply_capability == TERMINAL:
        raise BusError("terminal_child")
    backlog.check(state, target)
    limits = state.limits
    state.asks.check_capacity(asker, supervisor, limits.max_pending_asks)
    # A per-call timeout may exceed the default; MAX_ASK_TIMEOUT_S bounds both.
    timeout_s = min(float(timeout_s) if timeout_s else limits.ask_timeout_s, MAX_ASK_TIMEOUT_S)
    carried = state.asks.carried if asker.broker is not None else ()
    state.asks.open(Ask(ask_id, asker, target, message, now, now + timeout_s, supervisor,
                        waited_by=carried))
    extra = {**(extra or {}), "timeoutS": timeout_s}
    if supervisor:
        extra["supervisor"] = True
    deliver(state, asker.id, asker.name, target, ask_id, message, attachments, state.wall,
            expects_reply=True, extra=extra)


def pending_rows(state: State, session: Session, now: float) -> list[dict]:
    return [ask.row(now) for ask in state.asks.pending_for(session)]


def set_capability(state: State, session: Session, capability: str) -> None:
    session.reply_capability = capability
    if capability == TERMINAL:
        for ask in state.asks.to_target(session):
            settle_error(state, ask, BusError("terminal_child"))


def settle_error(state: State, ask: Ask, error: BusError) -> None:
    state.settle(ask.asker, ask.id, error)
    state.stats["asks.settled"] += 1
    _nobody_waits(state, ask)


def _nobody_waits(state: State, ask: Ask) -> None:
    """``ask`` ended unanswered: if a person still holds it for its target, it leaves
    their list (a release would hand over a question nobody waits for)."""
    if state.gate.held:
        inbound_gate.ask_ended(state, ask.target.id, ask.id)


def session_gone(state: State, session: Session) -> None:
    """Asks to ``session`` fail; its own asks are dropped with it."""
    for ask in state.asks.to_target(session):
        settle_error(state, ask, BusError("peer_disconnected", name=session.name))
    for ask in state.asks.from_asker(session):
        _nobody_waits(state, ask)
    state.recent.pop(session.id, None)
    state.answered.pop(session.id, None)


def expire(state: State, now: float) -> None:
    for ask in state.asks.expire(now):
        settle_error(state, ask, BusError("ask_timeout", timeout_s=ask.deadline_at - ask.sent_at))


def session_left(state: State, event: SessionLeft) -> None:
    """Lifecycle listener: see :func:`session_gone`."""
    session_gone(state, event.session)
