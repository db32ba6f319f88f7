"""The sans-IO routing core: see :mod:`broker.core.assembly.engine`."""

from broker.core.kernel.commands import Command, Persist, Publish, Send
from broker.core.assembly.engine import Engine, IdentityRecord, Limits

__all__ = ["Command", "Engine", "IdentityRecord", "Limits", "Persist", "Publish", "Send"]
