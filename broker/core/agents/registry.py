"""Agents' conversations: which sessions of which agent exist, live or remembered.

A session that connects with ``agent`` is one **conversation** of that agent, named
by its channel id. A persistent conversation outlives its session (its record is in
the store, it can be listed, invoked, reset and deleted); an ephemeral one is
forgotten when its session leaves. Per-agent settings (:class:`AgentSettings`) come
from the shell, which reads them from the agent's config files.

Invariants the registry keeps:

* a conversation is keyed by (agent, channel) and has at most one live session;
  ``by_session`` maps exactly the live sessions to their conversations (local ones,
  and mirrors of other brokers' sessions: :mod:`broker.core.cluster.remote_conversations`);
* ``agents_of[channel]`` names every agent with a conversation on that channel id
  (so an id of another agent is told apart from an unknown one without a scan);
* ``last_active_at`` is wall time, set when the session starts a turn or receives
  something (:meth:`Conversations.touch`), never by anything else.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator

from schemas.agent_config import DEFAULT_SETTINGS, AgentSettings
from schemas.names import REMOTE

from broker.core.kernel.bounded import RecentMap
from broker.core.kernel.records import ConversationSaved

OUTPUTS_REMEMBERED = 16_384   # outputs that can still be acknowledged: 8,192 to 16,384


@dataclass(slots=True, eq=False)
class SentOutput:
    """An output (a respond) that can be acknowledged: who sent it, to which channel."""

    sender_id: str
    channel: str
    acked: bool = False


def is_remote(channel: str) -> bool:
    return channel.startswith(REMOTE + ":")


@dataclass(slots=True, eq=False)
class Conversation:
    agent: str
    channel: str
    persistent: bool
    last_active_at: float | None = None
    session_id: str | None = None          # the live session, or the last one it had
    live: bool = False                     # a session holds it now (here, or a mirror)
    # Held by another broker's session: its queued jobs there, as that broker says.
    queued_elsewhere: int = 0
    told_at: float | None = None           # last_active_at as last told to other brokers
    told_queued: int = 0                   # its queued jobs here, as last told to them

    @property
    def remote(self) -> bool:
        return is_remote(self.channel)

    def record(self) -> ConversationSaved:
        return ConversationSaved(self.agent, self.channel, self.remote, self.last_active_at,
                                 self.session_id)


class Conversations:
    """Every conversation the broker knows: live ones and remembered persistent ones."""

    def __init__(self) -> None:
        self.by_agent: dict[str, dict[str, Conversation]] = {}
        self.by_session: dict[str, Conversation] = {}
        self.agents_of: dict[str, set[str]] = {}
        self.settings: dict[str, AgentSettings] = {}
        # Recent outputs by outputId, sent from here or relayed here (ack_output).
        self.outputs: RecentMap[str, SentOutput] = RecentMap(OUTPUTS_REMEMBERED)

    def settings_of(self, agent: str) -> AgentSettings:
        return self.settings.get(agent, DEFAULT_SETTINGS)

    def get(self, agent: str, channel: str) -> Conversation | None:
        return self.by_agent.get(agent, {}).get(channel)

    def count(self, agent: str) -> int:
        return len(self.by_agent.get(agent, ()))

    def of_agent(self, agent: str) -> Iterator[Conversation]:
        return iter(self.by_agent.get(agent, {}).values())

    def add(self, conversation: Conversation) -> None:
        self.by_agent.setdefault(conversation.agent, {})[conversation.channel] = conversation
        self.agents_of.setdefault(conversation.channel, set()).add(conversation.agent)

    def forget(self, conversation: Conversation) -> None:
        channels = self.by_agent.get(conversation.agent, {})
        if channels.get(conversation.channel) is conversation:
            del channels[conversation.channel]
            if not channels:
                del self.by_agent[conversation.agent]
            agents = self.agents_of[conversation.channel]
            agents.discard(conversation.agent)
            if not agents:
                del self.agents_of[conversation.channel]
        self.detach(conversation)

    def attach(self, conversation: Conversation, session_id: str) -> None:
        conversation.session_id = session_id
        conversation.live = True
        self.by_session[session_id] = conversation

    def detach(self, conversation: Conversation) -> None:
        if conversation.live and self.by_session.get(conversation.session_id or "") is conversation:
            del self.by_session[conversation.session_id]
        conversation.live = False

    def touch(self, session_id: str, wall: float) -> None:
        """The session started a turn or received something: its conversation is active."""
        conversation = self.by_session.get(session_id)
        if conversation is not None:
            conversation.last_active_at = wall

    def last_active(self, agent: str) -> Conversation | None:
        """The agent's most recently active conversation (None: none ever was)."""
        active = [c for c in self.of_agent(agent) if c.last_active_at is not None]
        return max(active, key=lambda c: c.last_active_at) if active else None


def welcome_fields(conversation: Conversation | None) -> dict[str, Any]:
    if conversation is None:
        return {}
    return {"channel": conversation.channel, "persistent": conversation.persistent}
