"""Before waiting for a welcome: can this endpoint work at all, and is anyone there?

An endpoint that cannot be parsed is reported at once (``invalid_endpoint``). Then a
plain socket probe (no ZeroMQ) tells "nobody listens" from "a broker that is slow":
an ipc path with no socket file, or a socket nobody accepts on, or a TCP port that
refuses, is retried for a short grace (a broker started a moment ago is still
binding) and then reported as ``no_broker``, in about a second instead of after the
connect timeout. Anything else (accepted, or a probe that cannot decide, such as a
TCP connect that neither succeeds nor is refused) leaves the full wait to the welcome.
"""

from __future__ import annotations

import socket
import time

from schemas.endpoints import endpoint_problem
# How long a missing or refusing broker is given to appear, and how often it is probed.
GRACE_S = 1.0
_PROBE_EVERY_S = 0.02


def problem(endpoint: object) -> tuple[str, str] | None:
    """(error code, text) when ``endpoint`` can never reach a broker, else None."""
    why = endpoint_problem(endpoint)
    return None if why is None else ("invalid_endpoint", f"{endpoint!r}: {why}")


def nobody_listens(endpoint: str, grace_s: float = GRACE_S) -> str | None:
    """Why nothing can be listening at ``endpoint`` (a parsed one), after probing it
    for up to ``grace_s``; None once something accepts, or when a probe cannot tell."""
    deadline = time.monotonic() + grace_s
    while True:
        why = _probe(endpoint, max(0.05, deadline - time.monotonic()))
        if why is None or time.monotonic() >= deadline:
            return why
        time.sleep(_PROBE_EVERY_S)    # a poll for the socket to appear, not a settle


def _probe(endpoint: str, timeout_s: float) -> str | None:
    scheme, _, where = endpoint.partition("://")
    if scheme == "ipc":
        family, address = socket.AF_UNIX, where
    elif scheme == "tcp":
        host, _, port = where.rpartition(":")
        family, address = socket.AF_INET, (host.strip("[]"), int(port))
        if ":" in address[0]:
            family = socket.AF_INET6
    else:
        return None                   # inproc: the same process, nothing to probe
    probe = socket.socket(family, socket.SOCK_STREAM)
    probe.settimeout(timeout_s)
    try:
        probe.connect(address)
    except FileNotFoundError:
        return f"no socket file {where}"
    except ConnectionRefusedError:
        return "connection refused"
    except (OSError, ValueError):
        return None                   # unresolvable, unreachable, timed out: let ZeroMQ try
    finally:
        probe.close()
    return None
