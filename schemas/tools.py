"""JSON Schemas of the tool parameter sets, ready to hand to a model as tool definitions.

``validate`` checks a parameter dict against one of them with the small subset of
JSON Schema these use (type, enum, required, properties, additionalProperties,
items, minLength, maxLength, maxItems, minimum, maximum, exclusiveMinimum,
oneOf-by-required).
It returns the first problem as a sentence, or None.
"""

from __future__ import annotations

from typing import Any

from .limits import (ALT_TEXT_CHARS, ASK_TIMEOUT_S, MAX_ATTACHMENT_CHARS, MAX_ATTACHMENTS, MAX_CHANNEL_CHARS,
                     MAX_GROUP_CHARS, MAX_MESSAGE_CHARS, MAX_REASON_CHARS, MAX_TARGET_CHARS,
                     MAX_WAIT_TIMEOUT_S, WAIT_TIMEOUT_S)

INTERCOM_ACTIONS = ("list", "groups", "join", "leave", "send", "ask", "reply", "pending", "status")

# What each action does, one sentence each: the ``action`` parameter's description is
# made of them, so a model reading the tool definition learns every action there.
ACTION_HELP: dict[str, str] = {
    "list": "show the sessions you share a group with and the workflow stages you can "
            "reach (PENDING or RUNNING, with the exact target to copy); with group, look "
            "at that one group without joining it",
    "groups": "show every group that has a connected session, how many are in each and "
              "which ones you are in; look names up here rather than guess them",
    "join": "become a member of group too (a new name creates it); your other groups "
            "stay, and the answer lists all of them",
    "leave": "stop being a member of group, or without group go back to just your home "
             "group; the answer lists the groups you are left in",
    "send": "deliver message (with any attachments) to the session or stage named by "
            "to and return at once, without waiting for an answer; a workflow stage that "
            "has not started yet gets it queued",
    "ask": "send message to a live session and wait until it replies (the reply is "
           "the result) or timeout seconds pass; refused at once (ask_cycle) when that "
           "session already waits on you, directly or through others",
    "reply": "answer the message you are handling now, or else the only ask still "
             "waiting for you; with several waiting, name one with to or replyTo",
    "pending": "show the asks sent to you that still wait for your reply: who asked, "
               "the message id, how long ago and the start of the text",
    "status": "show your connection, session id, groups and the broker's state; with "
              "messageId, tell what became of a message you sent",
}

ATTACHMENT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": "One item the receiver reads after the message text.",
    "properties": {
        "type": {"type": "string", "enum": ["file", "snippet", "context"],
                 "description": "file (a file's content), snippet (a piece of code or "
                                "text) or context (background the receiver should know)"},
        "name": {"type": "string", "minLength": 1, "maxLength": 1024,
                 "description": "what the receiver sees it as: a file path or a short title"},
        "content": {"type": "string", "maxLength": MAX_ATTACHMENT_CHARS,
                    "description": "the text the receiver reads"},
        "language": {"type": "string", "maxLength": 64,
                     "description": "for code: its language, used to fence it (py, ts, ...)"},
    },
    "required": ["type", "name", "content"],
    "additionalProperties": False,
}

INTERCOM_SCHEMA: dict[str, Any] = {
    "title": "intercom",
    "description": "Talk to the other agent sessions on the Intercom bus: see who is there "
                   "and which groups exist, join or leave groups, send a message, ask and "
                   "wait for the answer, reply to what you were sent. Choose what to do "
                   "with action; each parameter says which actions use it.",
    "type": "object",
    "properties": {
        "action": {"type": "string", "enum": list(INTERCOM_ACTIONS),
                   "description": "What to do. " + " ".join(
                       f"{name}: {text}." for name, text in ACTION_HELP.items())},
        "to": {"type": "string", "minLength": 1, "maxLength": MAX_TARGET_CHARS,
               "description": "send, ask: who gets it. A session's full id, its exact name, "
                              "the first 8 hex digits of its id, its Atomic session id, or a "
                              "workflow:<runId>/<stage>[/...] path (* one segment, ** any "
                              "depth) as list shows it. reply: which sender's ask to answer"},
        "message": {"type": "string", "maxLength": MAX_MESSAGE_CHARS,
                    "description": "send, ask, reply: the text the receiver reads"},
        "attachments": {"type": "array", "maxItems": MAX_ATTACHMENTS, "items": ATTACHMENT_SCHEMA,
                        "description": "send, ask, reply (optional): files, snippets or "
                                       "context shown to the receiver after the message, "
                                       "in this order"},
        "replyTo": {"type": "string", "maxLength": 128,
                    "description": "reply (or send): the id of the message you answer, in "
                                   "full or its first 8 hex digits, as pending lists it; "
                                   "needed when one sender has several asks waiting"},
        "group": {"type": "string", "maxLength": MAX_GROUP_CHARS,
                  "description": "join: the group to add; leave: the group to drop (leave "
                                 "it out to return to your home group); list, status: look "
                                 "at this group only, without joining it"},
        "messageId": {"type": "string", "minLength": 1, "maxLength": 128,
                      "description": "status only: a message you sent; answers its receipt "
                                     "(delivered, read, seen, replied or undelivered)"},
        "timeout": {"type": "number", "exclusiveMinimum": 0,
                    "description": f"ask only: seconds to wait for the reply (default "
                                   f"{ASK_TIMEOUT_S:g})"},
    },
    "required": ["action"],
    "additionalProperties": False,
}

