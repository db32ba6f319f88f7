// A session on the bus, as an agent runtime uses it (client/session.py in JavaScript).
//
// `await Client.connect({...})` opens one; `await session.intercom({action, ...})`
// takes the intercom tool's parameters and resolves to the JSON-ready result the
// tool hands back to the model. Every failure, a bad parameter included, comes back
// as {ok: false, code, error}; only connect throws (ConnectError), because there is
// no session to report through.

import { randomBytes, randomUUID } from "node:crypto";
import { INBOUND_POLICIES, cleanCapabilities } from "./attention.js";
import { errorReply, errorText } from "./errors.js";
import { History, IDENTITY, RECEIVED, SENT } from "./history.js";
import { DEFAULT_LIMIT_BYTES, Inbox, Waitable } from "./inbox.js";
import { ASK_RESEND_DELAY_S } from "./protocol.js";
import { renderBody } from "./render.js";
import { GROUPS, LIMITS } from "./schemas.js";
import { Transport, now } from "./transport.js";
import { intercomParamsProblem } from "./validate.js";
import { envelope } from "./wire.js";

const ASK_MARGIN_S = 5.0;
const STATUS_TIMEOUT_S = 1.0; // see client/status.py
const OUT_OF_REACH = "the broker is out of reach; the session says hello again once it is back";
const NOT_ANSWERING = `the broker did not answer within ${STATUS_TIMEOUT_S} s (gone, or too busy)`;
const UNANSWERED = new Set(["broker_unavailable", "inbox_full"]); // a call given up on
const REPLY_FIELDS = ["from", "fromName", "message", "attachments", "sentAt"]; // of an ask's answer
const SENT_KINDS = new Set(["call", "supervisor"]);
const SENT_ACTIONS = new Set(["send", "ask", "reply"]);
// Calls whose ok answer carries the session's memberships after the change.
const MEMBERSHIP_ACTIONS = new Set(["join", "leave"]);
const MEMBERSHIP_OPS = new Set(["register_run"]);
// Refusals a reply meets when its ask has not been resent to a restarted broker yet.
const AFTER_RESTART = new Set(["unknown_thread", "no_pending_ask", "stale_turn"]);
const RECEIVED_ASKS = 4096; // asks remembered with the broker they came through

export const newMessageId = () => randomUUID();

/** The broker refused the session or did not answer; `code` says which. */
export class ConnectError extends Error {
  constructor(code, text) {
    super(text);
    this.name = "ConnectError";
    this.code = code;
  }
}

/** The client-side settings the Python client reads from its config file. */
export const DEFAULT_CONFIG = Object.freeze({
  replyHint: true,
  maxPendingAsks: LIMITS.MAX_PENDING_ASKS,
  askTimeout: LIMITS.ASK_TIMEOUT_S,
  status: null,
  group: null,
  confirmSend: false,
});

/** The group the environment names (ATOMIC_INTERCOM_GROUP, then PI_INTERCOM_GROUP). */
function envGroup() {
  for (const name of GROUPS.envVars) {
    const value = (process.env[name] ?? "").trim();
    if (value) return value;
  }
  return null;
}

function firstGroup(...candidates) {
  for (const candidate of candidates) {
    if (typeof candidate === "string" && candidate.trim()) return candidate.trim();
  }
  return GROUPS.default;
}

const isPlainObject = (v) => v !== null && typeof v === "object" && !Array.isArray(v);
const sleep = (seconds) => new Promise((resolve) => setTimeout(resolve, seconds * 1000));

