"""The ids and tokens the broker hands out.

All come from the OS's CSPRNG (``secrets``): a session's token proves who it is, and
its id must not be guessable either. The UUID form is :mod:`schemas.uuids`.
"""

from __future__ import annotations

import secrets

from schemas.uuids import v4_from_bits


def new_session_id() -> str:
    """A random version 4 UUID, canonical and lower-case."""
    return v4_from_bits(int.from_bytes(secrets.token_bytes(16), "big"))


def new_token() -> str:
    """A session's secret: 256 random bits as 64 hex digits."""
    return secrets.token_hex(32)


def new_hex_id(chars: int) -> str:
    """``chars`` random hex digits: a broker's id, an inproc endpoint's suffix."""
    return secrets.token_hex((chars + 1) // 2)[:chars]
