// The client's driver: one zeromq.js DEALER socket and the loops that move its frames.
// What to send, and what the broker's frames mean, is ClientProtocol (no IO); this
// module moves its frames, runs its timers and hands on what it reports.
//
// Invariants:
//
// * One send in flight: zeromq.js refuses a second send() while one waits (EBUSY), so
//   everything goes through one pump, which takes the protocol's frames and awaits
//   each send in turn. Requests queue in the protocol's outbox meanwhile; the pump is
//   kicked on the next turn of the event loop (setImmediate), so the requests made in
//   one synchronous run leave together, runs of plain sends as one `sends` envelope
//   (every FLUSH_EVERY queued, at once, so a long run does not wait for its end).
// * One receive in flight: the read loop awaits one frame at a time, hands it to the
//   protocol and acts on what it reports: messages and events are handed on before
//   the answers read with or after them resolve.
// * Bounded inbox: the read loop reads while the session's inbox is under
//   `inboxLimitBytes`, or while a call waits, under that plus a reserve (its answer
//   may sit behind messages). Otherwise it pauses: unread frames stay in ZeroMQ's
//   queue (receiveHighWaterMark) and the kernel's buffers, which push back on the
//   broker; the protocol then takes no silence for a dead broker. A take from the
//   inbox (roomMade) resumes reading once there is room.
// * Timers run every TIMER_INTERVAL_S: heartbeats (with the bytes read, the broker's
//   backlog count), the liveness check, deferred asks, failover; and once more when
//   the protocol's ack is due (ackDueAt: ACK_DELAY_S after a message arrived or was
//   taken unreported), on one timer armed for the earliest such moment, so a stream of
//   frames or takes is reported in one heartbeat, not one each. Nothing here keeps the
//   event loop from turning for long (the read loop yields every READ_YIELD_EVERY
//   frames, the inbox every few takes), but an application that blocks it for over 3 s
//   is taken for gone by the broker, and says hello again after.
// * Close: the pump flushes what is queued, the socket closes, then every owed
//   request fails with session_closed.

import { Dealer } from "zeromq";
import { ClientProtocol, ROTATE_AFTER, State, TIMER_INTERVAL_S } from "./protocol.js";
import { LIMITS } from "./schemas.js";
import { PlainSend } from "./wire.js";

// With several endpoints: a hello unanswered this long moves the socket to the next one.
export const FAILOVER_S = 1.0;
// Frames ZeroMQ queues unread: enough to keep a reader busy, few enough that a paused
// reader does not hold a backlog itself (the broker holds it instead).
const RCVHWM = 32;
// Pipelined requests queued before they are sent without waiting for the next turn of
// the event loop: a sender that queues thousands in one run keeps the broker busy with
// the first ones meanwhile (the Python client's IO thread takes its turn as often).
const FLUSH_EVERY = 256;
// Frames read in a row before the read loop lets the event loop turn: zeromq.js answers
// a receive() at once while frames wait, so under a steady stream the loop would run on
// microtasks alone and starve the timers (heartbeats: a broker that hears nothing for
// 3 s takes the session for gone) and everything else the application runs.
const READ_YIELD_EVERY = 32;
// Handshakes in a row that may fail before that is taken for a refusal.
const FAILED_IN_A_ROW = 3;

export const now = () => performance.now() / 1000;

/** How far past `limit` reading goes while a call waits for its answer. */
const reserve = (limit) => Math.max(limit, LIMITS.MAX_INBOUND_FRAME_BYTES);

