"""Who sent a frame on the broker's ROUTER: what a session's ``peer`` records."""

from __future__ import annotations

import zmq


def peer_of(frame: zmq.Frame, tcp: bool) -> tuple[str, bool]:
    """Who sent ``frame``: its CURVE key when there is one, else the transport's
    peer (on ipc the client's uid:gid:pid, on TCP its address); and whether that is
    only an address (``tcp``: the ROUTER serves TCP), shared by every client on a host."""
    for prop in ("User-Id", "Peer-Address"):
        try:
            value = frame.get(prop)
        except (zmq.ZMQError, KeyError, UnicodeDecodeError):
            continue
        if value:
            return f"{prop}={value}", tcp and prop == "Peer-Address"
    return "", tcp
