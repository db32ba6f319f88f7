"""The Python client of the Intercom bus: ``from client import Client``."""

from .session import Client, ConnectError, Session

__all__ = ["Client", "ConnectError", "Session"]
