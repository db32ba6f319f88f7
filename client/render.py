"""How an inbound message reads to the agent: text, attachments, and a reply hint.

A message with ``replyable: false`` (its sender can be sent nothing: a control
connection, such as the command line) gets :data:`UNANSWERABLE` instead of the "To
answer" hint; an ask from one keeps its hint, as its reply reaches the asker while it
waits. The field is optional: a broker that does not send it leaves every message
answerable, as before."""

from __future__ import annotations

import datetime as _dt
import math as _math

_UTC = _dt.timezone.utc
_FORMAT = "%Y-%m-%d %H:%M:%S UTC"
# The last stamp made, as (whole second, text): a burst of messages shares its second,
# and strftime is most of what rendering a body costs. One tuple, replaced whole, so
# readers on other threads always see a matching pair.
_last_stamp: tuple[int, str] = (0, _dt.datetime.fromtimestamp(0, _UTC).strftime(_FORMAT))


def _stamp(sent_at: float | None) -> str:
    if not isinstance(sent_at, (int, float)):
        return "unknown time"
    global _last_stamp
    try:
        second = _math.floor(sent_at)
        # fromtimestamp rounds to whole microseconds: a fraction this close to the next
        # second may round up into it, so only smaller ones share the cached second.
        if sent_at - second >= 0.999999:
            return _dt.datetime.fromtimestamp(sent_at, _UTC).strftime(_FORMAT)
        last = _last_stamp
        if last[0] == second:
            return last[1]
        text = _dt.datetime.fromtimestamp(second, _UTC).strftime(_FORMAT)
    except (OverflowError, OSError, ValueError):   # nan, inf, or out of the platform's range
        return "unknown time"
    _last_stamp = (second, text)
    return text


def render_attachments(attachments: list[dict]) -> str:
    """Attachments in order, duplicates kept, each fenced with its name."""
    parts = []
    for item in attachments:
        fence = "```" + (item.get("language") or "")
        parts.append(f"[{item['type']}: {item['name']}]\n{fence}\n{item['content']}\n```")
    return "\n\n".join(parts)


# The head and reply hint of recent plain messages, keyed by what they are made of:
# the messages of one batch share their sender and send time, so most bodies cost one
# concatenation, also with several senders interleaved. Bounded by clearing it whole;
# single dict operations are atomic, so readers on other threads are safe.
_heads: dict[tuple, tuple[str, str]] = {}
_HEADS_MAX = 256


def _plain_parts(key: tuple) -> tuple[str, str]:
    """Head and reply hint of a plain message from ``(fromName, from, sentAt, hint)``."""
    head = f"Message from {key[0]} ({key[1]})\nSent: {_stamp(key[2])}\n\n"
    hint = (f'\n\nTo answer: intercom({{action: "send", to: "{key[1]}", '
            f'message: "..."}})') if key[3] else ""
    return head, hint


# A message whose sender nobody can message (``replyable: false``: the command line or
# another control connection) says so instead of the reply hint, whatever the setting:
# the hint would propose a send that fails with target_not_found.
UNANSWERABLE = ("\n\nIts sender cannot be answered: it came from a command line or tool "
                "that nobody can send to, so a send or reply to it fails.")


def render_body(msg: dict, reply_hint: bool = True) -> str:
    """The agent-visible body of an inbound message."""
    get = msg.get
    attachments, expects_reply = get("attachments"), get("expectsReply")
    if not attachments and not expects_reply and not get("replyTo") \
            and not get("receivedBeforeStart") and get("replyable") is not False:
        key = (get("fromName"), get("from"), get("sentAt"), reply_hint)
        try:
            parts = _heads.get(key)
        except TypeError:          # a field that cannot be a key: no cache for it
            parts = _plain_parts(key)
        if parts is None:
            if len(_heads) >= _HEADS_MAX:
                _heads.clear()
            parts = _heads[key] = _plain_parts(key)
        return f"{parts[0]}{get('message', '')}{parts[1]}"
    header = f"Message from {get('fromName')} ({get('from')})"
    if get("receivedBeforeStart"):
        header = f"Messages received before you started\n{header}"
    text = f"{header}\nSent: {_stamp(get('sentAt'))}\n\n{get('message', '')}"
    if attachments:
        text = f"{text}\n\n{render_attachments(attachments)}"
    if not expects_reply and get("replyable") is False:
        text += UNANSWERABLE
    elif reply_hint:
        if expects_reply:
            text += (f'\n\nThey are waiting for your answer: intercom({{action: "reply", '
                     f'replyTo: "{get("id")}", message: "..."}})')
        elif not get("replyTo"):
            text += (f'\n\nTo answer: intercom({{action: "send", to: "{get("from")}", '
                     f'message: "..."}})')
    return text
