// The client's side of the wire protocol, sans IO: what to send, and what came back.
// A port of client/protocol.py; its theory of operation holds here word for word:
//
// * Each request owed an answer is in the owed table (id -> owed object: the driver's
//   pending call, of which only `request`, the envelope or PlainSend, and `madeAt`
//   are read here), in the order it was made. An answer removes its entry, so it is
//   answered at most once; an answer for an id not owed is dropped.
// * The connection is the state machine NEXT, keyed (state, input). Entering GREETING
//   makes a hello due, built when the next frames are (it states what the session
//   knows). Nothing else leaves while not CONNECTED. Entering CONNECTED rebuilds the
//   outbox: every owed request sent before, in order, under its own id (the broker
//   deduplicates), then what waited, less what was given up on. An ask goes again
//   ASK_RESEND_DELAY_S after the welcome, with what is left of its own timeout.
// * What arrived before a welcome is reported before it, what arrived after, after it.
// * Receipts: the broker keeps each live message until this side reports it read (the
//   `read` byte count) or, for a session that asked so (hello `keepUntil: "seen"`),
//   seen (`seenThrough`: the newest message id the program took; it and every message
//   delivered before it count as seen). Both ride on a heartbeat made due ACK_DELAY_S
//   after the first message that arrived, or was taken, since the last report (never
//   one per frame: a busy receiver reports in batches); `ackDueAt()` tells the driver
//   when. After every new hello the seen id is told again (the broker resends what it
//   did not hear of, and the session's inbox drops the copies by id).
// * While the driver pauses reading (its inbox is full) silence proves nothing.
// * Closing is a latch: every owed request fails with session_closed, and so does
//   every request made later.
//
// JavaScript runs it on one thread, so none of the Python side's locking remarks apply.

import { BusError } from "./errors.js";
import { LIMITS, REDIRECTS } from "./schemas.js";
import { PlainSend, envelope, expandMsgs, pack, packFrames, takeEnvelopes, unpackFrame, wireInt } from "./wire.js";

export const TIMER_INTERVAL_S = LIMITS.HEARTBEAT_S / 2; // the longest a driver may go without timers()
const DEFAULT_REPORT_BYTES = LIMITS.MAX_BACKLOG_BYTES / 8; // until a welcome tells the broker's bound
// A live peer says hello to a restarted broker within a heartbeat and a reconnect
// interval (at most 1 s): twice that, and a little.
export const ASK_RESEND_DELAY_S = 2 * LIMITS.HEARTBEAT_S + 0.5;
// A run moves only once its old host's lease has ended: a stage told "moving" keeps
// asking, pauses doubling up to 2 s, for a minute; the driver tries another endpoint
// when one broker keeps saying it.
const REDIRECT_DELAY_S = 0.2; // the first pause before a hello to the same broker again
const REDIRECT_DELAY_MAX_S = 2.0;
const REDIRECT_PATIENCE_S = 60.0; // redirected in a row this long without a welcome: it stands
export const ROTATE_AFTER = 3; // "moving" from one broker this often in a row: try another
// An ask resent at its deadline still goes with a valid timeout; its caller's own
// deadline, a few seconds later, ends the wait in any case.
const MIN_RESENT_TIMEOUT_S = 0.5;

export const State = Object.freeze({ GREETING: "greeting", CONNECTED: "connected", REFUSED: "refused" });
const Input = Object.freeze({
  WELCOME: "welcome", // the current hello answered ok
  REFUSAL: "refusal", // the current hello answered with an error
  NOT_CONNECTED: "not_connected", // a request answered not_connected: the broker forgot us
  SILENCE: "silence", // nothing heard from the broker for LIVENESS_S
  RESYNC: "resync", // the welcome missed a change acknowledged meanwhile
});

// (state, input) -> next state; a pair not listed changes nothing.
const NEXT = new Map([
  [`${State.GREETING}|${Input.WELCOME}`, State.CONNECTED],
  [`${State.GREETING}|${Input.REFUSAL}`, State.REFUSED],
  [`${State.CONNECTED}|${Input.NOT_CONNECTED}`, State.GREETING],
  [`${State.CONNECTED}|${Input.SILENCE}`, State.GREETING],
  [`${State.CONNECTED}|${Input.RESYNC}`, State.GREETING],
]);

