"""The ids and tokens the broker hands out, and the check of an id a client asks for.

Both come from the OS's CSPRNG (``secrets``): a session's token proves who it is, and
its id must not be guessable either. They are formatted here rather than by ``uuid``,
whose import pulls in ``platform`` and its regular expressions, a few milliseconds of
every broker's and every CLI call's start.
"""

from __future__ import annotations

import re
import secrets

_VERSION_4 = ~((0xF000 << 64) | (0xC000 << 48)), (0x4000 << 64) | (0x8000 << 48)
_UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")


def new_session_id() -> str:
    """A random (version 4, RFC 4122 variant) UUID in its canonical lower-case form."""
    clear, set_bits = _VERSION_4
    h = f"{int.from_bytes(secrets.token_bytes(16), 'big') & clear | set_bits:032x}"
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def new_token() -> str:
    """A session's secret: 256 random bits as 64 hex digits."""
    return secrets.token_hex(32)


def new_hex_id(chars: int) -> str:
    """``chars`` random hex digits: a broker's id, an inproc endpoint's suffix."""
    return secrets.token_hex((chars + 1) // 2)[:chars]


def is_uuid(value: str) -> bool:
    """True for a UUID written canonically (8-4-4-4-12 hex digits, either case)."""
    return _UUID.fullmatch(value) is not None
