"""What the client puts into frames and takes out of them, beyond single envelopes.

Outbound, the protocol's outbox holds envelopes (dicts) and pipelined plain sends
queued as ``(to, id, message)`` tuples; :func:`take_envelopes` empties it in order,
packing each run of tuples to one target into one ``sends`` envelope. Inbound,
:func:`expand_msgs` turns a ``msgs`` envelope back into the ``msg`` dicts it stands
for. See :mod:`schemas.protocol` for both kinds.
"""

from __future__ import annotations

from collections import deque

from schemas.limits import MAX_FRAME_BYTES, MAX_SEND_ITEMS, PROTOCOL_VERSION

# Text bytes (an upper bound) of one ``sends`` envelope: a quarter of a frame.
SENDS_BYTES = MAX_FRAME_BYTES // 4


def take_envelopes(outbox: deque, held: dict | None = None) -> list[dict]:
    """Pop everything queued in ``outbox`` (other threads may keep appending) and
    return it as envelopes, in order. A plain send to a target in ``held`` (see
    client.backpressure) joins the end of that target's hold instead."""
    popleft = outbox.popleft
    envs: list[dict] = []
    while outbox:
        item = popleft()
        if item.__class__ is not tuple:
            envs.append(item)
            continue
        to, msg_id, text = item
        if held and to in held:
            held[to].later.append(msg_id)
            continue
        ids = [msg_id]
        texts = [text]
        # An upper bound of the UTF-8 size (exact for ASCII); a message that would
        # take the envelope past SENDS_BYTES starts the next one.
        size = len(text) if text.isascii() else 4 * len(text)
        while outbox and len(ids) < MAX_SEND_ITEMS:
            after = outbox[0]
            if after.__class__ is not tuple or after[0] != to:
                break
            text = after[2]
            size += len(text) if text.isascii() else 4 * len(text)
            if size > SENDS_BYTES:
                break
            popleft()
            ids.append(after[1])
            texts.append(text)
        envs.append({"v": PROTOCOL_VERSION, "k": "sends", "to": to, "ids": ids,
                     "messages": texts})
    return envs


def expand_msgs(env: dict, msgs: list) -> None:
    """Append the ``msg`` envelopes a ``msgs`` envelope stands for to ``msgs``."""
    sender, name, sent_at = env.get("from"), env.get("fromName"), env.get("sentAt")
    ids, texts = env.get("ids"), env.get("messages")
    if not isinstance(ids, list) or not isinstance(texts, list):
        return
    # No "attachments" list here (the session adds it when the message is taken): a
    # dict of atomic values only is not tracked by the garbage collector, which then
    # does not walk a receiver's backlog of them on every collection.
    start = len(msgs)
    msgs.extend({"id": msg_id, "message": text, "sentAt": sent_at, "expectsReply": False,
                 "fromName": name, "from": sender}
                for msg_id, text in zip(ids, texts))
    if env.get("replyable") is False:         # a sender nobody can message (a control one)
        for at in range(start, len(msgs)):
            msgs[at]["replyable"] = False
