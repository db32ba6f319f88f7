"""The workflow-host side of a session: registering runs and stages, their states,
grants for launched sessions, and taking a run over.

A mixin of :class:`client.session.Session`: every method is one ``workflow`` (or
``grant``) request through the session's ``_call``.
"""

from __future__ import annotations

from typing import Any


class HostingMethods:
    def register_run(self, run_id: str, stages: list[dict], post_mortem: bool | None = None,
                     late_router: bool | None = None) -> dict[str, Any]:
        """Register a workflow run this session hosts, and join ``workflow:<run_id>``.

        ``stages`` is a tree: each ``{"name", "id"?, "kind"?: "agent"|"prompt"|"tool"|"ui",
        "state"?, "group"?, "intercom"?, "children"?: [...]}``. Registering again merges
        new stages, or resumes a run this session hosted (after a reconnect, or a
        restart with its reclaimed id). ``post_mortem=True`` (or ``late_router``): this
        session answers asks to the run's stages after the run ends (they list ``closed ·
        reply: post-mortem only``); such an ask arrives through ``receive()`` with the
        stage's path in ``stage`` and is answered with ``reply``. The answer's ``runGrant`` lets another session take the
        run over (:meth:`take_over`) once this one is gone.
        """
        fields = {"op": "register_run", "runId": run_id, "stages": stages}
        router = post_mortem if post_mortem is not None else late_router
        if router is not None:
            fields["lateRouter"] = router
        return self._call("workflow", fields)

    def take_over(self, run_id: str, grant: str) -> dict[str, Any]:
        """Host a run whose host is gone, with the ``runGrant`` its host was given."""
        return self._call("workflow", {"op": "take_over", "runId": run_id, "grant": grant})

    def add_stages(self, run_id: str, stages: list[dict], parent: str | None = None) -> dict[str, Any]:
        """Materialize more stages (nested children under ``parent``, a stage path)."""
        return self._call("workflow", {"op": "add_stages", "runId": run_id, "stages": stages,
                                       "parent": parent})

    def set_stage_state(self, run_id: str, stage: str, state: str,
                        saved_session: str | None = None) -> dict[str, Any]:
        """Report a transition: PENDING, RUNNING, completed, failed or skipped.
        ``saved_session="unreadable"``: the stage's saved session cannot be read, so it
        has no held subagents from now on (its own route is unaffected)."""
        fields = {"op": "stage_state", "runId": run_id, "stage": stage, "state": state}
        if saved_session is not None:
            fields["savedSession"] = saved_session
        return self._call("workflow", fields)

    def revoke_stage(self, run_id: str, stage: str) -> dict[str, Any]:
        """Revoke a stage's grant: no session can bind to it with that grant any more."""
        return self._call("workflow", {"op": "revoke_stage", "runId": run_id, "stage": stage})

    def grant_child(self) -> dict[str, Any]:
        """A grant for a child this session is about to launch: ``{"ok": True, "grant"}``.

        The child connects with ``parent=<this session's id>, grant=<grant>``: only
        then does it inherit this session's group and reach it with
        ``contact_supervisor``. A grant admits one child, within two minutes of issue
        (``grant_used``, ``grant_expired`` otherwise); that child reconnecting later
        keeps presenting it and is admitted whenever it comes back. Ask one per child.
        """
        return self._call("grant", {"for": "child"})

    def end_run(self, run_id: str) -> dict[str, Any]:
        """The root run terminated: settle and drop its sticky entries."""
        return self._call("workflow", {"op": "end_run", "runId": run_id})

