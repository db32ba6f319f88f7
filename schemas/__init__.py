"""The wire protocol and tool contract of the Intercom bus, defined once.

Imported by both the broker and the client; imports neither.
"""

from .errors import ERRORS, BusError, error_reply, error_text
from .limits import PROTOCOL_VERSION

__all__ = ["ERRORS", "BusError", "PROTOCOL_VERSION", "error_reply", "error_text"]
