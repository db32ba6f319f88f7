"""``overview``: every session and workflow run this broker holds, for its operator.

Read-only, and only for a control connection that is the broker's operator (see
:mod:`broker.core.sessions.acting`): it shows every group, where ``list`` shows what one
member may see. Control connections are left out (they are nobody's peer); sessions
other brokers hold (mirrors) are in, with their ``broker``.
"""

from __future__ import annotations


from schemas.errors import BusError

from broker.core.workflow.run_listing import run_row
from broker.core.sessions.registry import Session
from broker.core.kernel.state import State


def overview(state: State, session: Session, env: dict, re: str, now: float) -> None:
    """Raises BusError(operator_only)."""
    if not (session.is_control and session.operator):
        raise BusError("operator_only", what="overview (every session and run)")
    rows = []
    for one in sorted(state.registry.by_id.values(), key=lambda s: s.connected_at):
        if not one.is_control:
            rows.append({**one.public(), "homeGroup": one.home_group, "broker": one.broker})
    runs = [run_row(state, run) for run in state.runs.values()]
    state.answer(session, re, {"brokerId": state.broker_id, "sessions": rows, "workflows": runs})
