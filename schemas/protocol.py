"""The wire protocol: one msgpack value per ZeroMQ frame.

A frame carries either one envelope (a map) or a batch (an array of maps), in both
directions, so a sender can coalesce writes without a protocol change. Every envelope
has ``v`` (protocol version), ``k`` (kind) and, for requests, ``id`` (the caller's
message id). Replies carry ``re``: the id of the request they answer.

Client to broker (``CLIENT_KINDS``):

``hello``      open a session: name, group, fallbackGroup, agent, atomicSessionId,
               sessionKind, parent, sessionId and token (to take an id back), stage.
``call``       an ``intercom`` tool call: ``action`` plus the tool's parameters.
``status``     lifecycle status: ``idle``, ``thinking`` or ``tool:<name>``.
``hb``         heartbeat; the broker answers ``hb``.
``bye``        close the session now.
``supervisor`` ask the launching session (message, attachments, timeout), across groups.
``workflow``   a workflow host operation (``op``: register_run, stage_state, end_run).
``received``   receipt for a delivered message (sticky-delivery bookkeeping).
``sends``      pipelined plain sends to one target: ``to``, and ``ids`` and
               ``messages``, two lists of one length. Each (id, message) pair is
               exactly the quiet ``call`` with ``action: send`` of that id, target and
               text, answered the same way (its id in ``acks``, or its own ``result``).

Broker to client (``BROKER_KINDS``):

``result``     the answer to a request: ``ok`` plus fields, or ``code``/``error``;
               the answer to ``hello`` carries sessionId, token, name, groups, homeGroup.
``msg``        an inbound message for the session.
``msgs``       several ordinary text messages from one sender: ``from``,
               ``fromName``, ``sentAt``, and ``ids`` and ``messages`` as in ``sends``;
               each pair reads as a ``msg`` with no attachments that expects no reply.
``event``      an in-band presence event (also published on PUB, topic = group).
``hb``         heartbeat answer.
``acks``       ``ids``: requests sent with ``quiet: true`` that succeeded (one
               envelope per peer and batch instead of one ``result`` each).
"""

from __future__ import annotations

from typing import Any, Callable

import msgpack

from .errors import BusError
from .limits import MAX_BATCH, MAX_FRAME_BYTES, PROTOCOL_VERSION

CLIENT_KINDS = frozenset({"hello", "call", "status", "hb", "bye", "supervisor", "workflow",
                          "received", "sends"})
BROKER_KINDS = frozenset({"result", "msg", "msgs", "event", "hb", "acks"})

PRESENCE_EVENTS = ("session_joined", "session_left", "presence_update")
SESSION_KINDS = ("interactive", "noninteractive", "stage")



def pack(value: Any) -> bytes:
    """Encode one envelope or a list of envelopes."""
    return msgpack.packb(value, use_bin_type=True)


def new_packer() -> Callable[[Any], bytes]:
    """A reusable encoder (about twice as fast as ``pack``); one per thread of use."""
    return msgpack.Packer(use_bin_type=True, autoreset=True).pack


def pack_frames(envs: list[dict], batch_bytes: int = MAX_FRAME_BYTES,
                max_bytes: int = MAX_FRAME_BYTES,
                encode: Callable[[Any], bytes] = pack) -> tuple[list[bytes], list[dict]]:
    """Pack envelopes, in order, into as few frames as the limits allow.

    A frame holds at most ``MAX_BATCH`` envelopes and, when it holds several, at most
    ``batch_bytes`` bytes. Returns the frames and the envelopes that alone pack to more
    than ``max_bytes`` (left out: the caller answers for them). ``encode`` packs one
    value (an owner's :func:`new_packer`).
    """
    if len(envs) == 1:
        data = encode(envs[0])
        return ([data], []) if len(data) <= max_bytes else ([], envs)
    frames: list[bytes] = []
    oversize: list[dict] = []
    parts: list[bytes] = []
    size = 0
    limit = batch_bytes - 3          # room for the array header
    for env in envs:
        data = encode(env)
        if len(data) > max_bytes:
            oversize.append(env)
            continue
        if parts and (size + len(data) > limit or len(parts) == MAX_BATCH):
            frames.append(_join(parts))
            parts = []
            size = 0
        parts.append(data)
        size += len(data)
    if parts:
        frames.append(_join(parts))
    return frames, oversize


