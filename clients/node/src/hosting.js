// The workflow-host side of a session (client/hosting.py): registering runs and
// stages, their states, grants for launched sessions, taking a run over. Each method
// is one `workflow` (or `grant`) request; installed on Session.prototype by index.js.

export const HostingMethods = {
  /** Register a workflow run this session hosts, and join `workflow:<runId>`. `stages`
   * is a tree: [{name, id?, kind?, state?, group?, intercom?, children?}]. With
   * `postMortem` (or `lateRouter`) this session answers asks to the run's stages after
   * the run ends. The answer's `grants` (stage path -> grant) are what the stage
   * sessions it launches pass at connect; `runGrant` lets another session take over. */
  registerRun(runId, stages, { postMortem, lateRouter } = {}) {
    const fields = { op: "register_run", runId, stages };
    const router = postMortem ?? lateRouter;
    if (router !== undefined && router !== null) fields.lateRouter = router;
    return this.call("workflow", fields);
  },

  /** Host a run whose host is gone, with the `runGrant` its host was given. */
  takeOver(runId, grant) {
    return this.call("workflow", { op: "take_over", runId, grant });
  },

  /** Materialize more stages (nested children under `parent`, a stage path). */
  addStages(runId, stages, parent = null) {
    return this.call("workflow", { op: "add_stages", runId, stages, parent });
  },

  /** Report a transition: PENDING, RUNNING, completed, failed or skipped. */
  setStageState(runId, stage, state) {
    return this.call("workflow", { op: "stage_state", runId, stage, state });
  },

  /** Revoke a stage's grant: no session can bind to it with that grant any more. */
  revokeStage(runId, stage) {
    return this.call("workflow", { op: "revoke_stage", runId, stage });
  },

  /** A grant for a child this session is about to launch: {ok: true, grant}. The child
   * connects with {parent: <this session's id>, grant}; one grant admits one child. */
  grantChild() {
    return this.call("grant", { for: "child" });
  },

  /** The root run terminated: settle and drop its sticky entries. */
  endRun(runId) {
    return this.call("workflow", { op: "end_run", runId });
  },
};
