// The respond/invoke side of a session (client/conversation.py, client/respond.py):
// posting output to channels, invoking the agent's other conversations, and the
// conversation's own record. Installed on Session.prototype by index.js.
//
// This client keeps no drafts (no beginTurn/recordDraft): respond({draft}) finds none
// and answers unknown_draft, as the Python client does for a draft never recorded.

import { existsSync } from "node:fs";
import { errorReply } from "./errors.js";
import { RESPONDED } from "./history.js";
import { LIMITS, TOOL_SCHEMAS } from "./schemas.js";
import { validate } from "./validate.js";
import { envelope } from "./wire.js";

const IMAGE_SUFFIXES = [".png", ".jpg", ".jpeg", ".gif", ".webp", ".bmp", ".svg", ".tif", ".tiff", ".avif"];

/** Why an output attachment is not acceptable (schemas/output_attachments.py), or null. */
function attachmentProblem(item) {
  if (item === null || typeof item !== "object" || Array.isArray(item)) return "an attachment must be an object with a path";
  const unknown = Object.keys(item).filter((k) => k !== "path" && k !== "altText").sort();
  if (unknown.length) return `unknown field '${unknown[0]}' (an attachment has path and altText)`;
  const path = item.path;
  if (typeof path !== "string" || !path) return "path must be a non-empty string";
  if ([...path].length > 4096) return "path exceeds 4096 characters";
  if ("altText" in item) {
    if (typeof item.altText !== "string") return "altText must be a string";
    if (!IMAGE_SUFFIXES.some((suffix) => path.toLowerCase().endsWith(suffix))) {
      return `altText is only for images (${IMAGE_SUFFIXES.join(", ")}); '${path}' is not one, and its altText would be dropped`;
    }
    if ([...item.altText].length > LIMITS.ALT_TEXT_CHARS) return `altText exceeds ${LIMITS.ALT_TEXT_CHARS} characters`;
  }
  return null;
}

function respondProblem(params) {
  if (("content" in params) === ("draft" in params)) {
    return errorReply("invalid_params", { detail: "supply exactly one of 'content' or 'draft'" });
  }
  const content = params.content;
  if (typeof content === "string" && [...content].length > LIMITS.MAX_MESSAGE_CHARS) {
    return errorReply("message_too_large", { size: [...content].length, limit: LIMITS.MAX_MESSAGE_CHARS });
  }
  const attachments = params.attachments;
  if (Array.isArray(attachments) && attachments.length <= LIMITS.MAX_ATTACHMENTS) {
    for (let index = 0; index < attachments.length; index++) {
      let problem = attachmentProblem(attachments[index]);
      if (problem === null && !existsSync(attachments[index].path)) problem = `no such file: '${attachments[index].path}'`;
      if (problem) return errorReply("invalid_attachment", { index, detail: problem });
    }
  }
  const problem = validate(TOOL_SCHEMAS.respond, params);
  if (problem) return errorReply("invalid_params", { detail: problem });
  if ("draft" in params && params.channel !== "current") return errorReply("draft_not_current");
  return null;
}

export const ConversationMethods = {
  /** Post this agent's output to a channel: current (default), last, owner or a channel
   * id of the same agent. Resolves to {ok: true, final, sent: true, channel, outputId};
   * `sent` means the broker took it for delivery, not that a person read it. */
  async respond({ content, draft, channel = "current", attachments, final = true } = {}) {
    const params = { channel, final };
    if (content !== undefined && content !== null) params.content = content;
    if (draft !== undefined && draft !== null) params.draft = draft;
    if (attachments !== undefined && attachments !== null) params.attachments = attachments;
    const problem = respondProblem(params);
    if (problem) return problem;
    if (params.draft !== undefined) return errorReply("unknown_draft", { draft: params.draft });
    const result = await this.call("respond", params);
    if (result.ok) {
      this.history.record(RESPONDED, { content: params.content, draft: null, channel,
        attachments: attachments ?? null, final, result });
    }
    return result;
  },

  /** Acknowledge an `output` event this side received: its sender gets output_acked. */
  ackOutput(outputId) {
    if (typeof outputId !== "string" || !outputId) {
      return Promise.resolve(errorReply("invalid_params", { detail: "output_id must be a non-empty string" }));
    }
    return this.call("ack_output", { outputId });
  },

  /** This agent's conversations ({ok: true, sessions: [...]}); a control connection
   * names the `agent`. */
  listSessions(agent = null) {
    return this.call("sessions", agent === null ? {} : { agent });
  },

  /** Queue a turn in another existing persistent conversation of this agent; answered
   * once the job is stored: {ok: true, queued: true, id, session}. */
  async invoke({ session = null, reason = null } = {}) {
    const problem = validate(TOOL_SCHEMAS.invoke, { session, reason });
    if (problem) return errorReply("invalid_params", { detail: problem });
    return this.call("invoke", { session, reason });
  },

  /** Report how the turn of invocation `id` (from an `invocation` event) ended. */
  async finishInvocation(id, { ok = true, error = null } = {}) {
    if (typeof id !== "string" || !id || id.length > 128) {
      return errorReply("invalid_params", { detail: "id must be an invocation id from an invocation event" });
    }
    if (typeof ok !== "boolean") return errorReply("invalid_params", { detail: "ok must be true or false" });
    if (error !== null && (typeof error !== "string" || [...error].length > 4096)) {
      return errorReply("invalid_params", { detail: "error must be a string of at most 4096 characters" });
    }
    if (this.closed) return errorReply("session_closed");
    // The request's own id is the invocation id (the kind's declared `id` field).
    const result = await this.transport.call(envelope("finish_invocation", { id, ok, error }), LIMITS.CALL_TIMEOUT_S);
    return result ?? errorReply("broker_unavailable", { timeout_s: LIMITS.CALL_TIMEOUT_S });
  },

  /** Forget this persistent conversation's response recovery record. */
  reset() {
    return this.call("reset", {});
  },

  /** Delete this persistent conversation's record; the session goes on as ephemeral. */
  delete() {
    return this.call("delete", {});
  },
};