export class Session {
  constructor(options) {
    const { name, endpoints, group = null, agent = null, atomicSessionId = null, kind = "interactive",
      parent = null, sessionId = null, token = null, stage = null, transcript = null,
      notifyUndeliverable = true, grant = null, history = null, curve = null,
      inboxLimitBytes = DEFAULT_LIMIT_BYTES, channel = null, persistent = true, cwd = null,
      config = {}, confirm = null, keepUntil = "read", capabilities = null, inbound = null,
      guard = null } = options;
    this.name = name;
    this.endpoint = endpoints[0];
    this.kind = kind;
    this.cwd = cwd;
    this.config = { ...DEFAULT_CONFIG, ...config };
    this.confirm = confirm;
    this.explicitGroup = group;
    this.fallbackGroup = firstGroup(envGroup(), this.config.group);
    this.agent = agent;
    this.atomicSessionId = atomicSessionId;
    this.parent = parent;
    this.stage = stage;
    this.transcript = transcript;
    this.notifyUndeliverable = notifyUndeliverable;
    this.grant = grant;
    this.history = new History(history);
    this.channelAsked = channel;
    this.persistent = persistent;
    // "seen": the broker keeps each message until markSeen() says the program has it;
    // "read": receive() says it.
    this.keepUntil = keepUntil;
    // How messages reach the program behind this session (shown in list rows), and its
    // inbound gate (accept, hold, refuse): stated in every hello.
    this.capabilities = kind === "control" ? null : cleanCapabilities({ host: "node", ...(capabilities ?? {}) });
    this.inbound = inbound;
    // The flood and loop guard on this session's sends (true, or {perMinute, exchanges,
    // pauseS}); off unless asked for.
    this.guard = guard || null;
    this.id = sessionId;
    this.token = token; // the reclaim secret of `id`
    // The same in every hello of this object (its reconnects), different in any other.
    this.instance = randomBytes(12).toString("hex");
    // Grows with each hello (the wall clock in ms, or one more): a late copy of an
    // older hello can neither take this session's id nor open a phantom.
    this.attempt = 0;
    this.welcome = {}; // the broker's latest welcome
    // Brokers seen (a restart is a new broker id) and asks received under each: a
    // reply after a restart may have to wait for its ask's resend (see reply()).
    this.brokerEpoch = 0;
    this.restartedAt = 0;
    this.receivedEpoch = new Map();
    this.homeGroup = null;
    this.groups = [];
    this.parentId = null;
    this.current = null; // the message of the current turn
    this.asksWaiting = 0;
    this.supervisorWaiting = false;
    this.ackedSinceHello = false; // a membership change answered since the last hello
    this.closed = false;
    this.bulkPrefix = randomBytes(12).toString("hex") + "-";
    this.bulkNext = 0;
    this.inbox = new Inbox(() => this.transport.roomMade());
    this.events = new Waitable();
    this.welcomed = new Promise((resolve) => { this.settleWelcome = resolve; });
    this.transport = new Transport({
      endpoints, curve, inboxLimitBytes,
      hello: () => this.hello(),
      onInbound: (msgs, events) => this.onInbound(msgs, events),
      onWelcome: (result) => this.onWelcomed(result),
      inboxSize: () => this.inbox.size,
    });
  }

  // -- connection ------------------------------------------------------------------------

  hello() {
    const fields = {
      id: newMessageId(), name: this.name, sessionKind: this.kind, group: this.explicitGroup,
      fallbackGroup: this.fallbackGroup, agent: this.agent, atomicSessionId: this.atomicSessionId,
      parent: this.parent, stage: this.stage, statusSuffix: this.config.status,
      transcript: this.transcript, notifyUndeliverable: this.notifyUndeliverable,
      keepUntil: this.keepUntil !== "read" ? this.keepUntil : null, grant: this.grant,
      channel: this.channelAsked, persistent: this.persistent, cwd: this.cwd, instance: this.instance,
      attempt: (this.attempt = Math.max(this.attempt + 1, Date.now())),
      capabilities: this.capabilities, inbound: this.inbound, guard: this.guard,
    };
    if (this.id !== null) Object.assign(fields, { sessionId: this.id, token: this.token });
    if (this.homeGroup !== null) {
      // A reconnect keeps the startup identity and the memberships as this side knows
      // them: the broker adopts them, undoing any change never acknowledged.
      Object.assign(fields, { homeGroup: this.homeGroup, groups: [...this.groups] });
    }
    this.ackedSinceHello = false;
    for (const key of Object.keys(fields)) if (fields[key] === null || fields[key] === undefined) delete fields[key];
    return envelope("hello", fields);
  }

