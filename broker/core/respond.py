"""respond: an agent's output to one of its channels.

The caller must be an agent session. Where it goes is :func:`broker.core.channels.resolve`;
the output is an ``output`` event sent in-band to the channel's live session (if any)
and published on PUB under ``channel:<channel id>``, the same envelope both ways.

Invariants:

* an output to any channel other than the caller's own is never final;
* a respond by draft reference goes only to the caller's own channel;
* the answer's ``sent: true`` means the broker handed the output to those two paths,
  not that anyone read it;
* across brokers: a channel whose live session is on another broker gets the output
  relayed over the link, and that broker publishes it on its own PUB too
  (:func:`relayed`), so it is on the PUB of the caller's broker and of the channel's.
"""

from __future__ import annotations

from schemas import envelopes
from schemas.errors import BusError
from schemas.names import CURRENT, channel_topic

from .activity import touch
from .channels import check_attachments, resolve
from .commands import Publish, Send
from .invoking import caller_conversation
from .sessions import Session
from .state import State


def respond(state: State, session: Session, env: dict, re: str, now: float) -> None:
    """Raises BusError(no_agent | invalid_channel | remote_channel_refused |
    owner_not_configured | channel_not_found | draft_not_current | invalid_params |
    invalid_attachment | attachments_unsupported)."""
    caller = caller_conversation(state, session, "respond")
    conversations = state.conversations
    channel = resolve(conversations, caller, env.get("channel") or CURRENT)
    draft = env.get("draft")
    if draft is not None and channel != caller.channel:
        raise BusError("draft_not_current", channel=channel)
    attachments = check_attachments(channel, env.get("attachments"))
    final = env.get("final", True) is not False and channel == caller.channel
    output = envelopes.output(channel, env["content"], attachments, final, caller.channel)
    target = conversations.get(caller.agent, channel)
    if target is not None and target.live:
        live = state.registry.by_id.get(target.session_id or "")
        if live is not None:
            touch(state, live)
            state.out.append(Send(live.identity, output))
    state.out.append(Publish(channel_topic(channel), output))
    state.stats["respond.sent"] += 1
    answer = {"final": final, "sent": True, "channel": channel}
    if draft is not None:
        answer["draft"] = draft
    state.answer(session, re, answer)


def relayed(state: State, session: Session, output: dict) -> None:
    """An output another broker's respond sent to local ``session`` (relayed over the
    link; the caller then sends it in-band): active, and published here too."""
    touch(state, session)
    channel = output.get("channel")
    if channel.__class__ is str:
        state.out.append(Publish(channel_topic(channel), output))