export class ClientProtocol {
  /** `hello()` builds a hello envelope (with `id`) from what the session knows. */
  constructor(hello) {
    this.hello = hello;
    this.outbox = []; // envelopes and PlainSends, in order
    this.owed = new Map();
    this.closed = false;
    this.state = State.GREETING;
    this.lastHeard = 0; // monotonic seconds of the broker's last frame
    this.lastSent = 0;
    this.helloDue = true;
    this.helloId = null; // the hello out; its answer is the welcome
    this.redirect = null; // where the broker sent our hello (the driver moves there)
    this.redirectKey = null;
    this.redirects = 0; // in a row (the driver rotates on it)
    this.redirectSince = null;
    this.helloAt = null;
    this.heartbeatDue = false;
    // Bytes read since the hello, and as last told: the broker bounds what this session
    // may leave unread (its backlog), so reads are reported as they go.
    this.readBytes = 0;
    this.reported = 0;
    this.reportEvery = DEFAULT_REPORT_BYTES;
    this.unreportedAt = null; // a message read since the last report: when
    // The newest message id the program took, the last one told (since the hello), and
    // when it was first noticed untold.
    this.seenThrough = null;
    this.seenTold = null;
    this.seenNoticedAt = null;
    this.readingPaused = false; // set by the driver
    this.deferred = []; // ids of asks to resend at deferredAt
    this.deferredAt = 0;
    this.ready = [];
    this.msgs = [];
    this.events = [];
    this.answers = [];
  }

  get connected() {
    return this.state === State.CONNECTED;
  }

  // -- caller side ---------------------------------------------------------------------

  /** Queue `owed.request` (id `msgId`) and owe `owed` its answer; returns null, or once
   * closed the session_closed answer to give it now. */
  request(msgId, owed) {
    if (this.closed) return new BusError("session_closed").reply();
    this.owed.set(msgId, owed);
    this.outbox.push(owed.request);
    return null;
  }

  /** Queue an envelope that gets no answer. */
  post(env) {
    this.outbox.push(env);
  }

  /** The program took message `msgId` (it and everything delivered before it are seen):
   * told in a heartbeat due ACK_DELAY_S after the first take not told yet. */
  saw(msgId, now) {
    this.seenThrough = msgId;
    if (this.seenNoticedAt === null && this.seenPending()) this.seenNoticedAt = now;
  }

  /** Owe nothing for `msgId` any more (its caller gave up). */
  forget(msgId) {
    this.owed.delete(msgId);
  }

  /** Owe nothing any more: each owed object with its session_closed answer. */
  close() {
    this.closed = true;
    const failed = [...this.owed.values()].map((owed) => [owed, new BusError("session_closed").reply()]);
    this.owed.clear();
    return failed;
  }

  // -- socket side -----------------------------------------------------------------------

  wantsToSend() {
    return (this.outbox.length > 0 && this.state === State.CONNECTED) || this.helloDue || this.heartbeatDue;
  }

  /** Everything due, in order, in as few frames as the limits allow: a due hello first,
   * then what callers queued, then a due heartbeat. A request too large for a frame is
   * left out and answered request_too_large in the next events. */
  framesToSend(now) {
    let envs = [];
    if (this.state === State.CONNECTED && this.outbox.length) {
      envs = takeEnvelopes(this.outbox);
      this.outbox = [];
    }
    if (this.helloDue) {
      this.helloDue = false;
      const hello = this.hello();
      this.helloId = hello.id;
      envs.unshift(hello);
      this.readBytes = this.reported = 0; // the broker counts from the hello too
      this.seenTold = null; // and hears what was seen again
    }
    if (this.heartbeatDue) {
      this.heartbeatDue = false;
      const hb = envelope("hb", { read: wireInt(this.readBytes) });
      if (this.seenPending()) hb.seenThrough = this.seenTold = this.seenThrough;
      this.seenNoticedAt = this.unreportedAt = null;
      envs.push(hb);
      this.reported = this.readBytes;
    }
    if (!envs.length) return [];
    const [frames, oversize] = packFrames(envs);
    this.lastSent = now;
    if (oversize.length) this.refuseOversize(oversize);
    return frames;
  }

  /** Read one frame from the broker; what it meant is in the next events. A frame that
   * does not decode is dropped, but still shows the broker alive. */
  receiveFrame(frame, now) {
    this.lastHeard = now;
    this.readBytes += frame.length;
    if (this.readBytes - this.reported >= this.reportEvery) this.heartbeatDue = true;
    let envs;
    try {
      envs = unpackFrame(frame);
    } catch {
      return;
    }
    for (const env of envs) {
      const handler = typeof env.k === "string" ? HANDLERS[env.k] : undefined;
      if (handler !== undefined) handler.call(this, env);
    }
  }