  onWelcomed(result) {
    if (result.ok) {
      if (Object.keys(this.welcome).length && result.brokerId !== this.welcome.brokerId) {
        // A restarted (or another) broker: asks received before it are resent by their
        // askers shortly after their own welcome (see reply()).
        this.restartedAt = now();
        this.brokerEpoch += 1;
      }
      const changed = result.sessionId !== this.id || result.token !== this.token;
      const { ok: _ok, ...welcome } = result;
      this.welcome = welcome;
      this.id = result.sessionId;
      this.token = result.token;
      if (changed) {
        this.history.record(IDENTITY, { sessionId: this.id, reclaimSecret: this.token, name: this.name,
          atomicSessionId: this.atomicSessionId, brokerId: result.brokerId ?? null });
      }
      if (this.ackedSinceHello && this.homeGroup !== null) {
        // The broker applied a change before this hello and answered it after the hello
        // was built: the welcome undid it. State the groups again.
        this.transport.resync();
      } else {
        this.groups = [...result.groups];
      }
      this.homeGroup = result.homeGroup;
      this.parentId = result.parent ?? null;
    }
    if (this.settleWelcome !== null) {
      this.settleWelcome(result);
      this.settleWelcome = null;
    }
  }

  /** Wait for the first welcome; throws ConnectError. */
  async waitWelcome(timeout) {
    let timer;
    const expired = new Promise((resolve) => { timer = setTimeout(() => resolve({ expired: true }), timeout * 1000); });
    const refused = this.transport.handshakes.refused().then((why) => ({ refused: why }));
    const result = await Promise.race([this.welcomed, refused, expired]);
    clearTimeout(timer);
    this.transport.handshakes.end();
    let error = null;
    if (result.expired) {
      error = new ConnectError("broker_unavailable", `no broker answered at ${this.endpoint} within ${timeout} s`);
    } else if (result.refused) {
      error = new ConnectError("auth_failed", errorText("auth_failed", { detail: result.refused }));
    } else if (!result.ok) {
      error = new ConnectError(result.code ?? "internal_error", result.error ?? "");
    }
    if (error !== null) {
      this.closed = true;
      await this.transport.close(0.5);
      throw error;
    }
  }

  onInbound(msgs, events) {
    if (msgs.length) this.inbox.putAll(msgs);
    if (events.length) {
      for (const event of events) {
        // The person at the terminal set the gate: the next hello states it again.
        if (event.event === "inbound_changed" && INBOUND_POLICIES.includes(event.policy)) this.inbound = event.policy;
      }
      this.events.putAll(events);
    }
  }

  get connected() {
    return this.transport.connected;
  }

  /** This conversation's channel id, as the broker's welcome gave it. */
  get channel() {
    return this.welcome.channel ?? null;
  }

  /** Leave the bus now: peers see this session gone at once. */
  async close() {
    if (this.closed) return;
    this.closed = true;
    if (this.connected) await this.transport.call(envelope("bye", { id: newMessageId() }), 2.0);
    await this.transport.close();
    this.inbox.release();
    this.events.release();
  }

  // -- the intercom tool -------------------------------------------------------------------

  /** Run one intercom tool call; resolves to the JSON-ready result. */
  async intercom(params = {}) {
    if (!isPlainObject(params)) return errorReply("invalid_params", { detail: "parameters must be of type object" });
    params = Object.fromEntries(Object.entries(params).filter(([, value]) => value !== undefined));
    const problem = intercomParamsProblem(params);
    if (problem) return errorReply(problem[0], problem[1]);
    const action = params.action;
    let timeout = null;
    if (action === "ask") {
      timeout = params.timeout ?? null;
      delete params.timeout;
    }
    if ("timeout" in params) return errorReply("invalid_params", { detail: "timeout applies to ask only" });
    if (action === "status" && "messageId" in params) return this.receipt(params.messageId);
    if (action === "status" && !this.closed) return this.status(params);
    if (this.config.confirmSend && this.confirm !== null && this.kind === "interactive" &&
        (action === "send" || action === "ask") && !("replyTo" in params)) {
      let confirmed = false;
      try {
        confirmed = await this.confirm({ ...params });
      } catch {
        confirmed = false; // a failing dialog must not send, nor throw into the tool
      }
      if (!confirmed) return errorReply("confirmation_declined");
    }
    if (action === "ask") return this.ask("call", params, timeout);
    if (action === "reply" || "replyTo" in params) return this.reply(params);
    return this.call("call", params);
  }

