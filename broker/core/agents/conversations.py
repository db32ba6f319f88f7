"""Agent sessions as conversations: opened at hello, kept or forgotten at departure,
listed, marked active by turns, reset and deleted.

The registry is :class:`broker.core.agents.registry.Conversations`; this module holds the rules
that change it. :func:`claim` checks a hello's ``agent``/``channel``/``persistent``
before any session exists; :func:`opened` attaches the new session (resuming a
remembered persistent conversation of the same agent and channel) and hands it the
invocations waiting for it; :func:`left` runs at every departure.

Invariants:

* one (agent, channel) has at most one live session: a second live hello is refused
  ``channel_in_use``;
* only persistent conversations are written to the store; their record is saved when
  a session opens one, starts a turn or leaves, and deleted by ``delete``;
* a remembered persistent conversation stays persistent when it is resumed, whatever
  the new hello says (``delete`` is how one stops being kept).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from schemas.agent_config import safe_agent_name
from schemas.errors import BusError
from schemas.limits import MAX_AGENT_CHARS
from schemas.names import INTERNAL

from broker.core.sessions import control
from broker.core.agents import invoke_actions as invoking
from broker.core.agents.activity import touch
from broker.core.agents.registry import Conversation
from broker.core.agents.channels import check_channel
from broker.core.kernel.commands import ReadJobs
from broker.core.agents.invoke_actions import caller_conversation
from broker.core.kernel.records import ConversationDeleted, RecoveryDeleted
from broker.core.sessions.registry import Session
from broker.core.kernel.lifecycle import SessionLeft
from broker.core.kernel.state import State


@dataclass(frozen=True, slots=True)
class Claim:
    agent: str
    channel: str | None        # None: internal:<session id>, known once the id is granted
    persistent: bool


def claim(state: State, env: dict) -> Claim | None:
    """What a hello asks for as an agent session, checked; None without ``agent``.

    Raises BusError(invalid_agent | invalid_channel | channel_in_use |
    too_many_conversations)."""
    agent = env.get("agent")
    if agent is None:
        return None
    if not safe_agent_name(agent):
        raise BusError("invalid_agent", agent=agent, limit=MAX_AGENT_CHARS)
    channel = env.get("channel")
    held = None
    if channel is not None:
        check_channel(channel)
        held = state.conversations.get(agent, channel)
        if held is not None and held.live and not _moving_here(state, held, env):
            raise BusError("channel_in_use", agent=agent, channel=channel)
    if held is None and state.conversations.count(agent) >= state.limits.max_conversations:
        raise BusError("too_many_conversations", agent=agent, limit=state.limits.max_conversations)
    return Claim(agent, channel, env.get("persistent") is not False)


def _moving_here(state: State, held: Conversation, env: dict) -> bool:
    """The hello takes back the id of the mirror holding ``held``: its client moved
    here from another broker (the id's claim decides; the mirror leaves then)."""
    live = state.registry.by_id.get(held.session_id or "")
    return live is not None and live.broker is not None and env.get("sessionId") == live.id


def opened(state: State, session: Session, claim: Claim | None) -> Conversation | None:
    """Attach the new ``session`` to its conversation (new or resumed)."""
    if claim is None:
        return None
    conversations = state.conversations
    channel = claim.channel or f"{INTERNAL}:{session.id}"
    conversation = conversations.get(claim.agent, channel)
    if conversation is None or conversation.live:
        # (live: an internal:<id> channel of a session whose id was reissued; not a claim)
        conversation = Conversation(claim.agent, channel, claim.persistent)
        conversations.add(conversation)
    conversations.attach(conversation, session.id)
    _save(state, conversation)
    state.stats["conversations.opened"] += 1
    return conversation


def joined(state: State, conversation: Conversation | None, now: float) -> None:
    """After the welcome: invocations waiting for this conversation may start, and,
    once another broker has shared the store, those it committed are read from it (it
    may have died before this session connected here)."""
    if conversation is None:
        return
    invoking.offer(state, (conversation.agent, conversation.channel), now)
    if conversation.persistent and state.cluster.shared:
        state.out.append(ReadJobs(conversation.agent, conversation.channel))


def read_jobs_again(state: State) -> None:
    """Another broker was out of reach and speaks again: jobs it committed for the
    conversations here meanwhile may have been sent over a link that dropped them
    (``link_jobs``), so each persistent conversation of a session here reads its
    queued jobs from the store once more (the ones held already are not taken twice)."""
    by_id = state.registry.by_id
    for session_id, conversation in state.conversations.by_session.items():
        session = by_id.get(session_id)
        if conversation.persistent and session is not None and session.broker is None:
            state.out.append(ReadJobs(conversation.agent, conversation.channel))


def left(state: State, session: Session) -> None:
    """The session is gone: a running invocation failed; an ephemeral conversation is
    forgotten, a persistent one remembered with its last activity."""
    conversation = state.conversations.by_session.get(session.id)
    if conversation is None:
        return
    if session.broker is not None:
        return      # a mirror's: broker.core.cluster.remote_conversations.session_left
    invoking.session_left(state, conversation)
    if conversation.persistent:
        state.conversations.detach(conversation)
        _save(state, conversation)
    else:
        state.conversations.forget(conversation)


def _save(state: State, conversation: Conversation) -> None:
    if conversation.persistent:
        state.persist(conversation.record())


# -- handlers ---------------------------------------------------------------------------

def turn(state: State, session: Session, env: dict, re: str | None, now: float) -> None:
    """``turn``: the session starts a turn, so it is the agent's most recently active."""
    conversation = caller_conversation(state, session, "turn")
    touch(state, session)
    _save(state, conversation)


def sessions(state: State, session: Session, env: dict, re: str, now: float) -> None:
    """``sessions``: the caller's agent's conversations (a control connection: the
    named agent's), most recently active first. Reads only: it takes no invocation.

    Raises BusError(no_agent | control_only | missing_param | invalid_agent)."""
    agent, caller = control.listed_agent(session, env), None
    if agent is None:
        caller = caller_conversation(state, session, "list_sessions")
        agent = caller.agent
    rows = [_row(c, c is caller, invoking.queued_count(state, c))
            for c in state.conversations.of_agent(agent)]
    rows.sort(key=lambda r: (r["lastActiveAt"] is None, -(r["lastActiveAt"] or 0.0), r["session"]))
    state.answer(session, re, {"sessions": rows})


def _row(conversation: Conversation, current: bool, queued: int) -> dict[str, Any]:
    return {"session": conversation.channel, "persistent": conversation.persistent,
            "remote": conversation.remote, "connected": conversation.live,
            "lastActiveAt": conversation.last_active_at, "queuedInvocations": queued,
            "current": current}


def reset(state: State, session: Session, env: dict, re: str, now: float) -> None:
    """``reset``: forget the response_recovery row. Raises BusError(no_agent | not_persistent)."""
    conversation = _own_persistent(state, session, "reset")
    state.persist(RecoveryDeleted(conversation.agent, conversation.channel),
                  lambda at: invoking.tell(state, session, re, {}),
                  lambda at, error: invoking.tell(state, session, re, error))


def delete(state: State, session: Session, env: dict, re: str, now: float) -> None:
    """``delete``: the record, its recovery row and its queued invocations go; the live
    session goes on as ephemeral. Raises BusError(no_agent | not_persistent)."""
    conversation = _own_persistent(state, session, "delete")
    conversation.persistent = False
    dropped = state.invocations.drop_queued((conversation.agent, conversation.channel))
    state.stats["invocations.deleted"] += dropped

    def refused(at: float, error: BusError) -> None:
        conversation.persistent = True      # the store still has it (its queued jobs too)
        invoking.tell(state, session, re, error)

    state.persist(ConversationDeleted(conversation.agent, conversation.channel),
                  lambda at: invoking.tell(state, session, re, {}), refused)


def _own_persistent(state: State, session: Session, what: str) -> Conversation:
    conversation = caller_conversation(state, session, what)
    if not conversation.persistent:
        raise BusError("not_persistent")
    return conversation


def session_left(state: State, event: SessionLeft) -> None:
    """Lifecycle listener: see :func:`left`."""
    left(state, event.session)