export class Transport {
  /** `hello()` builds a hello; `onInbound(msgs, events)` gets the msg and event
   * envelopes of each read, `onWelcome(result)` each answer to a hello. `inboxSize()` is
   * what the session's inbox holds, bounded by `inboxLimitBytes` (0: no bound). */
  constructor({ endpoints, hello, onInbound, onWelcome, curve = null, inboxSize = null, inboxLimitBytes = 0 }) {
    this.endpoints = [...endpoints];
    this.endpoint = this.endpoints[0];
    this.protocol = new ClientProtocol(hello);
    this.onInbound = onInbound;
    this.onWelcome = onWelcome;
    this.inboxSize = inboxSize;
    this.inboxLimitBytes = inboxSize !== null ? inboxLimitBytes : 0;
    this.callsWaiting = 0;
    this.closing = false;
    this.pumping = null; // the running pump's promise
    this.pumpScheduled = false;
    this.resume = null; // wakes the read loop while it pauses
    this.greetingSince = null;
    this.serverKeys = new Map(); // endpoint -> CURVE key, from redirects
    this.curve = curve;
    const options = { linger: 1000, sendHighWaterMark: 100_000, receiveHighWaterMark: RCVHWM,
      reconnectInterval: 100, reconnectMaxInterval: 1000 };
    if (curve !== null) {
      Object.assign(options, { curveServerKey: curve.serverKey, curvePublicKey: curve.publicKey,
        curveSecretKey: curve.secretKey });
    }
    this.sock = new Dealer(options);
    this.handshakes = new HandshakeWatch(this.sock, curve !== null);
    this.sock.connect(this.endpoint);
    this.timer = setInterval(() => this.tick(), TIMER_INTERVAL_S * 1000);
    this.ackTimer = null; // armed for ackAt: the protocol's ack heartbeat due then
    this.ackAt = null;
    this.reading = this.readLoop();
    this.kick();
  }

  get connected() {
    return this.protocol.connected;
  }

  get readingPaused() {
    return this.protocol.readingPaused;
  }

  /** Something was taken from the inbox: resume reading if paused and there is room. */
  roomMade() {
    if (this.resume !== null && this.mayRead()) this.resume();
  }

  /** Wall-clock seconds when the broker was last heard from (null: never). */
  silentSince() {
    const heard = this.protocol.lastHeard;
    return heard ? Date.now() / 1000 - (now() - heard) : null;
  }

  /** Whether the broker sent anything after the monotonic `moment`. */
  heardSince(moment) {
    return this.protocol.lastHeard > moment;
  }

  // -- requests ------------------------------------------------------------------------

  /** Send a request envelope (with `id`); resolves to the broker's answer (no timeout). */
  request(env) {
    return this.enqueue(env.id, env);
  }

  /** A quiet plain send of text, packed with its neighbours to the same target. */
  requestSend(to, msgId, message) {
    return this.enqueue(msgId, new PlainSend(to, msgId, message));
  }

  enqueue(msgId, item) {
    return new Promise((resolve) => {
      const refusal = this.protocol.request(msgId, { request: item, settle: resolve });
      if (refusal !== null) resolve(refusal);
      else if (this.protocol.outbox.length >= FLUSH_EVERY && this.pumping === null) this.pump();
      else this.kick();
    });
  }

  /** Send a request and wait for its answer; null after `timeoutS` seconds.
   * `onAnswer(answer)` runs as the answer is read, before anything read after it is
   * acted on; never for a request given up on. */
  call(env, timeoutS, onAnswer = null) {
    return new Promise((resolve) => {
      let timer = null;
      let waiting = true;
      const done = () => {
        if (waiting) {
          waiting = false;
          this.callsWaiting -= 1;
        }
      };
      const owed = {
        request: env,
        madeAt: now(), // an ask resent after a reconnect keeps its deadline
        settle: (answer) => {
          if (timer !== null) clearTimeout(timer);
          done();
          if (onAnswer !== null) onAnswer(answer);
          resolve(answer);
        },
      };
      this.callsWaiting += 1;
      const refusal = this.protocol.request(env.id, owed);
      if (refusal !== null) {
        owed.settle(refusal);
        return;
      }
      timer = setTimeout(() => {
        this.protocol.forget(env.id);
        done();
        resolve(null);
      }, timeoutS * 1000);
      this.roomMade(); // a waiting call may read into the reserve
      // Someone waits for this one: it leaves now, not on the next turn of the loop.
      if (this.pumping === null) this.pump();
      else this.kick();
    });
  }

  /** The program took message `msgId`: told in a coming heartbeat (seenThrough). */
  saw(msgId) {
    this.protocol.saw(msgId, now());
    this.armAck();
  }

  /** Send an envelope that expects no answer. */
  post(env) {
    this.protocol.post(env);
    this.kick();
  }

