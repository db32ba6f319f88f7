"""Agent hosts' hooks: what ``python -m client hook EVENT`` sends, answers and prints.

A host (Claude Code, Codex) runs a hook command at fixed points of a session, whatever
the model decides: it writes one JSON object on the command's stdin and reads the
command's stdout when it exits 0. The two hosts share the contract for the events used
here (Claude Code's hooks reference, code.claude.com/docs/en/hooks; Codex's,
developers.openai.com/codex/hooks and the JSON Schemas in openai/codex
``codex-rs/hooks/schema/generated``):

* ``Stop`` (the model is about to end its turn; input ``stop_hook_active``: this stop
  follows a block): ``{"decision": "block", "reason": TEXT}`` keeps it working, with
  TEXT as its next instruction; no output lets the turn end. Claude Code ends the turn
  anyway after 8 blocks in a row.
* ``UserPromptSubmit`` (input ``prompt``) and ``SessionStart`` (input ``source``):
  ``{"hookSpecificOutput": {"hookEventName": EVENT, "additionalContext": TEXT}}`` adds
  TEXT to what the model sees.
* Exit 2 would feed stderr to the model and any other non-zero status is a failed
  hook: the command exits 0 always, printing nothing when it has nothing to add.

The messages themselves are taken by the ``mcp`` server of the same name, the one
owner of the hand-over (:mod:`client.mcp_hooks`); this module holds the pure parts:
the request a hook sends it, the bound on blocked stops, the text and JSON a hook
prints, and the settings block that installs the hooks. No I/O.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from typing import Any

MAX_STOP_BLOCKS = 5          # blocked stops in a row at most (Claude Code gives up at 8)
# What one hook hands over at most, as JSON text: Claude Code is reported to show a
# hook's context of more than 10,000 characters as a preview and a file path. At least
# one message goes however long it is; the rest wait for the next hook, tool result or
# wait.
HOOK_TEXT_CHARS = 9000
HOOK_TIMEOUT_S = 10          # the timeout the settings give each hook command (seconds)


@dataclass(frozen=True, slots=True)
class HookEvent:
    name: str                # the host's event name, as in its settings and stdin
    blocks: bool             # hands over by blocking the stop (else: as added context)
    human_input: bool        # a person just gave the session input


EVENTS: dict[str, HookEvent] = {event.name: event for event in (
    HookEvent("Stop", blocks=True, human_input=False),
    HookEvent("UserPromptSubmit", blocks=False, human_input=True),
    HookEvent("SessionStart", blocks=False, human_input=False),
)}


@dataclass(frozen=True, slots=True)
class HostSettings:
    name: str
    where: str               # where the printed block goes, for the line on stderr


HOSTS: dict[str, HostSettings] = {host.name: host for host in (
    HostSettings("claude", "the \"hooks\" of ~/.claude/settings.json (or a project's "
                 ".claude/settings.json); merge it with hooks you have"),
    HostSettings("codex", "~/.codex/hooks.json (or a repository's .codex/hooks.json); Codex "
                 "asks you to review and trust new hooks, and a Codex that still keeps "
                 "hooks behind a feature flag needs [features] codex_hooks = true in "
                 "config.toml"),
)}


def parse_payload(data: bytes) -> dict[str, Any]:
    """The host's stdin JSON object; {} for anything else (nothing, garbage, a list)."""
    try:
        value = json.loads(data)
    except ValueError:
        return {}
    return value if value.__class__ is dict else {}


def request_for(event: str, payload: dict[str, Any]) -> dict[str, Any] | None:
    """What the hook asks the ``mcp`` server for ``event`` (None: not an event of ours).
    Only what the server decides on is passed on: never the prompt or the transcript."""
    if event not in EVENTS:
        return None
    active = payload.get("stop_hook_active")
    return {"event": event, "stopHookActive": active if active.__class__ is bool else None}


class StopBlocks:
    """The bound on blocked stops: a stop is blocked only to hand over unseen messages,
    and at most ``limit`` times in a row. A stop let through, a prompt, a tool call,
    or the host saying this stop follows no block (``stop_hook_active`` false) starts
    the count again."""

    def __init__(self, limit: int = MAX_STOP_BLOCKS) -> None:
        self.limit = limit
        self.in_a_row = 0

    def may_block(self, unseen: bool, stop_hook_active: bool | None) -> bool:
        if stop_hook_active is False:
            self.in_a_row = 0
        if unseen and self.in_a_row < self.limit:
            self.in_a_row += 1
            return True
        self.in_a_row = 0
        return False

    def reset(self) -> None:
        self.in_a_row = 0


def messages_text(messages: list[dict]) -> str:
    """One sentence for the model, then the messages as the ``wait`` tool gives them."""
    count = len(messages)
    head = (f"Intercom: {count} new message{'' if count == 1 else 's'} for you (below, as the "
            "wait tool gives them); where one expects a reply, answer it with the intercom "
            "tool (action \"reply\", replyTo its id), then go on.")
    return head + "\n" + json.dumps({"ok": True, "messages": messages}, ensure_ascii=False,
                                    default=str)


def hook_output(event: str, answer: dict[str, Any] | None) -> dict[str, Any] | None:
    """What the hook prints for the server's ``answer``, or None to print nothing (no
    server, no messages, a stop let through)."""
    hook = EVENTS.get(event)
    if hook is None or not answer or not answer.get("ok"):
        return None
    messages = answer.get("messages")
    if messages.__class__ is not list or not messages:
        return None
    if hook.blocks:
        return {"decision": "block", "reason": messages_text(messages)} if answer.get("block") \
            else None
    return {"hookSpecificOutput": {"hookEventName": hook.name,
                                   "additionalContext": messages_text(messages)}}


def install_block(command: str, name: str) -> dict[str, Any]:
    """The ``hooks`` settings for every event, for Claude Code's settings.json and
    Codex's hooks.json alike (the two read the same shape): ``command`` is how the
    host's shell starts this client (the ``intercom`` script's absolute path, or
    ``python -m client``)."""
    return {"hooks": {event: [{"hooks": [{
        "type": "command",
        "command": f"{command} hook {event} --name {shlex.quote(name)}",
        "timeout": HOOK_TIMEOUT_S}]}] for event in EVENTS}}
