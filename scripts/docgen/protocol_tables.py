"""PROTOCOL.md's reference tables, rendered from the declarations in ``schemas/``.

Every kind with each field's type, whether it is required, its limit and meaning
(:mod:`schemas.kinds`, with the ``intercom`` tool's parameters from
:mod:`schemas.tools`); the welcome (:mod:`schemas.welcome`); the numbers a client
must respect or should copy (:mod:`schemas.limits`, and the Python client's own
timings); every error code with its class, retry rule and text (:mod:`schemas.errors`).
"""

from __future__ import annotations

import string

from client import protocol as client_protocol
from client import broker_choice
from schemas import attention, limits
from schemas.errors import ERRORS, LOCAL, RETRY_RULES
from schemas.fields import type_name
from schemas.kinds import BROKER_KINDS, CLIENT_KINDS, ID_MAX, LINK_KINDS, TEXT_MAX, Field, Kind
from schemas.tools import ATTACHMENT_SCHEMA, OUTPUT_ATTACHMENT_SCHEMA, TOOL_SCHEMAS
from schemas.welcome import WELCOME_FIELDS

_JSON_TYPES = {"string": "str", "number": "int or float", "array": "list", "boolean": "bool",
               "object": "map", "integer": "int"}
_ID = Field("id", (str,), True, ID_MAX, "the request's id, chosen by the client: unique per "
            "request, kept when the request is resent; the answer's `re`")


def cell(text: str) -> str:
    """Markdown table cell text: reST-style ``literals`` become `code`, pipes escaped,
    and outside code a ``<`` is written ``&lt;`` (``<session id>`` is not an HTML tag)."""
    parts = text.replace("``", "`").replace("|", "\\|").replace("\n", " ").split("`")
    return "`".join(part if index % 2 else part.replace("<", "&lt;")
                    for index, part in enumerate(parts))


def readable(template: str) -> str:
    """An error text template as a table cell, its fields shown as `<name>`."""
    parts = []
    for literal, name, _, _ in string.Formatter().parse(template):
        parts.append(cell(literal))
        if name is not None:
            parts.append(f"`<{name}>`")
    return "".join(parts)


def _limit(field: Field) -> str:
    if field.max_len is None or not {str, list} & set(field.types):
        return ""
    unit = "items" if list in field.types else "chars"
    return f"≤ {field.max_len:,} {unit}"


def _field_rows(fields: tuple[Field, ...]) -> list[str]:
    return [f"| `{f.name}` | {type_name(f)} | {'yes' if f.required else ''} | {_limit(f)} | "
            f"{cell(f.doc)} |" for f in fields]


def _param_rows(kind: Kind) -> list[str]:
    """The tool parameters a ``call`` or ``supervisor`` carries beside its fields."""
    schema = TOOL_SCHEMAS[kind.params]
    wanted = ("message", "attachments", "timeout") if kind.name == "supervisor" else None
    rows = []
    for name, sub in schema["properties"].items():
        if name == "action" or (wanted is not None and name not in wanted):
            continue
        limit = sub.get("maxLength", sub.get("maxItems"))
        unit = "items" if sub.get("type") == "array" else "chars"
        doc = sub.get("description", f"the `{kind.params}` tool's `{name}`")
        rows.append(f"| `{name}` | {_JSON_TYPES[sub['type']]} | | "
                    f"{f'≤ {limit:,} {unit}' if limit else ''} | {cell(doc)} (tool parameter) |")
    return rows


def describe_kinds(kinds: tuple[Kind, ...]) -> str:
    """One subsection per kind: what it is, whether it is a request, its fields."""
    lines: list[str] = []
    for kind in kinds:
        lines += [f"#### `{kind.name}`", "", cell(kind.doc), ""]
        if kind.request:
            lines += ["Request: answered by one `result` whose `re` is this `id`.", ""]
        fields = ((_ID,) if kind.request else ()) + kind.fields
        if fields or kind.params:
            lines += ["| field | type | required | limit | meaning |", "|---|---|---|---|---|"]
            lines += _field_rows(fields)
            if kind.params:
                lines += _param_rows(kind)
            lines.append("")
        else:
            lines += ["No fields besides `v` and `k`.", ""]
    return "\n".join(lines)


def describe_client_kinds() -> str:
    return describe_kinds(CLIENT_KINDS)


def describe_broker_kinds() -> str:
    return describe_kinds(BROKER_KINDS)


def describe_link_kinds() -> str:
    return describe_kinds(LINK_KINDS)


