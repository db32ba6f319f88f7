"""The frames one client gets for the envelopes of a round.

Several envelopes are packed into as few frames as the frame bounds allow
(:func:`schemas.protocol.pack_frames`); an envelope too large for any client to read
is dropped and counted, and when it answers a request the client gets
``frame_too_large`` in its place, so the call fails instead of waiting forever.
"""

from __future__ import annotations

from collections import Counter
from typing import Callable

from schemas.envelopes import error_result
from schemas.errors import BusError
from schemas.limits import MAX_FRAME_BYTES, MAX_INBOUND_FRAME_BYTES
from schemas.protocol import pack_frames

Encode = Callable[[dict], bytes]


def client_frames(envs: list[dict], encode: Encode, stats: Counter) -> list[bytes]:
    """The frames that carry ``envs`` (in order) to one client."""
    if len(envs) == 1:           # the common case: one envelope, one frame
        frame = encode(envs[0])
        return [frame] if len(frame) <= MAX_INBOUND_FRAME_BYTES else oversize(envs, encode, stats)
    frames, too_large = pack_frames(envs, MAX_FRAME_BYTES, MAX_INBOUND_FRAME_BYTES, encode)
    if too_large:
        frames += oversize(too_large, encode, stats)
    return frames


def oversize(envs: list[dict], encode: Encode, stats: Counter) -> list[bytes]:
    """What takes the place of envelopes no client can read: nothing, or for the
    answer to a request a ``frame_too_large`` refusal."""
    frames = []
    for env in envs:
        stats["dropped.oversize"] += 1
        if env.get("k") == "result" and env.get("re") is not None:
            error = BusError("frame_too_large", size=len(encode(env)), limit=MAX_INBOUND_FRAME_BYTES)
            frames.append(encode(error_result(env["re"], error)))
    return frames
