"""What the routing core asks the IO shell to do.

The core never performs IO: every handler appends commands to a list that the shell
executes in order. Commands are small immutable records.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Send:
    """Deliver ``env`` to the peer connected as ``identity`` (a ROUTER routing id)."""

    identity: bytes
    env: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Publish:
    """Publish a presence event on the PUB socket under ``topic`` (a group name)."""

    topic: str
    env: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Persist:
    """Write ``op`` to the store; when ``ticket`` is set, report back once it is durable."""

    op: tuple
    ticket: int | None = None


Command = Send | Publish | Persist
