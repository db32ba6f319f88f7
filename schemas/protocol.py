"""Framing: one msgpack value per ZeroMQ frame, in both directions.

A frame carries either one envelope (a map) or a batch (an array of maps), so a
sender can coalesce writes without a protocol change. What the envelopes hold, kind
by kind, is declared in :mod:`schemas.kinds`; the broker builds its envelopes with
:mod:`schemas.envelopes`. This module only packs and unpacks frames.
"""

from __future__ import annotations

from typing import Any, Callable

import msgpack

from .errors import BusError
from .limits import MAX_BATCH, MAX_FRAME_BYTES, PROTOCOL_VERSION

from .kinds import BROKER_KIND_NAMES as BROKER_KINDS, CLIENT_KIND_NAMES as CLIENT_KINDS  # noqa: F401
from .names import PRESENCE_EVENTS, SESSION_KINDS  # noqa: F401  (their old home)


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
