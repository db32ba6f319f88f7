"""The client's checks of ``respond`` and ``invoke`` parameters, before anything is sent.

What the client can know is checked here, so a bad call costs no round trip and the
broker never sees a path that does not exist on this side: exactly one of
``content`` or ``draft``, a draft only with channel ``current``, the parameter types and lengths of the ``respond`` and
``invoke`` JSON Schemas (:mod:`schemas.tools`), each attachment
(:mod:`schemas.output_attachments`, plus: the file exists). Channel resolution,
remote rules, and whether the channel takes attachments are the broker's (it knows
the conversations); draft rules are :class:`client.drafts.Turns`'.

Every function returns None or the error reply dict the call returns.
"""

from __future__ import annotations

import os
from typing import Any

from schemas.errors import error_reply
from schemas.kinds import TEXT_MAX
from schemas.limits import MAX_ATTACHMENTS, MAX_MESSAGE_CHARS
from schemas.names import CURRENT
from schemas.output_attachments import attachment_problem
from schemas.tools import INVOKE_SCHEMA, RESPOND_SCHEMA, validate


def respond_params(content: Any, draft: Any, channel: Any, attachments: Any,
                   final: Any) -> dict[str, Any]:
    """The tool parameters of a ``session.respond`` call (None means not given)."""
    params: dict[str, Any] = {"channel": channel, "final": final}
    if content is not None:
        params["content"] = content
    if draft is not None:
        params["draft"] = draft
    if attachments is not None:
        params["attachments"] = attachments
    return params


def respond_problem(params: dict[str, Any]) -> dict[str, Any] | None:
    """Why these respond parameters cannot be sent, or None."""
    if ("content" in params) == ("draft" in params):
        return error_reply("invalid_params", detail="supply exactly one of 'content' or 'draft'")
    content = params.get("content")
    if isinstance(content, str) and len(content) > MAX_MESSAGE_CHARS:
        return error_reply("message_too_large", size=len(content), limit=MAX_MESSAGE_CHARS)
    attachments = params.get("attachments")
    if isinstance(attachments, list) and len(attachments) <= MAX_ATTACHMENTS:
        for index, item in enumerate(attachments):
            problem = attachment_problem(item)
            if problem is None and not os.path.exists(item["path"]):
                problem = f"no such file: {item['path']!r}"
            if problem:
                return error_reply("invalid_attachment", index=index, detail=problem)
    problem = validate(RESPOND_SCHEMA, params)
    if problem:
        return error_reply("invalid_params", detail=problem)
    if "draft" in params and params["channel"] != CURRENT:
        return error_reply("draft_not_current")    # not even this conversation's own id
    return None


def invoke_problem(session: Any, reason: Any) -> dict[str, Any] | None:
    """Why these invoke parameters cannot be sent, or None."""
    problem = validate(INVOKE_SCHEMA, {"session": session, "reason": reason})
    if problem:
        return error_reply("invalid_params", detail=problem)
    return None


def finish_problem(job_id: Any, ok: Any, error: Any) -> dict[str, Any] | None:
    """Why these finish_invocation parameters cannot be sent, or None."""
    if not isinstance(job_id, str) or not job_id or len(job_id) > 128:
        return error_reply("invalid_params", detail="id must be an invocation id from an "
                           "invocation event")
    if not isinstance(ok, bool):
        return error_reply("invalid_params", detail="ok must be true or false")
    if error is not None and (not isinstance(error, str) or len(error) > TEXT_MAX):
        return error_reply("invalid_params", detail=f"error must be a string of at most "
                           f"{TEXT_MAX} characters")
    return None
