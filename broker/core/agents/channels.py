"""Where a respond goes: channel ids, aliases, the remote rule and attachment rules.

A channel id is ``<platform>:<rest>`` (platform discord, remote or internal, at most
MAX_CHANNEL_CHARS). ``current`` is the caller's own channel, ``last`` the agent's most
recently active conversation (the caller itself when none ever was), ``owner`` the
agent's configured ``ownerId``; anything else must name an existing conversation of
the same agent.

Invariants:

* a remote caller (channel ``remote:...``) reaches only ``current`` or an existing
  ``remote:`` conversation of its agent: every other choice is refused before anything
  is resolved, so what it learns is the same whether the target exists or not;
* only platforms in ATTACHMENT_PLATFORMS carry attachments, each checked by the rule
  both sides share (:mod:`schemas.output_attachments`: altText on images only). The
  broker checks paths as text, never opens them.
"""

from __future__ import annotations

from typing import Any

from schemas.agent_config import channel_problem
from schemas.errors import BusError
from schemas.limits import MAX_ATTACHMENTS, MAX_CHANNEL_CHARS
from schemas.names import ATTACHMENT_PLATFORMS, CHANNEL_ALIASES, CURRENT, LAST, OWNER
from schemas.output_attachments import attachment_problem

from broker.core.agents.registry import Conversation, Conversations, is_remote


def check_channel(channel: str) -> str:
    """``channel`` when it is a channel id. Raises BusError(invalid_channel)."""
    if channel_problem(channel):
        raise BusError("invalid_channel", channel=channel, limit=MAX_CHANNEL_CHARS)
    return channel


def resolve(conversations: Conversations, caller: Conversation, channel: str) -> str:
    """The channel id ``channel`` (an alias or an id) names for ``caller``.

    Raises BusError(remote_channel_refused | owner_not_configured | invalid_channel |
    channel_not_found)."""
    if channel == CURRENT:
        return caller.channel
    if caller.remote and (channel in CHANNEL_ALIASES or not is_remote(channel)):
        raise BusError("remote_channel_refused", channel=channel)
    if channel == LAST:
        last = conversations.last_active(caller.agent)
        return (last or caller).channel
    if channel == OWNER:
        owner = conversations.settings_of(caller.agent).owner_id
        if owner is None:
            raise BusError("owner_not_configured", agent=caller.agent)
        return owner
    check_channel(channel)
    if conversations.get(caller.agent, channel) is None:
        raise BusError("channel_not_found", channel=channel, agent=caller.agent)
    return channel


def check_attachments(channel: str, attachments: Any) -> list[dict[str, str]]:
    """The attachments as carried to ``channel``.

    Raises BusError(invalid_params | invalid_attachment | attachments_unsupported)."""
    if not attachments:
        return []
    if not isinstance(attachments, list) or len(attachments) > MAX_ATTACHMENTS:
        raise BusError("invalid_params", detail=f"attachments must be a list of at most "
                       f"{MAX_ATTACHMENTS} {{path, altText?}} objects")
    for index, item in enumerate(attachments):
        problem = attachment_problem(item)
        if problem:
            raise BusError("invalid_attachment", index=index, detail=problem)
    if channel.partition(":")[0] not in ATTACHMENT_PLATFORMS:
        raise BusError("attachments_unsupported", channel=channel)
    return [dict(item) for item in attachments]