def _object_rows(schema: dict) -> list[str]:
    rows = []
    for name, sub in schema["properties"].items():
        limit = sub.get("maxLength")
        kind = " or ".join(f"`{v}`" for v in sub["enum"]) if "enum" in sub else _JSON_TYPES[sub["type"]]
        rows.append(f"| `{name}` | {kind} | {'yes' if name in schema.get('required', ()) else ''} | "
                    f"{f'≤ {limit:,} chars' if limit else ''} | {cell(sub.get('description', ''))} |")
    return rows


def describe_attachments() -> str:
    """The two attachment shapes: a message's (``intercom``) and an output's (``respond``)."""
    head = ["| field | type | required | limit | meaning |", "|---|---|---|---|---|"]
    return "\n".join(["An item of a message's `attachments` (`call`, `supervisor`, `msg`); no "
                      "other field is allowed:", ""] + head + _object_rows(ATTACHMENT_SCHEMA) +
                     ["", "An item of a `respond`'s (and an `output` event's) `attachments`: a "
                      "path the broker carries, never the file's bytes:", ""] + head +
                     _object_rows(OUTPUT_ATTACHMENT_SCHEMA)) + "\n"


def describe_welcome() -> str:
    lines = ["| field | type | always | meaning |", "|---|---|---|---|"]
    lines += [f"| `{f.name}` | {type_name(f)} | {'yes' if f.required else ''} | {cell(f.doc)} |"
              for f in WELCOME_FIELDS]
    return "\n".join(lines) + "\n"


def _size(value: int) -> str:
    for unit, shift in (("MiB", 20), ("KiB", 10)):
        if value >= 1 << shift and value % (1 << shift) == 0:
            return f"{value >> shift} {unit} ({value:,} bytes)"
    return f"{value:,}"


def _seconds(value: float) -> str:
    return f"{value:g} s"


