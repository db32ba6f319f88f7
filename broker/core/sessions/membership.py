"""The membership actions of the intercom tool: groups, join, leave, status (``list``
is broker.core.workflow.run_listing.list_sessions: its rows include runs).

Membership changes are the only writes here; each one goes through
:func:`change_groups`, so presence can never drift from the registry. ``group`` on
``list`` and ``status`` is a read-only filter (:func:`~broker.core.sessions.authority.peek`): it
never changes what the caller may message, and never shows an isolated workflow group.
"""

from __future__ import annotations

from typing import Any

from schemas.errors import BusError
from schemas.groups import clean_group

from broker.core.sessions.authority import check_join, peek, visible_to
from broker.core.sessions.presence import membership_changed
from broker.core.sessions.registry import Session
from broker.core.kernel.state import State


def list_groups(state: State, session: Session, params: dict, re: str, now: float,
                 env: dict) -> dict[str, Any]:
    rows = [{"name": name, "sessions": len(ids), "member": name in session.groups}
            for name, ids in sorted(state.registry.by_group.items())]
    return {"groups": rows, "memberships": list(session.groups)}


def join(state: State, session: Session, params: dict, re: str, now: float,
                 env: dict) -> dict[str, Any]:
    """Raises BusError(missing_param | invalid_group | reserved_group | workflow_different_group)."""
    if "group" not in params:
        raise BusError("missing_param", action="join", param="group")
    group = clean_group(params["group"])
    check_join(state, session, group)
    if group not in session.groups:
        change_groups(state, session, [*session.groups, group])
    return {"groups": list(session.groups), "joined": group}


def leave(state: State, session: Session, params: dict, re: str, now: float,
                 env: dict) -> dict[str, Any]:
    """Raises BusError(not_member | last_group)."""
    if "group" not in params:
        change_groups(state, session, [session.home_group])
        return {"groups": list(session.groups), "reset": True}
    group = params["group"].strip()
    if group not in session.groups:
        raise BusError("not_member", group=group)
    remaining = [g for g in session.groups if g != group]
    if not remaining:
        raise BusError("last_group", group=group)
    change_groups(state, session, remaining)
    return {"groups": list(session.groups), "left": group}


def status(state: State, session: Session, params: dict, re: str, now: float,
                 env: dict) -> dict[str, Any]:
    group = params.get("group")
    if group is not None:
        group = group.strip()
        visible = len(peek(state, session, group))
    else:
        visible = len(visible_to(state, session))
    others = state.cluster.live_count(state.wall)
    result = {
        "connected": True,
        "sessionId": session.id,
        "name": session.name,
        "status": session.status_text,
        "groups": list(session.groups),
        "homeGroup": session.home_group,
        "visibleSessions": visible,
        "broker": {
            "id": state.broker_id,
            "routing": "multi-node" if others else "single-node",
            "otherBrokersLive": others,
        },
    }
    warnings = state.warnings + list(state.cluster.unlinked.values())
    if warnings:
        result["broker"]["warnings"] = warnings
    if group is not None:
        result["group"] = group
    return result


def room_for(state: State, session: Session, more: int = 1) -> None:
    """``session`` may gain ``more`` groups. Raises BusError(too_many_groups)."""
    if len(session.groups) + more > state.limits.max_groups:
        raise BusError("too_many_groups", limit=state.limits.max_groups)


def change_groups(state: State, session: Session, groups: list[str]) -> None:
    """The one write of memberships. Raises BusError(too_many_groups) when it would
    grow past the bound (shrinking is always allowed)."""
    if len(groups) > len(session.groups):
        room_for(state, session, len(groups) - len(session.groups))
    before = set(session.groups)
    state.registry.set_groups(session, groups)
    membership_changed(state, session, before, set(session.groups))