  /** A heartbeat is due after HEARTBEAT_S without sending, or ACK_DELAY_S after a
   * message arrived or was taken unreported; a connected session that heard nothing for
   * LIVENESS_S says hello again. */
  timers(now) {
    if (now - this.lastSent >= LIMITS.HEARTBEAT_S) {
      this.heartbeatDue = true;
    } else if (this.unreportedAt !== null && now - this.unreportedAt >= LIMITS.ACK_DELAY_S) {
      this.heartbeatDue = true;
    } else if (this.seenPending()) {
      if (this.seenNoticedAt === null) this.seenNoticedAt = now;
      else if (now - this.seenNoticedAt >= LIMITS.ACK_DELAY_S) this.heartbeatDue = true;
    }
    if (this.helloAt !== null && now >= this.helloAt) {
      this.helloAt = null;
      this.helloDue = true;
    }
    if (now - this.lastHeard > LIMITS.LIVENESS_S && !this.readingPaused) this.step(Input.SILENCE, now);
    if (this.deferred.length && now >= this.deferredAt && this.state === State.CONNECTED) {
      for (const msgId of this.deferred) {
        const owed = this.owed.get(msgId);
        if (owed !== undefined) this.outbox.push(resend(owed, now));
      }
      this.deferred = [];
    }
  }

  /** When a heartbeat reporting what was read or seen is due (monotonic seconds), so the
   * driver runs timers() then; null when none waits (or one is due already). */
  ackDueAt() {
    if (this.heartbeatDue) return null;
    let due = this.unreportedAt === null ? null : this.unreportedAt + LIMITS.ACK_DELAY_S;
    if (this.seenNoticedAt !== null && this.seenPending()) {
      const seenDue = this.seenNoticedAt + LIMITS.ACK_DELAY_S;
      if (due === null || seenDue < due) due = seenDue;
    }
    return due;
  }

  /** A seen id the broker has not heard since the hello, and a connection to tell it on. */
  seenPending() {
    return this.seenThrough !== null && this.seenThrough !== this.seenTold && this.state === State.CONNECTED;
  }

  /** The driver reads again: the broker's silence counts from now. */
  resumeReading(now) {
    this.readingPaused = false;
    this.lastHeard = Math.max(this.lastHeard, now);
  }

  /** The driver moved the socket to another broker while greeting: a new hello is due. */
  redial() {
    if (this.state === State.GREETING) {
      this.helloDue = true;
      this.helloAt = null;
    }
  }

  /** Say hello again (on a welcome): memberships changed after the hello stated them. */
  resync() {
    this.step(Input.RESYNC, this.lastHeard);
  }

  /** What happened since the last call, oldest first: {inbound: {msgs, events,
   * answers}} and {welcome: result} objects. */
  nextEvents() {
    this.endInbound();
    const ready = this.ready;
    if (ready.length) this.ready = [];
    return ready;
  }

  // -- internals -------------------------------------------------------------------------

  step(input, now) {
    const next = NEXT.get(`${this.state}|${input}`);
    if (next === undefined) return;
    this.state = next;
    if (next === State.GREETING) {
      this.helloDue = true;
    } else if (next === State.CONNECTED) {
      this.requeue(now);
      if (this.seenPending()) this.seenNoticedAt = now; // told again on the new connection
    }
  }

  /** On a welcome: owed requests sent before, then what waited, less what was given up. */
  requeue(now) {
    const waited = this.outbox;
    const waitingIds = new Set(waited.map(requestId));
    let again = [];
    for (const [msgId, owed] of this.owed) if (!waitingIds.has(msgId)) again.push(owed.request);
    for (const item of waited) {
      const msgId = requestId(item);
      if (msgId === null || this.owed.has(msgId)) again.push(item);
    }
    this.deferred = again.filter(isAsk).map(requestId).filter((id) => id !== null);
    this.deferredAt = now + ASK_RESEND_DELAY_S;
    if (this.deferred.length) again = again.filter((item) => !isAsk(item));
    this.outbox = again;
  }

  endInbound() {
    if (this.msgs.length || this.events.length || this.answers.length) {
      this.ready.push({ inbound: { msgs: this.msgs, events: this.events, answers: this.answers } });
      this.msgs = [];
      this.events = [];
      this.answers = [];
    }
  }

