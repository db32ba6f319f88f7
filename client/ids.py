"""Message ids the client picks for its requests."""

from __future__ import annotations

import random

_bits = random.getrandbits
_V4_CLEAR = ~((0xF000 << 64) | (0xC000 << 48))
_V4_SET = (0x4000 << 64) | (0x8000 << 48)


def new_message_id() -> str:
    """A random (version 4) UUID string, without uuid4()'s urandom call and UUID object.

    Message ids need to be unique, not secret: the ``random`` generator (seeded from
    urandom, reseeded in forked children) gives 122 random bits like uuid4 does.
    """
    h = f"{_bits(128) & _V4_CLEAR | _V4_SET:032x}"
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