  /** The broker's status answer, or this side's within STATUS_TIMEOUT_S. */
  async status(params) {
    let result = null;
    if (this.connected) {
      const asked = now();
      result = await this.call("call", { ...params }, STATUS_TIMEOUT_S);
      if (UNANSWERED.has(result.code) && (this.transport.heardSince(asked) || this.transport.readingPaused)) {
        // Alive (it sent this session something meanwhile, or this side stopped
        // reading), only slow: the full wait.
        result = await this.call("call", params, LIMITS.CALL_TIMEOUT_S - STATUS_TIMEOUT_S);
      }
      if (result.code !== "broker_unavailable") return result;
    } else {
      // Answered from this side at once: a caller polling status in a loop must still
      // let the event loop run the reconnect it waits for.
      await new Promise((resolve) => setImmediate(resolve));
    }
    return {
      ok: true, connected: false, since: this.transport.silentSince(), sessionId: this.id, name: this.name,
      groups: [...this.groups], homeGroup: this.homeGroup,
      broker: { id: this.welcome.brokerId ?? null, reachable: false },
      detail: result ? NOT_ANSWERING : OUT_OF_REACH,
    };
  }

  /** A reply. After a broker restart the asker resends its ask a few seconds after its
   * own welcome; a reply to a message received before the restart that is refused as
   * unknown is sent again once, when the asker's resend is due. */
  async reply(params) {
    if (this.current !== null && !("currentTurn" in params)) params.currentTurn = this.current.id;
    let result = await this.call("call", { ...params });
    const thread = params.replyTo ?? this.current?.id;
    const epoch = thread !== undefined ? this.receivedEpoch.get(thread) : undefined;
    if (AFTER_RESTART.has(result.code) && epoch !== undefined && epoch < this.brokerEpoch) {
      const wait = this.restartedAt + ASK_RESEND_DELAY_S + 1.0 - now();
      if (wait > 0) await sleep(wait); // until the asker's resend is due
      result = await this.call("call", { ...params });
    }
    return result;
  }

  /** Wait for the reply, within this session's pending-ask limit. */
  async ask(kind, fields, timeout) {
    timeout = Number(timeout || this.config.askTimeout);
    fields.timeout = timeout;
    const limit = this.config.maxPendingAsks;
    if (kind === "call" && this.asksWaiting >= limit) return errorReply("too_many_asks", { limit });
    if (kind === "supervisor") {
      if (this.supervisorWaiting) return errorReply("supervisor_busy");
      this.supervisorWaiting = true;
    } else {
      this.asksWaiting += 1;
    }
    try {
      const result = await this.call(kind, fields, timeout + ASK_MARGIN_S);
      if (result.ok && this.history.enabled) {
        // The reply came as the ask's answer, not through receive(): it is still a
        // message this session received (replyTo: the ask's id).
        const fieldsOf = Object.fromEntries(REPLY_FIELDS.map((k) => [k, result[k] ?? null]));
        this.history.record(RECEIVED, { messageId: result.replyId ?? null, expectsReply: false,
          replyTo: result.messageId ?? null, ...fieldsOf });
      }
      return result;
    } finally {
      if (kind === "supervisor") this.supervisorWaiting = false;
      else this.asksWaiting -= 1;
    }
  }

  /** Ask the session that launched this one and wait for its reply; works across groups.
   * One such wait at a time; it may run beside ordinary asks. */
  async contactSupervisor({ message = null, attachments, timeout } = {}) {
    const fields = { action: "ask", message };
    if (attachments !== undefined && attachments !== null) fields.attachments = attachments;
    const problem = intercomParamsProblem(fields);
    if (problem) return errorReply(problem[0], problem[1]);
    delete fields.action;
    return this.ask("supervisor", fields, timeout ?? null);
  }

