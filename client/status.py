"""``status`` answered by the client itself when the broker cannot answer it.

A status is how an agent learns whether it is on the bus, so it must not hang: the
broker gets :data:`STATUS_TIMEOUT_S` to answer (a broker killed a moment ago is not
noticed by the liveness check for a few seconds), or the full call timeout when it
sent the session anything meanwhile (alive, only slow); after that, or at once while
the session knows it is disconnected, the answer is what this side knows:
``connected: false``, when the broker was last heard from (``since``), the session's
id, name and memberships as last acknowledged, the broker it was last on
(``broker.id``, with ``reachable: false``), and ``detail`` saying why.
"""

from __future__ import annotations

from typing import Any

STATUS_TIMEOUT_S = 1.0
OUT_OF_REACH = "the broker is out of reach; the session says hello again once it is back"
NOT_ANSWERING = f"the broker did not answer within {STATUS_TIMEOUT_S:g} s (gone, or too busy)"


def local_status(*, since: float | None, session_id: str | None, name: str,
                 groups: list[str], home_group: str | None, broker_id: str | None,
                 detail: str) -> dict[str, Any]:
    """The status answer built without the broker (``since``: wall clock or None)."""
    return {"ok": True, "connected": False, "since": since, "sessionId": session_id,
            "name": name, "groups": list(groups), "homeGroup": home_group,
            "broker": {"id": broker_id, "reachable": False}, "detail": detail}