# (what, value, where it is declared)
_NUMBERS = (
    ("bytes of one frame to the broker (larger: `frame_too_large`)",
     _size(limits.MAX_FRAME_BYTES), "limits.MAX_FRAME_BYTES"),
    ("bytes of one frame from the broker (a client must accept this much)",
     _size(limits.MAX_INBOUND_FRAME_BYTES), "limits.MAX_INBOUND_FRAME_BYTES"),
    ("envelopes in one frame's array", f"{limits.MAX_BATCH:,}", "limits.MAX_BATCH"),
    ("messages in one `sends` envelope", f"{limits.MAX_SEND_ITEMS:,}", "limits.MAX_SEND_ITEMS"),
    ("characters of a request `id`", f"{ID_MAX}", "kinds.ID_MAX"),
    ("characters of any other declared string field without its own limit",
     f"{TEXT_MAX:,}", "kinds.TEXT_MAX"),
    ("characters of a message text", f"{limits.MAX_MESSAGE_CHARS:,}", "limits.MAX_MESSAGE_CHARS"),
    ("attachments of one message", f"{limits.MAX_ATTACHMENTS}", "limits.MAX_ATTACHMENTS"),
    ("characters of one attachment's content", f"{limits.MAX_ATTACHMENT_CHARS:,}",
     "limits.MAX_ATTACHMENT_CHARS"),
    ("characters of a session name or agent", f"{limits.MAX_NAME_CHARS}", "limits.MAX_NAME_CHARS"),
    ("characters of a group name", f"{limits.MAX_GROUP_CHARS}", "limits.MAX_GROUP_CHARS"),
    ("characters of a target (`to`)", f"{limits.MAX_TARGET_CHARS}", "limits.MAX_TARGET_CHARS"),
    ("characters of a channel id", f"{limits.MAX_CHANNEL_CHARS}", "limits.MAX_CHANNEL_CHARS"),
    ("heartbeat: a client sends `hb` after this long without sending",
     _seconds(limits.HEARTBEAT_S), "limits.HEARTBEAT_S"),
    ("liveness: a session silent this long is dropped (the welcome's `livenessS`); a "
     "broker silent this long is taken for gone", _seconds(limits.LIVENESS_S),
     "limits.LIVENESS_S"),
    ("unread bytes a session may leave (default; the welcome's `backlogBytes` is the "
     "broker's)", _size(limits.MAX_BACKLOG_BYTES), "limits.MAX_BACKLOG_BYTES"),
    ("a `read` report is due each time `read` grows by", "`backlogBytes` / "
     f"{limits.MAX_BACKLOG_BYTES // client_protocol.DEFAULT_REPORT_BYTES}",
     "client.protocol.DEFAULT_REPORT_BYTES"),
    ("message ids a broker remembers with their answers (at least half of them, the newest)",
     f"{limits.REMEMBERED_MESSAGE_IDS:,}", "limits.REMEMBERED_MESSAGE_IDS"),
    ("message ids a client should remember having handed out (at least half, the newest)",
     f"{limits.RECEIVED_IDS_KEPT:,}", "limits.RECEIVED_IDS_KEPT"),
    ("an ask's default timeout; the largest", f"{_seconds(limits.ASK_TIMEOUT_S)}; "
     f"{_seconds(limits.MAX_ASK_TIMEOUT_S)}", "limits.ASK_TIMEOUT_S, MAX_ASK_TIMEOUT_S"),
    ("asks one session may have waiting (config `maxPendingAsks`)",
     f"{limits.MAX_PENDING_ASKS}", "limits.MAX_PENDING_ASKS"),
    ("an ask forwarded to another broker names at most this many sessions waiting on "
     "its asker (`waitedBy`, `link_waiters`)", f"{limits.MAX_WAITED_BY}",
     "limits.MAX_WAITED_BY"),
    ("a guarded session's messages to one session in any 60 s (`flood_guard`); its turns "
     "with one session with no person's input or pause between (`loop_guard`); that pause",
     f"{attention.GUARD_PER_MINUTE}; {attention.GUARD_EXCHANGES}; "
     f"{_seconds(attention.GUARD_PAUSE_S)}",
     "attention.GUARD_PER_MINUTE, GUARD_EXCHANGES, GUARD_PAUSE_S"),
    ("how long the Python client waits for any other answer", _seconds(limits.CALL_TIMEOUT_S),
     "limits.CALL_TIMEOUT_S"),
    ("after a re-welcome, asks are resent this long after the welcome",
     _seconds(client_protocol.ASK_RESEND_DELAY_S), "client.protocol.ASK_RESEND_DELAY_S"),
    ("a hello redirected to the same broker (`run_moving`) is said again after "
     f"(doubling up to {_seconds(client_protocol.REDIRECT_DELAY_MAX_S)})",
     _seconds(client_protocol.REDIRECT_DELAY_S),
     "client.protocol.REDIRECT_DELAY_S, REDIRECT_DELAY_MAX_S"),
    ("`run_moving` from one broker this many times in a row: the next endpoint is tried",
     f"{client_protocol.ROTATE_AFTER}", "client.protocol.ROTATE_AFTER"),
    ("redirects are followed in a row without a welcome for",
     _seconds(client_protocol.REDIRECT_PATIENCE_S), "client.protocol.REDIRECT_PATIENCE_S"),
    ("with several endpoints, a hello unanswered this long moves to the next",
     _seconds(broker_choice.FAILOVER_S), "client.broker_choice.FAILOVER_S"),
    ("a child grant admits its child within", _seconds(limits.CHILD_GRANT_S),
     "limits.CHILD_GRANT_S"),
    ("queued (sticky) messages per stage target", f"{limits.QUEUED_PER_TARGET}",
     "limits.QUEUED_PER_TARGET"),
)


def describe_numbers() -> str:
    lines = ["| what | value | declared as |", "|---|---|---|"]
    lines += [f"| {cell(what)} | {value} | `{where}` |" for what, value, where in _NUMBERS]
    return "\n".join(lines) + "\n"


_RETRY_SHORT = {rule: text.partition(":")[0] for rule, text in RETRY_RULES.items()}


def retry_legend() -> list[str]:
    """The retry rules as a list, for the documents' keys."""
    return [f"- **{_RETRY_SHORT[rule]}**: {cell(text.partition(': ')[2])}"
            for rule, text in RETRY_RULES.items()]


def retry_short(rule: str) -> str:
    return _RETRY_SHORT[rule]


def describe_errors() -> str:
    """Every code: class, retry rule, who sends it, and its text."""
    lines = ["Retry may help:", ""] + retry_legend() + [
        "", "| code | class | retry | sent by | text |", "|---|---|---|---|---|"]
    for spec in ERRORS.values():
        sender = "the client itself" if spec.code in LOCAL else "broker"
        lines.append(f"| `{spec.code}` | {spec.kind} | {retry_short(spec.retry)} | {sender} | "
                     f"{readable(spec.text)} |")
    return "\n".join(lines) + "\n"