  /** Declare that this session can no longer answer asks (a finished child). */
  markTerminal() {
    return this.call("status", { replyCapability: "terminal" });
  }

  async call(kind, fields, timeout = LIMITS.CALL_TIMEOUT_S) {
    if (this.closed) return errorReply("session_closed");
    const changesGroups = MEMBERSHIP_ACTIONS.has(fields.action) || MEMBERSHIP_OPS.has(fields.op);
    const result = await this.transport.call(envelope(kind, { id: newMessageId(), ...fields }), timeout,
      changesGroups ? (answer) => this.membershipAnswered(answer) : null);
    if (result === null) {
      if (this.transport.readingPaused) return this.inboxFull();
      return errorReply("broker_unavailable", { timeout_s: timeout });
    }
    if (SENT_KINDS.has(kind) && SENT_ACTIONS.has(fields.action ?? "ask") && result.ok) {
      this.history.record(SENT, { action: kind === "supervisor" ? "contact_supervisor" : fields.action,
        to: fields.to ?? null, message: fields.message ?? null, replyTo: fields.replyTo ?? null, result });
    }
    return result;
  }

  membershipAnswered(result) {
    // Only acknowledged changes move the client's view (what the next hello states).
    if (result.ok && Array.isArray(result.groups)) {
      this.groups = [...result.groups];
      this.ackedSinceHello = true;
    }
  }

  /** Pipelined send: resolves to the result; many share frames, so throughput is not
   * bound by round trips. A live delivery resolves to {ok: true, delivered: true,
   * messageId} (acknowledged in batches); parameters are checked by the broker. */
  sendNowait(to, message, attachments = null) {
    const msgId = `${this.bulkPrefix}${(this.bulkNext++).toString(16)}`;
    if (!attachments && typeof to === "string" && typeof message === "string") {
      return this.transport.requestSend(to, msgId, message); // runs travel as one `sends`
    }
    const env = envelope("call", { id: msgId, action: "send", to, message, quiet: true });
    if (attachments !== null) env.attachments = attachments;
    return this.transport.request(env);
  }

  // -- inbound -------------------------------------------------------------------------------

  /** What waits for receive() now, and whether reading is paused for it. */
  inboxStatistics() {
    return { messages: this.inbox.length, size: this.inbox.size, limitBytes: this.transport.inboxLimitBytes,
      paused: this.transport.readingPaused, duplicatesDropped: this.inbox.duplicatesDropped };
  }

  inboxFull() {
    const stats = this.inboxStatistics();
    return errorReply("inbox_full", { count: stats.messages, size: stats.size, limit: stats.limitBytes });
  }

  /** The next inbound message (it becomes the current turn), or null on timeout.
   * `timeout` in seconds (null or absent: no limit). */
  async receive(options = {}) {
    const timeout = typeof options === "number" ? options : (options?.timeout ?? null);
    const msg = await this.inbox.take(timeout);
    if (msg === null) return null;
    delete msg.v;
    delete msg.k;
    if (!("attachments" in msg)) msg.attachments = []; // expanded from a msgs batch
    msg.body = renderBody(msg, this.config.replyHint);
    this.current = msg;
    if (this.keepUntil === "read" && !this.closed) this.transport.saw(msg.id);
    if (msg.expectsReply) {
      this.receivedEpoch.set(msg.id, this.brokerEpoch);
      if (this.receivedEpoch.size > RECEIVED_ASKS) this.receivedEpoch.delete(this.receivedEpoch.keys().next().value);
    }
    if (this.history.enabled) {
      const fields = { messageId: msg.id };
      for (const key of ["from", "fromName", "message", "attachments", "sentAt", "expectsReply", "replyTo", "target"]) {
        fields[key] = msg[key] ?? null;
      }
      this.history.record(RECEIVED, fields);
    }
    if (msg.ackRequired && !this.closed) {
      // Taking the message is admission to this session's context: tell the broker.
      this.transport.post(envelope("received", { ids: [msg.id] }));
    }
    return msg;
  }

