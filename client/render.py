"""How an inbound message reads to the agent: text, attachments, and a reply hint."""

from __future__ import annotations

import datetime as _dt


def _stamp(sent_at: float | None) -> str:
    if not isinstance(sent_at, (int, float)):
        return "unknown time"
    return _dt.datetime.fromtimestamp(sent_at, _dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def render_attachments(attachments: list[dict]) -> str:
    """Attachments in order, duplicates kept, each fenced with its name."""
    parts = []
    for item in attachments:
        fence = "```" + (item.get("language") or "")
        parts.append(f"[{item['type']}: {item['name']}]\n{fence}\n{item['content']}\n```")
    return "\n\n".join(parts)


def render_body(msg: dict, reply_hint: bool = True) -> str:
    """The agent-visible body of an inbound message."""
    header = f"Message from {msg.get('fromName')} ({msg.get('from')})"
    if msg.get("receivedBeforeStart"):
        header = f"Messages received before you started\n{header}"
    lines = [header, f"Sent: {_stamp(msg.get('sentAt'))}", "", msg.get("message", "")]
    attachments = msg.get("attachments") or []
    if attachments:
        lines += ["", render_attachments(attachments)]
    if reply_hint:
        if msg.get("expectsReply"):
            lines += ["", f'They are waiting for your answer: intercom({{action: "reply", '
                          f'replyTo: "{msg.get("id")}", message: "..."}})']
        elif not msg.get("replyTo"):
            lines += ["", f'To answer: intercom({{action: "send", to: "{msg.get("from")}", '
                          f'message: "..."}})']
    return "\n".join(lines)
