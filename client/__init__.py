"""The Python client of the Intercom bus: ``from client import Client``."""

from .connecting import Client
from .session import ConnectError, Session

__all__ = ["Client", "ConnectError", "Session"]