  /** The program or model has message `messageId` and every message received before
   * it (for keepUntil "seen": until then the broker keeps them for this session's next
   * connection or process). receive() says it by itself otherwise. Anything but a
   * non-empty string is ignored (no message has such an id). */
  markSeen(messageId) {
    if (typeof messageId === "string" && messageId && !this.closed) this.transport.saw(messageId);
  }

  /** Change what this session's list row says about how it is reached (push, hooks,
   * steer: booleans; host: text). Fire and forget; a reconnect states the new set. */
  updateCapabilities(changes = {}) {
    const merged = cleanCapabilities({ ...(this.capabilities ?? {}), ...changes });
    if (JSON.stringify(merged) === JSON.stringify(this.capabilities)) return;
    this.capabilities = merged;
    if (this.connected) this.transport.post(envelope("status", { capabilities: merged }));
  }

  /** A person just gave this session input (a prompt): the broker's loop guard counts
   * the exchanges of its pairs from zero again. Fire and forget; sent in order with
   * what follows, so the next send is judged after it. */
  humanInput() {
    if (this.connected) this.transport.post(envelope("status", { humanInput: true }));
  }

  /** Set the inbound gate: "accept", "hold" (messages from other sessions wait for a
   * person to release or drop them) or "refuse". Answers {ok, policy, held}. */
  async setInbound(policy) {
    if (!INBOUND_POLICIES.includes(policy)) {
      return errorReply("invalid_params", { detail: `policy must be one of ${INBOUND_POLICIES.join(", ")}` });
    }
    const result = await this.call("inbound", { op: "policy", policy });
    if (result.ok) this.inbound = policy;
    return result;
  }

  /** The held messages: {ok, policy, held: [{messageId, from, fromName, sentAt, heldAt,
   * expiresAt, expectsReply, preview, ...}]}, oldest first. */
  heldMessages() {
    return this.call("inbound", { op: "held" });
  }

  /** Deliver a held message (messageId, or {all: true}); its sender hears released. */
  releaseHeld(messageId, options = {}) {
    return settleHeld(this, "release", messageId, options);
  }

  /** Drop a held message (messageId, or {all: true}); its sender hears dropped. */
  dropHeld(messageId, options = {}) {
    return settleHeld(this, "drop", messageId, options);
  }

  /** What became of a message this session sent (its `messageId`): `state` is
   * delivered (handed to the receiver's connection), read (its client has it), seen
   * (handed to its program or model), replied or undelivered (`reason`: session_ended,
   * bound_reached or never_seen), with the wall-clock time each was reached
   * (deliveredAt, readAt, seenAt, repliedAt, undeliveredAt; null until then). A message
   * that was queued for a stage, someone else's, or older than the broker keeps answers
   * unknown_message. */
  receipt(messageId) {
    if (typeof messageId !== "string" || !messageId) {
      return Promise.resolve(errorReply("invalid_params", { detail: "message_id must be a non-empty string" }));
    }
    return this.call("call", { action: "status", messageId });
  }

  /** The next in-band event (presence, undeliverable, undelivered, output, invocation),
   * or null. */
  async nextEvent(options = {}) {
    const timeout = typeof options === "number" ? options : (options?.timeout ?? null);
    const event = await this.events.take(timeout);
    if (event !== null) {
      delete event.v;
      delete event.k;
    }
    return event;
  }

  // -- lifecycle -------------------------------------------------------------------------------

  /** Publish lifecycle status: idle, thinking or tool:<name> (a noninteractive child
   * may also report completed, failed, interrupted or cancelled). */
  setStatus(status) {
    if (typeof status !== "string") return Promise.resolve(errorReply("invalid_status"));
    return this.call("status", { status });
  }
}

/** Release or drop one held message of `session`'s gate, or every one ({all: true}). */
function settleHeld(session, op, messageId, { all = false } = {}) {
  if (all) return session.call("inbound", { op, all: true });
  if (typeof messageId !== "string" || !messageId) {
    return Promise.resolve(errorReply("invalid_params", { detail: "give a messageId, or {all: true}" }));
  }
  return session.call("inbound", { op, messageId });
}
