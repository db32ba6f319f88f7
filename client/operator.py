"""What a control connection does beyond a session's calls: act for a session, and the
operator's view of the whole broker (see ``broker.core.sessions.acting``).

A mixin of :class:`client.session.Session` (it uses the session's ``_call``), and the
two small rules the session applies for it: what its hello says when it acts for a
session, and the event that tells a session a control connection moved its memberships.
"""

from __future__ import annotations

from typing import Any

from schemas.errors import error_reply
from schemas.names import MEMBERSHIPS_CHANGED


def acting_fields(identity: dict | None) -> dict[str, Any]:
    """The hello fields of a control connection acting for the session of ``identity``
    (an ``intercom_session_identity`` history entry); none without one."""
    if not identity:
        return {}
    return {"actFor": identity.get("sessionId"), "actForToken": identity.get("reclaimSecret")}


def changed_memberships(events: list[dict]) -> list[str] | None:
    """The memberships the last ``memberships_changed`` event among ``events`` states."""
    groups = None
    for event in events:
        if event.get("event") == MEMBERSHIPS_CHANGED and isinstance(event.get("groups"), list):
            groups = [g for g in event["groups"] if isinstance(g, str)]
    return groups


class OperatorMethods:
    def stats(self, top: int | None = None) -> dict[str, Any]:
        """What the broker holds and does, ``top`` rows per largest-first list (see
        ``stats`` in schemas.kinds). Control connections only: a session is refused
        ``control_only``."""
        return self._call("stats", {} if top is None else {"top": top})

    def overview(self) -> dict[str, Any]:
        """Every session (but control connections) and every workflow run the broker
        holds: ``{"ok", "brokerId", "sessions", "workflows"}``. Only for a control
        connection of the broker's operator (over ipc or loopback on its host, or with
        its own CURVE key); anyone else gets ``operator_only``."""
        return self._call("overview", {})

    def end_abandoned_run(self, run_id: str) -> dict[str, Any]:
        """End the workflow run ``run_id`` whose host left and will not come back (a
        dormant run, or one waiting out its host's lease): its queued messages are
        reported undeliverable and the run is forgotten. Answers ``{"ok", "runId",
        "ended", "undeliverable"}``. Only for the operator's control connection (as
        :meth:`overview`); a run with a live host is refused ``run_has_host`` (its host
        ends it with ``end_run``)."""
        if not isinstance(run_id, str) or not run_id:
            return error_reply("invalid_params", detail="run_id must be a non-empty string")
        return self._call("end_run", {"runId": run_id})
