"""respond: an agent's output to one of its channels.

The caller must be an agent session. Where it goes is :func:`broker.core.agents.channels.resolve`;
the output is an ``output`` event sent in-band to the channel's live session (if any)
and published on PUB under ``channel:<channel id>``, the same envelope both ways.

Invariants:

* an output to any channel other than the caller's own is never final;
* a respond by draft reference names ``current`` (so goes only to the caller's own
  channel): not ``last``, not a channel id, not even the caller's own;
* the answer's ``sent: true`` means the broker handed the output to those two paths,
  not that anyone read it; a receipt is the ``output_acked`` event, sent to the
  responding session when the channel's side acknowledges the answer's ``outputId``
  (:func:`ack_output`), once per output, for the latest outputs this broker saw;
* across brokers: a channel whose live session is on another broker gets the output
  relayed over the link, and that broker publishes it on its own PUB too
  (:func:`relayed`), so it is on the PUB of the caller's broker and of the channel's.
"""

from __future__ import annotations

from schemas import envelopes
from schemas.errors import BusError
from schemas.names import CURRENT, channel_topic

from broker.core.agents.activity import touch
from broker.core.agents.registry import SentOutput
from broker.core.agents.channels import check_attachments, resolve
from broker.core.kernel.commands import Publish, Send
from broker.core.agents.invoke_actions import caller_conversation
from broker.core.sessions.registry import Session
from broker.core.kernel.state import State


def respond(state: State, session: Session, env: dict, re: str, now: float) -> None:
    """Raises BusError(no_agent | invalid_channel | remote_channel_refused |
    owner_not_configured | channel_not_found | draft_not_current | invalid_params |
    invalid_attachment | attachments_unsupported)."""
    caller = caller_conversation(state, session, "respond")
    conversations = state.conversations
    requested = env.get("channel") or CURRENT
    draft = env.get("draft")
    if draft is not None and requested != CURRENT:
        # The alias itself, not where it resolves: "last" or the caller's own id may
        # name this channel now, yet only "current" carries a draft of this turn.
        raise BusError("draft_not_current", channel=requested)
    channel = resolve(conversations, caller, requested)
    attachments = check_attachments(channel, env.get("attachments"))
    final = env.get("final", True) is not False and channel == caller.channel
    output_id = state.new_id()
    output = envelopes.output(channel, env["content"], attachments, final, caller.channel,
                              output_id, session.id)
    answer = {"final": final, "sent": True, "channel": channel, "outputId": output_id}
    if channel in conversations.settings_of(caller.agent).no_delivery:
        # The agent's send filter (delivery.toml): the send path completed by design
        # without delivering, so ``sent`` stays true, and ``delivery`` says so.
        state.stats["respond.filtered"] += 1
        answer["delivery"] = "none"
        if draft is not None:
            answer["draft"] = draft
        state.answer(session, re, answer)
        return
    conversations.outputs[output_id] = SentOutput(session.id, channel)
    target = conversations.get(caller.agent, channel)
    if target is not None and target.live:
        live = state.registry.by_id.get(target.session_id or "")
        if live is not None:
            touch(state, live)
            state.out.append(Send(live.identity, output))
    state.out.append(Publish(channel_topic(channel), output))
    state.stats["respond.sent"] += 1
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
        output_id, sender_id = output.get("outputId"), output.get("fromId")
        if output_id.__class__ is str and sender_id.__class__ is str:
            state.conversations.outputs[output_id] = SentOutput(sender_id, channel)


def ack_output(state: State, session: Session, env: dict, re: str, now: float) -> None:
    """The channel's own session (the agent session holding that channel: a runtime's
    conversation, or the bridge that is its session on a remote platform) acknowledges
    an output: its sender hears ``output_acked`` once (over a link when it is on
    another broker). Knowing the ``outputId`` is not enough: PUB subscribers see it.
    Raises BusError(unknown_output | not_output_channel)."""
    output_id = env["outputId"]
    sent = state.conversations.outputs.get(output_id)
    if sent is None:
        raise BusError("unknown_output", output_id=output_id)
    mine = state.conversations.by_session.get(session.id)
    if mine is None or mine.channel != sent.channel:
        raise BusError("not_output_channel", channel=sent.channel)
    sender = state.registry.by_id.get(sent.sender_id)
    told = sender is not None
    if not sent.acked:
        sent.acked = True
        state.stats["respond.acked"] += 1
        if sender is not None:
            state.out.append(Send(sender.identity, envelopes.output_acked(output_id, sent.channel)))
    state.answer(session, re, {"acked": True, "outputId": output_id, "told": told})