  /** From onWelcome only: say hello again (see ClientProtocol.resync). */
  resync() {
    this.protocol.resync();
    this.kick();
  }

  /** Flush what is queued (for up to `timeoutS`), close the socket, fail what is owed. */
  async close(timeoutS = 2.0) {
    if (this.closing) return;
    this.closing = true;
    clearInterval(this.timer);
    if (this.ackTimer !== null) clearTimeout(this.ackTimer);
    this.ackTimer = null;
    let timer;
    const expired = new Promise((resolve) => { timer = setTimeout(resolve, timeoutS * 1000); });
    await Promise.race([this.pump(), expired]);
    clearTimeout(timer);
    this.handshakes.end();
    this.sock.close();
    if (this.resume !== null) this.resume();
    for (const [owed, answer] of this.protocol.close()) owed.settle(answer);
    await this.reading;
  }

  // -- the loops -----------------------------------------------------------------------

  kick() {
    if (this.pumpScheduled || this.sock.closed) return;
    this.pumpScheduled = true;
    setImmediate(() => {
      this.pumpScheduled = false;
      this.pump();
    });
  }

  /** Send everything due, one frame in flight at a time; the running pump's promise. */
  pump() {
    if (this.pumping === null) {
      this.pumping = this.pumpFrames().finally(() => { this.pumping = null; });
    }
    return this.pumping;
  }

  async pumpFrames() {
    const protocol = this.protocol;
    try {
      while (!this.sock.closed && protocol.wantsToSend()) {
        const frames = protocol.framesToSend(now());
        this.deliver(); // requests refused as too large, if any
        for (const frame of frames) await this.sock.send(frame);
      }
    } catch (err) {
      if (!this.sock.closed) process.emitWarning(`intercom: send failed: ${err}`);
    }
  }

  mayRead() {
    const limit = this.inboxLimitBytes;
    if (!limit) return true;
    const size = this.inboxSize();
    return size < limit || (this.callsWaiting > 0 && size < limit + reserve(limit));
  }

  async readLoop() {
    const protocol = this.protocol;
    let inARow = 0;
    while (!this.closing) {
      if (++inARow >= READ_YIELD_EVERY) {
        inARow = 0;
        await new Promise((resolve) => setImmediate(resolve));
        continue;
      }
      if (!this.mayRead()) {
        protocol.readingPaused = true;
        await new Promise((resolve) => { this.resume = resolve; });
        this.resume = null;
        continue;
      }
      if (protocol.readingPaused) protocol.resumeReading(now());
      let frame;
      try {
        [frame] = await this.sock.receive();
      } catch (err) {
        if (this.closing || this.sock.closed) break;
        process.emitWarning(`intercom: receive failed: ${err}`);
        continue;
      }
      protocol.receiveFrame(frame, now());
      this.deliver();
      if (protocol.redirect !== null) this.followRedirect();
      if (protocol.wantsToSend()) this.kick();
      this.armAck();
    }
  }

  tick() {
    const at = now();
    this.protocol.timers(at);
    if (this.endpoints.length > 1) this.failOver(at);
    if (this.protocol.wantsToSend()) this.kick();
    this.armAck();
  }

  /** Run the timers when the protocol's ack heartbeat is due, unless a timer is armed
   * for then or earlier already (a later frame or take never delays it). */
  armAck() {
    if (this.closing) return;
    const due = this.protocol.ackDueAt();
    if (due === null || (this.ackTimer !== null && this.ackAt <= due)) return;
    if (this.ackTimer !== null) clearTimeout(this.ackTimer);
    this.ackAt = due;
    // A millisecond past it: a timer may fire a hair before the monotonic clock gets there.
    const delay = Math.max(0, Math.ceil((due - now()) * 1000)) + 1;
    this.ackTimer = setTimeout(() => {
      this.ackTimer = null;
      this.tick();
    }, delay);
  }

  /** Act on what the protocol reports, in its order. */
  deliver() {
    for (const event of this.protocol.nextEvents()) {
      if (event.inbound !== undefined) {
        const { msgs, events, answers } = event.inbound;
        if (msgs.length || events.length) this.onInbound(msgs, events);
        for (const [owed, answer] of answers) owed.settle(answer);
      } else {
        this.onWelcome(event.welcome);
      }
    }
  }

