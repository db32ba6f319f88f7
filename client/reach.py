"""Before waiting for a welcome: can this endpoint work at all?

An endpoint that cannot be parsed is reported at once (``invalid_endpoint``) instead
of after the connect timeout. A broker that is missing or still starting is waited
for, up to that timeout: a connect made while the broker starts must succeed.
"""

from __future__ import annotations

import re

_ENDPOINT = re.compile(r"(ipc|inproc)://.+|tcp://[^:]+:\d+|tcp://\[[0-9a-fA-F:.]+\]:\d+")


def problem(endpoint: object) -> tuple[str, str] | None:
    """(error code, text) when ``endpoint`` can never reach a broker, else None."""
    if isinstance(endpoint, str) and _ENDPOINT.fullmatch(endpoint):
        return None
    return ("invalid_endpoint", f"{endpoint!r} is not an endpoint the client can use "
            "(ipc://PATH or tcp://HOST:PORT)")
