"""Builders of the envelopes the broker sends: each kind is built here and nowhere else.

The fields are those :mod:`schemas.kinds` declares (a unit test builds each one and
checks it against the declaration). Errors reach the wire through exactly one
function, :func:`error_result`, so a code always carries its table text.
"""

from __future__ import annotations

from typing import Any

from .errors import BusError
from .limits import PROTOCOL_VERSION

_V = PROTOCOL_VERSION


def result(re: str | None, fields: dict[str, Any] | None = None) -> dict[str, Any]:
    """A success answer to request ``re``."""
    env = {"v": _V, "k": "result", "re": re, "ok": True}
    if fields:
        env.update(fields)
    return env


def error_result(re: str | None, error: BusError) -> dict[str, Any]:
    """The one place a refusal becomes an envelope."""
    return {"v": _V, "k": "result", "re": re, **error.reply()}


def msg(msg_id: str, sender_id: str, sender_name: str, message: str, attachments: list,
        sent_at: float, expects_reply: bool = False, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """One inbound message; ``extra`` holds the optional declared fields (replyTo,
    supervisor, timeoutS, target, ackRequired, receivedBeforeStart)."""
    env = {"v": _V, "k": "msg", "id": msg_id, "from": sender_id, "fromName": sender_name,
           "message": message, "attachments": attachments, "sentAt": sent_at,
           "expectsReply": expects_reply}
    if extra:
        env.update(extra)
    return env


def msgs(sender_id: str, sender_name: str, sent_at: float, ids: list[str],
         texts: list[str]) -> dict[str, Any]:
    """Several plain text messages from one sender."""
    return {"v": _V, "k": "msgs", "from": sender_id, "fromName": sender_name,
            "sentAt": sent_at, "ids": ids, "messages": texts}


def acks(ids: list[str]) -> dict[str, Any]:
    return {"v": _V, "k": "acks", "ids": ids}


def event(name: str, **fields: Any) -> dict[str, Any]:
    """An in-band or published event (presence, undeliverable)."""
    env = {"v": _V, "k": "event", "event": name}
    env.update(fields)
    return env


def undelivered(message_id: str, to: str, to_name: str, reason: str) -> dict[str, Any]:
    """To a message's sender: its live message ``message_id`` never reached ``to``."""
    return {"v": _V, "k": "event", "event": "undelivered", "messageId": message_id, "to": to,
            "toName": to_name, "reason": reason}


def presence(name: str, row: dict[str, Any], group: str | None = None) -> dict[str, Any]:
    """A presence event about the session whose public ``row`` is given."""
    env = {"v": _V, "k": "event", "event": name, "session": row}
    if group is not None:
        env["group"] = group
    return env


def heartbeat() -> dict[str, Any]:
    return {"v": _V, "k": "hb"}


def output(channel: str, content: str, attachments: list, final: bool,
           from_session: str, output_id: str, from_id: str) -> dict[str, Any]:
    """A respond delivered to ``channel`` (in-band to its session, and on PUB)."""
    return {"v": _V, "k": "event", "event": "output", "channel": channel, "content": content,
            "attachments": attachments, "final": final, "fromSession": from_session,
            "outputId": output_id, "fromId": from_id}


def output_acked(output_id: str, channel: str) -> dict[str, Any]:
    """An output this session sent was acknowledged by its channel's side."""
    return {"v": _V, "k": "event", "event": "output_acked", "outputId": output_id,
            "channel": channel}


def invocation(job_id: str, agent: str, from_session: str, reason: str) -> dict[str, Any]:
    """An invoke job handed to its destination session."""
    return {"v": _V, "k": "event", "event": "invocation", "id": job_id, "agent": agent,
            "fromSession": from_session, "reason": reason}


# -- between brokers (see schemas.kinds.LINK_KINDS) --------------------------------------

def link(broker_id: str, proof: str, endpoint: str, until: float, rows: list[dict],
         runs: list[str], subagents: dict[str, list]) -> dict[str, Any]:
    return {"v": _V, "k": "link", "broker": broker_id, "proof": proof, "endpoint": endpoint,
            "until": until, "sessions": rows, "runs": runs, "subagents": subagents}


def link_runs(owned: list[str], dropped: list[str], subagents: dict[str, list]) -> dict[str, Any]:
    return {"v": _V, "k": "link_runs", "owned": owned, "dropped": dropped,
            "subagents": subagents}


def link_presence(rows: list[dict], gone: list[str]) -> dict[str, Any]:
    return {"v": _V, "k": "link_presence", "sessions": rows, "gone": gone}


def forward(session_id: str, env: dict[str, Any],
            waiters: dict[str, list] | None = None) -> dict[str, Any]:
    """``waiters``: an ask's ``waitedBy`` and ``waitedVia``, when anyone waits on its asker."""
    forwarded = {"v": _V, "k": "forward", "from": session_id, "env": env}
    if waiters:
        forwarded.update(waiters)
    return forwarded


def link_waiters(asks: dict[str, dict[str, list]]) -> dict[str, Any]:
    return {"v": _V, "k": "link_waiters", "asks": asks}


def link_human_input(session_id: str) -> dict[str, Any]:
    return {"v": _V, "k": "link_human_input", "session": session_id}


def relay(session_id: str, env: dict[str, Any]) -> dict[str, Any]:
    return {"v": _V, "k": "relay", "to": session_id, "env": env}


def link_list(session_id: str, token: str, runs: list[str]) -> dict[str, Any]:
    return {"v": _V, "k": "link_list", "from": session_id, "token": token, "runs": runs}


def link_listed(session_id: str, token: str, rows: list[dict]) -> dict[str, Any]:
    return {"v": _V, "k": "link_listed", "to": session_id, "token": token, "rows": rows}


def link_jobs(jobs: list[dict]) -> dict[str, Any]:
    return {"v": _V, "k": "link_jobs", "jobs": jobs}


def link_heartbeat(until: float) -> dict[str, Any]:
    return {"v": _V, "k": "link_hb", "until": until}


def link_reset() -> dict[str, Any]:
    return {"v": _V, "k": "link_reset"}


def link_bye() -> dict[str, Any]:
    return {"v": _V, "k": "link_bye"}