# One respond attachment: a path the broker carries, not the file's bytes.
OUTPUT_ATTACHMENT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"path": {"type": "string", "minLength": 1, "maxLength": 4096,
                            "description": "a file here that the channel shows with the "
                                           "output"},
                   "altText": {"type": "string", "maxLength": ALT_TEXT_CHARS,
                               "description": "image paths only"}},
    "required": ["path"], "additionalProperties": False}

RESPOND_SCHEMA: dict[str, Any] = {
    "title": "respond",
    "description": "Post this agent's output to a channel (a session of the same agent).",
    "type": "object",
    "properties": {
        "content": {"type": "string", "maxLength": MAX_MESSAGE_CHARS,
                    "description": "the text to post (or give draft instead)"},
        "draft": {"type": "string", "minLength": 1, "maxLength": 128,
                  "description": "the id of a draft to post as it stands (instead of content)"},
        "channel": {"type": "string", "minLength": 1, "maxLength": MAX_CHANNEL_CHARS,
                    "description": "where: current (the default), last, owner, or a channel "
                                   "id of this agent"},
        "attachments": {"type": "array", "maxItems": MAX_ATTACHMENTS,
                        "items": OUTPUT_ATTACHMENT_SCHEMA,
                        "description": "files to show with the output, by path "
                                       "(discord: channels only)"},
        "final": {"type": "boolean",
                  "description": "false while more output of this turn follows (default true)"},
    },
    "oneOf": [{"required": ["content"]}, {"required": ["draft"]}],
    "additionalProperties": False,
}

INVOKE_SCHEMA: dict[str, Any] = {
    "title": "invoke",
    "description": "Queue a turn in another existing session of the same agent.",
    "type": "object",
    "properties": {
        "session": {"type": "string", "minLength": 1, "maxLength": MAX_CHANNEL_CHARS,
                    "description": "the channel id (as list_sessions shows it) of another "
                                   "persistent conversation of this agent"},
        "reason": {"type": "string", "minLength": 1, "maxLength": MAX_REASON_CHARS,
                   "description": "why that conversation should take a turn: it reads "
                                  "this when the turn starts"},
    },
    "required": ["session", "reason"],
    "additionalProperties": False,
}

WAIT_SCHEMA: dict[str, Any] = {
    "title": "wait",
    "description": "Wait for messages to this session: returns as soon as at least one is "
                   "there (all of them, oldest first), or an empty list at the timeout.",
    "type": "object",
    "properties": {
        "timeout_s": {"type": "number", "minimum": 0, "maximum": MAX_WAIT_TIMEOUT_S,
                      "description": f"seconds to wait (default {WAIT_TIMEOUT_S:g})"},
    },
    "additionalProperties": False,
}

TOOL_SCHEMAS = {"intercom": INTERCOM_SCHEMA, "respond": RESPOND_SCHEMA, "invoke": INVOKE_SCHEMA,
                "wait": WAIT_SCHEMA}

_TYPES = {
    "object": dict, "array": list, "string": str, "boolean": bool,
}


def _type_ok(expected: str, value: Any) -> bool:
    if expected == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if expected == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, _TYPES[expected])


