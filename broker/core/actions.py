"""The read and membership actions of the intercom tool: list, groups, join, leave, status.

Membership changes are the only writes here; each one goes through
:func:`~broker.core.presence.membership_changed` so presence can never drift from
the registry. ``group`` on ``list`` and ``status`` is a read-only filter: it never
changes what the caller may message.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from schemas.errors import BusError
from schemas.groups import clean_group
from schemas.tools import INTERCOM_SCHEMA, intercom_params_ok, intercom_params_problem

from .presence import membership_changed
from .sessions import Session

if TYPE_CHECKING:
    from .engine import Engine

_PARAMS = frozenset(INTERCOM_SCHEMA["properties"])
_ENVELOPE = frozenset({"v", "k", "id", "currentTurn", "quiet"})


def tool_params(env: dict) -> dict[str, Any]:
    """The intercom parameters of a call envelope, checked against the tool schema.

    Handlers only read parameter keys, so a plainly valid envelope is returned as is.
    Raises BusError(invalid_params | invalid_attachment).
    """
    if intercom_params_ok(env, _ENVELOPE):
        return env
    params = {k: v for k, v in env.items() if k not in _ENVELOPE}
    problem = intercom_params_problem(params)
    if problem:
        raise BusError(problem[0], **problem[1])
    return params


def install(engine: Engine) -> None:
    registry = engine.registry

    def list_sessions(session: Session, env: dict, re: str, now: float) -> dict:
        params = tool_params(env)
        group = params.get("group")
        if group is not None:
            group = group.strip()
            rows = [s for s in registry.members(group) if s is not session]
            rows.sort(key=lambda s: (s.connected_at, s.id))
        else:
            rows = registry.visible_to(session)
        result = {"self": session.public(), "sessions": [s.public() for s in rows]}
        if group is not None:
            result["group"] = group
        result.update(engine.workflows.list_extras(session))
        return result

    def list_groups(session: Session, env: dict, re: str, now: float) -> dict:
        tool_params(env)
        rows = [{"name": name, "sessions": len(ids), "member": name in session.groups}
                for name, ids in sorted(registry.by_group.items())]
        return {"groups": rows, "memberships": list(session.groups)}

    def join(session: Session, env: dict, re: str, now: float) -> dict:
        params = tool_params(env)
        if "group" not in params:
            raise BusError("missing_param", action="join", param="group")
        group = clean_group(params["group"])
        engine.workflows.check_join(session, group)
        if group not in session.groups:
            change_groups(engine, session, [*session.groups, group])
        return {"groups": list(session.groups), "joined": group}

    def leave(session: Session, env: dict, re: str, now: float) -> dict:
        params = tool_params(env)
        if "group" not in params:
            change_groups(engine, session, [session.home_group])
            return {"groups": list(session.groups), "reset": True}
        group = params["group"].strip()
        if group not in session.groups:
            raise BusError("not_member", group=group)
        remaining = [g for g in session.groups if g != group]
        if not remaining:
            raise BusError("last_group", group=group)
        change_groups(engine, session, remaining)
        return {"groups": list(session.groups), "left": group}

    def status(session: Session, env: dict, re: str, now: float) -> dict:
        params = tool_params(env)
        group = params.get("group")
        if group is not None:
            group = group.strip()
            visible = len([s for s in registry.members(group) if s is not session])
        else:
            visible = len(registry.visible_to(session))
        result = {
            "connected": True,
            "sessionId": session.id,
            "name": session.name,
            "status": session.status_text,
            "groups": list(session.groups),
            "homeGroup": session.home_group,
            "visibleSessions": visible,
            "broker": {
                "id": engine.broker_id,
                "routing": "multi-node" if engine.other_brokers else "single-node",
                "otherBrokersLive": engine.other_brokers,
            },
        }
        if group is not None:
            result["group"] = group
        return result

    engine.actions.update({
        "list": list_sessions, "groups": list_groups, "join": join,
        "leave": leave, "status": status,
    })


def change_groups(engine: Engine, session: Session, groups: list[str]) -> None:
    before = set(session.groups)
    engine.registry.set_groups(session, groups)
    membership_changed(engine.registry, session, before, set(session.groups), engine.out)
