"""ZeroMQ endpoints the bus uses, checked the same way by the broker and the client.

``ipc://PATH``, ``inproc://NAME`` (tests, one process) and ``tcp://HOST:PORT`` with a
port from 1 to 65535 (a bind may also say ``*``: any free port). ``HOST`` is a name,
an IPv4 address or an IPv6 one in brackets. libzmq itself takes some endpoints that
are not what anyone meant (a port past 65535 binds some other port), so an endpoint
is checked here before it is used.
"""

from __future__ import annotations

import re

_TCP = re.compile(r"tcp://(?P<host>\[[0-9a-fA-F:.]+\]|[^:/\[\]\s]+):(?P<port>\d{1,5}|\*)")
MAX_PORT = 65535


def endpoint_problem(endpoint: object, *, bind: bool = False) -> str | None:
    """Why ``endpoint`` cannot be used (to bind, when ``bind``), or None; the text
    does not repeat the endpoint (the caller names it)."""
    if not isinstance(endpoint, str) or not endpoint:
        return "not an endpoint (expected ipc://PATH or tcp://HOST:PORT)"
    scheme, sep, where = endpoint.partition("://")
    if sep and scheme in ("ipc", "inproc"):
        if where and not any(ord(c) < 32 for c in where):
            return None
        return "no usable path after ipc://"
    match = _TCP.fullmatch(endpoint) if scheme == "tcp" else None
    if match is None:
        return "not an endpoint (expected ipc://PATH or tcp://HOST:PORT)"
    port = match["port"]
    if port == "*":
        return None if bind else "a client needs the port number, not '*'"
    if not 1 <= int(port) <= MAX_PORT:
        return f"port {int(port)} is not between 1 and {MAX_PORT}"
    return None
