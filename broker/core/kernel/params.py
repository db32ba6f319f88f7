"""The intercom tool parameters of a ``call``, checked against the tool's JSON Schema."""

from __future__ import annotations

from typing import Any

from schemas.errors import BusError
from schemas.tools import intercom_params_ok, intercom_params_problem

_ENVELOPE = frozenset({"v", "k", "id", "currentTurn", "quiet"})


def tool_params(env: dict) -> dict[str, Any]:
    """The intercom parameters of a call envelope.

    Handlers only read parameter keys, so a plainly valid envelope is returned as is.
    Raises BusError(invalid_params | invalid_attachment | message_too_large).
    """
    if intercom_params_ok(env, _ENVELOPE):
        return env
    params = {k: v for k, v in env.items() if k not in _ENVELOPE}
    problem = intercom_params_problem(params)
    if problem:
        raise BusError(problem[0], **problem[1])
    return params


def turn_of(env: dict) -> str | None:
    """The message this session is answering now, as its client says."""
    turn = env.get("currentTurn")
    return turn if isinstance(turn, str) else None