  // -- several brokers ------------------------------------------------------------------

  /** Greeting for FAILOVER_S without a welcome: move to the next endpoint. A broker
   * that answers, even with a refusal, keeps the socket where it is. */
  failOver(at) {
    if (this.protocol.state !== State.GREETING) {
      this.greetingSince = null;
      return;
    }
    if (this.greetingSince === null) {
      this.greetingSince = at;
      return;
    }
    if (at - this.greetingSince < FAILOVER_S) return;
    this.move(this.endpoints[(this.endpoints.indexOf(this.endpoint) + 1) % this.endpoints.length]);
    this.greetingSince = at;
  }

  /** The broker sent the hello elsewhere (a stage's run is held by another broker). */
  followRedirect() {
    const target = this.protocol.redirect;
    this.protocol.redirect = null;
    if (target === this.endpoint) {
      // The same broker: the hello is due there after a pause, unless it keeps saying so
      // (a broker that lost its lease cannot name the run's new host).
      if (this.endpoints.length > 1 && this.protocol.redirects % ROTATE_AFTER === 0) {
        this.move(this.endpoints[(this.endpoints.indexOf(target) + 1) % this.endpoints.length]);
      }
      return;
    }
    if (!this.endpoints.includes(target)) this.endpoints.push(target);
    if (this.protocol.redirectKey) this.serverKeys.set(target, this.protocol.redirectKey);
    this.move(target);
  }

  move(target) {
    const old = this.endpoint;
    this.endpoint = target;
    try {
      this.sock.disconnect(old);
    } catch {
      // not connected there any more
    }
    if (this.curve !== null) this.sock.curveServerKey = this.serverKeys.get(target) ?? this.curve.serverKey;
    this.sock.connect(target);
    this.greetingSince = null;
    this.protocol.redial();
    this.kick();
  }
}

/** Tells a refused CURVE handshake from a broker that is not there yet (client/
 * handshakes.py): reads the socket's handshake events until one succeeds.
 *
 * The observer is never closed while its socket is open: closing its reading end
 * first leaves libzmq's I/O thread blocked on the next event (a disconnect), and every
 * socket of the context stalls. So after the watch ends its events are still read,
 * and dropped, until the socket closes (which ends the observer too). */
class HandshakeWatch {
  constructor(sock, hasKeys) {
    this.hasKeys = hasKeys;
    this.failed = 0;
    this.refusal = null;
    this.watching = true;
    this.listener = null; // told of a refusal
    this.drain(sock.events);
  }

  // Read by this loop, not the observer's event-emitter mode: that one leaves its read
  // unhandled when the observer closes.
  async drain(events) {
    try {
      for (;;) {
        const event = await events.receive();
        if (!this.watching) continue;
        if (event.type === "handshake") this.end();
        else if (event.type === "handshake:error:auth") this.refuse("the key is not among the broker's allowed clients");
        else if (event.type === "handshake:error:protocol") this.count(FAILED_IN_A_ROW);
        else if (event.type === "handshake:error:other") this.count(1);
      }
    } catch {
      // the socket closed, and its observer with it
    }
  }

  count(failures) {
    this.failed += failures;
    if (this.failed < FAILED_IN_A_ROW) return;
    this.refuse(this.hasKeys
      ? "the CURVE handshake fails every time: the broker's public key given (curveServerKey) is not this broker's"
      : "the broker closes every handshake: it requires CURVE and this client has no keys (pass the broker's " +
        "public key and a client pair, or the INTERCOM_CURVE_* environment), or the endpoint is not an Intercom broker");
  }

  refuse(why) {
    if (this.refusal !== null || !this.watching) return;
    this.refusal = why;
    if (this.listener !== null) this.listener(why);
  }

  /** Resolves with the reason the broker refuses this client, if it ever does. */
  refused() {
    if (this.refusal !== null) return Promise.resolve(this.refusal);
    return new Promise((resolve) => { this.listener = resolve; });
  }

  /** Stop watching (a handshake succeeded, or the wait for a welcome is over). */
  end() {
    this.watching = false;
    this.listener = null;
  }
}
