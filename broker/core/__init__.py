"""The sans-IO routing core: see :mod:`broker.core.kernel.engine`."""

from broker.core.kernel.commands import Command, Persist, Publish, Send
from broker.core.kernel.engine import Engine, IdentityRecord, Limits

__all__ = ["Command", "Engine", "IdentityRecord", "Limits", "Persist", "Publish", "Send"]
