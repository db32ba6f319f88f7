"""The sans-IO routing core: see :mod:`broker.core.engine`."""

from .commands import Command, Persist, Publish, Send
from .engine import Engine, IdentityRecord, Limits

__all__ = ["Command", "Engine", "IdentityRecord", "Limits", "Persist", "Publish", "Send"]