  onResult(env) {
    const re = env.re;
    if (re !== undefined && re !== null && re === this.helloId) {
      this.helloId = null;
      if (this.redirected(env)) return;
      this.endInbound();
      const result = { ...env };
      delete result.v;
      delete result.k;
      delete result.re;
      this.ready.push({ welcome: result });
      const bound = env.backlogBytes;
      if ((typeof bound === "number" && Number.isInteger(bound) && bound > 0) || (typeof bound === "bigint" && bound > 0n)) {
        this.reportEvery = Math.max(1, Math.floor(Number(bound) / 8));
      }
      if (env.ok) {
        this.redirects = 0;
        this.redirectSince = null;
      }
      this.step(env.ok ? Input.WELCOME : Input.REFUSAL, this.lastHeard);
    } else if (env.code === "not_connected") {
      this.step(Input.NOT_CONNECTED, this.lastHeard);
    } else if (typeof re === "string") {
      const owed = this.owed.get(re);
      if (owed !== undefined) {
        this.owed.delete(re);
        const answer = { ...env };
        delete answer.v;
        delete answer.k;
        delete answer.re;
        this.answers.push([owed, answer]);
      }
    }
  }

  /** A hello refused with a redirect: due again at the endpoint named, after a pause if
   * it is this broker. */
  redirected(env) {
    const endpoint = env.endpoint;
    if (env.ok || !REDIRECTS.has(env.code) || typeof endpoint !== "string") return false;
    const now = this.lastHeard;
    if (this.redirectSince === null) this.redirectSince = now;
    else if (now - this.redirectSince >= REDIRECT_PATIENCE_S) return false;
    this.redirects += 1;
    this.redirect = endpoint;
    this.redirectKey = typeof env.serverKey === "string" ? env.serverKey : null;
    this.helloAt = now + Math.min(REDIRECT_DELAY_S * 2 ** (this.redirects - 1), REDIRECT_DELAY_MAX_S);
    return true;
  }

  onAcks(env) {
    if (!Array.isArray(env.ids)) return;
    for (const msgId of env.ids) {
      if (typeof msgId !== "string") continue;
      const owed = this.owed.get(msgId);
      if (owed !== undefined) {
        this.owed.delete(msgId);
        this.answers.push([owed, { ok: true, delivered: true, messageId: msgId }]);
      }
    }
  }

  refuseOversize(envs) {
    for (const env of envs) {
      let size;
      let error;
      try {
        size = pack(env).length;
        error = new BusError("request_too_large", { size, limit: LIMITS.MAX_FRAME_BYTES });
      } catch (exc) {
        error = new BusError("invalid_params", { detail: `cannot be encoded: ${exc.message}` });
      }
      const ids = env.k === "sends" ? env.ids : [env.id];
      for (const msgId of ids) {
        const owed = typeof msgId === "string" ? this.owed.get(msgId) : undefined;
        if (owed !== undefined) {
          this.owed.delete(msgId);
          this.answers.push([owed, error.reply()]);
        }
      }
    }
  }
}

/** The id of a queued request; null for a post (an envelope owed no answer). */
function requestId(item) {
  if (item instanceof PlainSend) return item.id;
  return typeof item.id === "string" ? item.id : null;
}

/** An ask or supervisor ask: the requests that carry their own `timeout`. */
function isAsk(item) {
  return !(item instanceof PlainSend) && "timeout" in item && "id" in item;
}

/** What to send again for `owed`: an ask with the rest of its own timeout. */
function resend(owed, now) {
  const request = owed.request;
  if (owed.madeAt === undefined || !isAsk(request)) return request;
  const left = request.timeout - (now - owed.madeAt);
  return { ...request, timeout: Math.max(left, MIN_RESENT_TIMEOUT_S) };
}

// Broker kinds by what reading them does; `hb` (and anything unknown) only shows the
// broker alive.
const HANDLERS = {
  result: ClientProtocol.prototype.onResult,
  acks: ClientProtocol.prototype.onAcks,
  msg(env) {
    this.msgs.push(env);
    if (this.unreportedAt === null) this.unreportedAt = this.lastHeard;
  },
  msgs(env) {
    expandMsgs(env, this.msgs);
    if (this.unreportedAt === null) this.unreportedAt = this.lastHeard;
  },
  event(env) {
    this.events.push(env);
  },
};