def _join(parts: list[bytes]) -> bytes:
    """A msgpack array of already packed values (an array is its header, then them)."""
    n = len(parts)
    if n == 1:
        return parts[0]
    head = bytes((0x90 | n,)) if n < 16 else b"\xdc" + n.to_bytes(2, "big")
    return head + b"".join(parts)


def unpack_frame(frame: bytes, max_bytes: int = MAX_FRAME_BYTES) -> list[dict]:
    """Decode one frame into a list of envelopes.

    Raises BusError(frame_too_large | malformed_frame | batch_too_large | bad_envelope).
    Only the frame's shape is checked here; each envelope's fields are checked by
    whoever handles its kind.
    """
    if len(frame) > max_bytes:
        raise BusError("frame_too_large", size=len(frame), limit=max_bytes)
    try:
        value = msgpack.unpackb(frame, raw=False, strict_map_key=True)
    except Exception as exc:  # msgpack raises many unrelated types on garbage
        raise BusError("malformed_frame") from exc
    if isinstance(value, dict):
        return [value]
    if isinstance(value, list):
        if len(value) > MAX_BATCH:
            raise BusError("batch_too_large", size=len(value), limit=MAX_BATCH)
        if not value or not all(isinstance(item, dict) for item in value):
            raise BusError("bad_envelope", detail="a batch must be a non-empty array of maps")
        return value
    raise BusError("bad_envelope", detail="a frame must hold a map or an array of maps")


def envelope(kind: str, **fields: Any) -> dict[str, Any]:
    """Build an envelope with the current protocol version."""
    env = {"v": PROTOCOL_VERSION, "k": kind}
    env.update(fields)
    return env


# -- envelope fields -------------------------------------------------------------------
# Each table maps a field to (accepted types, required). ``None`` in the types means
# the field may be null. Tool parameters of ``call`` are checked against the tool's
# JSON Schema instead (see schemas.tools).

_STR = (str,)
_OPT_STR = (str, type(None))
_ID_MAX = 128

HELLO_FIELDS: dict[str, tuple[tuple[type, ...], bool]] = {
    "id": (_STR, True),
    "name": (_STR, True),
    "group": (_OPT_STR, False),            # explicit home group
    "fallbackGroup": (_OPT_STR, False),    # env > config > default, resolved by the client
    "groups": ((list, type(None)), False), # memberships to restore after a reconnect
    "homeGroup": (_OPT_STR, False),        # home group resolved at first connect
    "agent": (_OPT_STR, False),
    "atomicSessionId": (_OPT_STR, False),
    "sessionKind": (_OPT_STR, False),
    "parent": (_OPT_STR, False),
    "sessionId": (_OPT_STR, False),        # id to take back after a restart or reconnect
    "token": (_OPT_STR, False),            # secret proving a previous hold of sessionId
    "stage": (_OPT_STR, False),            # canonical workflow path of a stage session
    "statusSuffix": (_OPT_STR, False),
    "transcript": (_OPT_STR, False),       # a stage's transcript: same one = no duplicates
    "notifyUndeliverable": ((bool, type(None)), False),
}

STATUS_FIELDS = {
    "status": (_OPT_STR, False),
    "replyCapability": (_OPT_STR, False),
}

RECEIVED_FIELDS = {
    "ids": (list, True),
}


def check_fields(env: dict, table: dict[str, tuple[tuple[type, ...], bool]]) -> None:
    """Raise BusError(bad_envelope) if ``env`` breaks ``table``; extra fields are ignored."""
    for name, (types, required) in table.items():
        if name not in env:
            if required:
                raise BusError("bad_envelope", detail=f"missing field {name!r}")
            continue
        value = env[name]
        if not isinstance(value, types) or isinstance(value, bool) and bool not in types:
            raise BusError("bad_envelope", detail=f"field {name!r} has the wrong type")
        if isinstance(value, str) and len(value) > 4096:
            raise BusError("bad_envelope", detail=f"field {name!r} is too long")


def request_id(env: dict) -> str | None:
    """The envelope's message id when it is a usable one, else None."""
    value = env.get("id")
    if isinstance(value, str) and 0 < len(value) <= _ID_MAX:
        return value
    return None