def validate(schema: dict[str, Any], value: Any, where: str = "") -> str | None:
    """Return the first way ``value`` breaks ``schema``, as a sentence, or None."""
    label = where or "parameters"
    expected = schema.get("type")
    if expected and not _type_ok(expected, value):
        return f"{label} must be of type {expected}"
    if "enum" in schema and value not in schema["enum"]:
        options = ", ".join(repr(o) for o in schema["enum"])
        return f"{label} must be one of {options}"
    if isinstance(value, str):
        if len(value) < schema.get("minLength", 0):
            return f"{label} must not be empty"
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            return f"{label} exceeds {schema['maxLength']} characters"
    if _type_ok("number", value):
        if "exclusiveMinimum" in schema and not value > schema["exclusiveMinimum"]:
            return f"{label} must be greater than {schema['exclusiveMinimum']}"
        if "minimum" in schema and value < schema["minimum"]:
            return f"{label} must be at least {schema['minimum']}"
        if "maximum" in schema and value > schema["maximum"]:
            return f"{label} must be at most {schema['maximum']:g}"
    if isinstance(value, list):
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            return f"{label} has more than {schema['maxItems']} items"
        items = schema.get("items")
        if items:
            for index, item in enumerate(value):
                problem = validate(items, item, f"{label}[{index}]")
                if problem:
                    return problem
    if isinstance(value, dict):
        return _validate_object(schema, value, where)
    return None


def _validate_object(schema: dict[str, Any], value: dict, where: str) -> str | None:
    props = schema.get("properties", {})
    prefix = f"{where}." if where else ""
    for key in value:
        if not isinstance(key, str):
            return f"{where or 'parameters'} keys must be strings"
        if key not in props and schema.get("additionalProperties", True) is False:
            return f"unknown parameter {prefix}{key!r}"
    for key in schema.get("required", ()):
        if key not in value:
            return f"missing required parameter {prefix}{key!r}"
    if "oneOf" in schema:
        matches = sum(all(k in value for k in alt.get("required", ())) for alt in schema["oneOf"])
        if matches != 1:
            names = " or ".join(repr(alt["required"][0]) for alt in schema["oneOf"])
            return f"supply exactly one of {names}"
    for key, sub in props.items():
        if key in value:
            problem = validate(sub, value[key], f"{prefix}{key}")
            if problem:
                return problem
    return None


def _string_check(schema: dict[str, Any]):
    low, high = schema.get("minLength", 0), schema.get("maxLength", 1 << 62)
    enum = frozenset(schema["enum"]) if "enum" in schema else None
    if enum is not None:
        return lambda v: v.__class__ is str and v in enum
    return lambda v: v.__class__ is str and low <= len(v) <= high


def _number_check(schema: dict[str, Any]):
    above = schema.get("exclusiveMinimum")
    low = schema.get("minimum")

    def check(v: Any) -> bool:
        # NaN fails every comparison, so it always takes the full schema walk.
        if v.__class__ is not float and v.__class__ is not int:
            return False
        return (above is None or v > above) and (low is None or v >= low)
    return check


def _quick_checks() -> dict[str, Any]:
    """Per-parameter predicates equivalent to INTERCOM_SCHEMA for the common shapes."""
    checks = {}
    for key, sub in INTERCOM_SCHEMA["properties"].items():
        if sub.get("type") == "string":
            checks[key] = _string_check(sub)
        elif sub.get("type") == "number":
            checks[key] = _number_check(sub)
    return checks


_QUICK = _quick_checks()


def intercom_params_ok(params: dict[str, Any], ignore: frozenset[str] = frozenset()) -> bool:
    """True when ``params`` (less the ``ignore`` keys) are plainly valid: the fast path."""
    if "action" not in params:
        return False
    quick = _QUICK
    for key, value in params.items():
        check = quick.get(key)
        if check is None:
            if key in ignore:
                continue
            return False
        if not check(value):
            return False
    return True


def intercom_params_problem(params: dict[str, Any]) -> tuple[str, dict[str, Any]] | None:
    """Check intercom parameters; return (error code, text fields) for the first problem.

    An oversized message and attachment problems (with the attachment's index) get
    their own codes. The common
    case (string parameters only) is checked by precompiled predicates; anything
    else, and every failure, goes through the full schema walk so the texts match.
    """
    if intercom_params_ok(params):
        return None
    message = params.get("message")
    if isinstance(message, str) and len(message) > MAX_MESSAGE_CHARS:
        return "message_too_large", {"size": len(message), "limit": MAX_MESSAGE_CHARS}
    attachments = params.get("attachments")
    if isinstance(attachments, list):
        for index, item in enumerate(attachments[:MAX_ATTACHMENTS]):
            problem = validate(ATTACHMENT_SCHEMA, item, "attachment")
            if problem:
                return "invalid_attachment", {"index": index, "detail": problem}
    problem = validate(INTERCOM_SCHEMA, params)
    if problem:
        return "invalid_params", {"detail": problem}
    return None
