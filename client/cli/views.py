"""Answers as people read them: each function takes one broker answer (as ``--json``
prints it) and returns the lines to print.

Session rows put what a reader copies first (the session id, or a stage's canonical
workflow path), then status and working directory; a name that only repeats the id
is left out of the list (it still works as a target).
"""

from __future__ import annotations

from typing import Any, Sequence

from schemas.attention import ACCEPT, CAPABILITY_FLAGS

from .runs import run_tables
from .tables import NONE, Style, ago, elapsed, pairs, table

_BUSY = ("thinking", "tool:")
_ENDED = ("completed", "failed", "interrupted", "cancelled", "closed")


def status_styles(text: str) -> tuple[str, ...]:
    """How a status reads at a glance: idle green, busy yellow, ended dim."""
    if text.startswith("idle"):
        return ("green",)
    if text.startswith(_BUSY):
        return ("yellow",)
    if text.startswith(_ENDED):
        return ("dim",)
    return ()


def copyable(row: dict[str, Any]) -> str:
    """What to copy to reach a session: its stage's canonical path, else its id."""
    return row.get("stage") or row.get("id") or NONE


def shown_name(row: dict[str, Any]) -> str | None:
    """The name, unless it only repeats the id (or the stage's own last segment)."""
    name, session_id, stage = row.get("name"), str(row.get("id") or ""), row.get("stage")
    if not name or name == session_id or name.lower() == session_id[:8].lower():
        return None
    if stage and stage.rsplit("/", 1)[-1] == name:
        return None
    return name


def reach(row: dict[str, Any]) -> str | None:
    """How a message reaches the session: its host and capabilities, then its inbound
    gate when that is not ``accept`` (``mcp push,steer,hooks``, ``python hold``)."""
    caps = row.get("capabilities") if isinstance(row.get("capabilities"), dict) else {}
    flags = [flag for flag in CAPABILITY_FLAGS if caps.get(flag) is True]
    words = [str(caps.get("host") or "?")] + ([",".join(flags)] if flags else [])
    if row.get("inbound") not in (None, ACCEPT):
        words.append(str(row["inbound"]))
    return " ".join(words) if caps or len(words) > 1 else None


def session_table(rows: Sequence[dict], now: float, style: Style, *,
                  everywhere: bool = False) -> list[str]:
    """The sessions of a list (``everywhere``: of the operator's overview, with each
    one's home group and the broker holding it)."""
    headers = ["ID", "STATUS", "CWD", "NAME", "REACH", "GROUPS", "CONNECTED"]
    if everywhere:
        headers[5:5] = ["HOME", "BROKER"]
    body = []
    for row in rows:
        cells = [copyable(row), row.get("status"), row.get("cwd"), shown_name(row), reach(row),
                 row.get("groups"), ago(row.get("connectedAt"), now)]
        if everywhere:
            cells[5:5] = [row.get("homeGroup"), row.get("broker") or "here"]
        body.append(cells)
    return table(headers, body, style, lambda i, text: status_styles(text) if i == 1 else ())


def listing(answer: dict[str, Any], now: float, style: Style, *,
            everywhere: bool = False) -> list[str]:
    """``list`` (or ``list --all``): the sessions, then each workflow run's stages."""
    sessions = answer.get("sessions") or []
    if sessions:
        out = session_table(sessions, now, style, everywhere=everywhere)
    else:
        where = answer.get("group") or ", ".join((answer.get("self") or {}).get("groups") or [])
        out = [style("no sessions", "dim") + (f" in {where}" if where and not everywhere else "")]
    runs = run_tables(answer.get("workflows") or [], answer.get("closedStages") or [], style)
    return out + ([""] + runs if runs else [])


def groups_view(answer: dict[str, Any], style: Style) -> list[str]:
    rows = [[g.get("name"), g.get("sessions"), "*" if g.get("member") else ""]
            for g in answer.get("groups") or []]
    if not rows:
        return [style("no groups", "dim")]
    return table(["GROUP", "SESSIONS", "MEMBER"], rows, style)


def status_view(answer: dict[str, Any], now: float, style: Style) -> list[str]:
    broker = answer.get("broker") or {}
    connected = answer.get("connected")
    items: list[tuple[str, Any]] = [
        ("connected", "yes" if connected else "no"),
        ("session", answer.get("sessionId")),
        ("name", answer.get("name")),
        ("groups", answer.get("groups")),
        ("home group", answer.get("homeGroup")),
    ]
    if connected:
        items += [("visible", f"{answer.get('visibleSessions', 0)} sessions"
                   + (f" in {answer['group']}" if answer.get("group") else "")),
                  ("broker", broker.get("id")),
                  ("routing", f"{broker.get('routing', NONE)}, "
                   f"{broker.get('otherBrokersLive', 0)} other brokers live")]
        items += [("warning", w) for w in broker.get("warnings") or []]
    else:
        items += [("last heard", ago(answer.get("since"), now)), ("detail", answer.get("detail"))]
    return pairs(items, style)


def conversations(answer: dict[str, Any], now: float, style: Style) -> list[str]:
    """``sessions --agent A``: one row per conversation of the agent."""
    rows = [[r.get("session"), r.get("connected"), r.get("queuedInvocations"),
             r.get("persistent"), r.get("remote"), ago(r.get("lastActiveAt"), now)]
            for r in answer.get("sessions") or []]
    if not rows:
        return [style("no conversations", "dim")]
    return table(["SESSION", "CONNECTED", "QUEUED", "PERSISTENT", "REMOTE", "LAST ACTIVE"],
                 rows, style)


def pending_view(answer: dict[str, Any], style: Style) -> list[str]:
    rows = [[p.get("messageId"), _who(p.get("fromName"), p.get("from")),
             elapsed(p.get("elapsedS")), "supervisor" if p.get("supervisor") else "ask",
             p.get("preview")]
            for p in answer.get("pending") or []]
    if not rows:
        return [style("no pending asks", "dim")]
    return table(["MESSAGE ID", "FROM", "ASKED", "KIND", "PREVIEW"], rows, style)


def sent(answer: dict[str, Any]) -> list[str]:
    """A send's outcome in one line."""
    if answer.get("queued"):
        line = f"queued for {answer.get('target') or answer.get('toName')}"
        if answer.get("position") is not None:
            line += f" (position {answer['position']})"
        if answer.get("notInKnownSet"):
            line += ", not in the known set yet"
        return [line]
    line = f"delivered to {_who(answer.get('toName'), answer.get('to'))}"
    return [line + (f" as {answer['target']}" if answer.get("target") else "")]


def replied(answer: dict[str, Any]) -> list[str]:
    return [f"replied to {_who(answer.get('toName'), answer.get('to'))}"]


def answer_text(answer: dict[str, Any]) -> list[str]:
    """An ask's reply: its text as it came, then one line per attachment."""
    lines = str(answer.get("message", "")).split("\n")
    for item in answer.get("attachments") or []:
        if isinstance(item, dict):
            lines.append(f"[{item.get('type', 'attachment')}: {item.get('name', '?')}]")
    return lines


def memberships(answer: dict[str, Any]) -> list[str]:
    return [f"groups: {', '.join(answer.get('groups') or [])}"]


def _who(name: Any, session_id: Any) -> str:
    short = str(session_id)[:8] if session_id else None
    if name and short:
        return f"{name} ({short})"
    return str(name or session_id or NONE)
