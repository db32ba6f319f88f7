"""The UUID form the protocol uses for session and message ids, without ``uuid``.

``uuid`` imports ``platform`` and its regular expressions: a few milliseconds of every
broker's and every CLI call's start, for a format of one line. The random bits come
from the caller: the broker draws session ids from the OS's CSPRNG, a client draws
message ids from a generator of its own (see ``client/ids.py``).
"""

from __future__ import annotations

import re

_V4_CLEAR = ~((0xF000 << 64) | (0xC000 << 48))     # the version nibble and variant bits
_V4_SET = (0x4000 << 64) | (0x8000 << 48)          # version 4, RFC 4122 variant
_CANONICAL = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")


def v4_from_bits(bits: int) -> str:
    """The version 4 UUID made of 128 random ``bits`` (122 of them kept), canonical
    and lower-case."""
    h = f"{bits & _V4_CLEAR | _V4_SET:032x}"
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def is_uuid(value: str) -> bool:
    """True for a UUID written canonically (8-4-4-4-12 hex digits, either case)."""
    return _CANONICAL.fullmatch(value) is not None
