"""Before waiting for a welcome: can this endpoint work at all, and is anyone there?

An endpoint that cannot be parsed is reported at once (``invalid_endpoint``). Then a
plain socket probe (no ZeroMQ) tells "nobody listens" from "a broker that is slow":
an ipc path with no socket file, or a socket nobody accepts on, or a TCP port that
refuses, is retried for a short grace (a broker started a moment ago is still
binding) and then reported as ``no_broker``, in about a second instead of after the
connect timeout. Anything else (accepted, or a probe that cannot decide, such as a
TCP connect that neither succeeds nor is refused) leaves the full wait to the welcome.

A TCP host given by name is looked up first, once: a name that does not resolve is
``unknown_host``, in the resolver's time (a resolver that has not answered within the
grace leaves the question to ZeroMQ).
"""

from __future__ import annotations

import ipaddress
import socket
import threading
import time

from schemas.endpoints import endpoint_problem
from schemas.errors import error_text

# How long a missing or refusing broker is given to appear, and how often it is probed.
GRACE_S = 1.0
_PROBE_EVERY_S = 0.02


def problem(endpoint: object) -> tuple[str, str] | None:
    """(error code, text) when ``endpoint`` can never reach a broker, else None."""
    why = endpoint_problem(endpoint)
    return None if why is None else ("invalid_endpoint", f"{endpoint!r}: {why}")


def unresolved(endpoint: str, wait_s: float = GRACE_S) -> tuple[str, str] | None:
    """(error code, text) when the host of a TCP ``endpoint`` (a parsed one) is a name
    that does not resolve; None when it resolves, is an address, is not TCP, or the
    resolver gives no answer within ``wait_s``."""
    scheme, _, where = endpoint.partition("://")
    host = where.rpartition(":")[0].strip("[]")
    if scheme != "tcp" or _is_address(host):
        return None
    answer: list[str | None] = []

    def look_up() -> None:
        try:
            socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
            answer.append(None)
        except (socket.gaierror, UnicodeError) as exc:
            answer.append(getattr(exc, "strerror", None) or str(exc))

    # A thread: getaddrinfo has no timeout of its own, and a resolver that is down
    # can take many seconds to say so.
    lookup = threading.Thread(target=look_up, name="intercom-resolve", daemon=True)
    lookup.start()
    lookup.join(wait_s)
    if not answer or answer[0] is None:
        return None
    return "unknown_host", error_text("unknown_host", host=host, endpoint=endpoint,
                                      detail=answer[0])


def _is_address(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return host == "*"
    return True


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
