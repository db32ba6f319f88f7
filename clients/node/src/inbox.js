// FIFOs of inbound items, filled in batches by the transport, taken with a timeout.
//
// Inbox is the one for messages (client/inbox.py): it counts what it holds, so the
// transport can stop reading the socket while it is full, and it drops a message id
// it has put already, whether still held or handed out (a sender's resend to a
// restarted broker, or a broker sending again what it kept for this session because it
// had not heard it read or seen). Invariant: `size` is the sum of messageSize over the
// messages held.

import { LIMITS } from "./schemas.js";

export const DEFAULT_LIMIT_BYTES = 8 * 1024 * 1024; // Client.connect({inboxLimitBytes})
// What a message costs besides its text (its envelope fields), for the inbox's count.
export const MESSAGE_OVERHEAD_BYTES = 200;
// Ids of messages handed out, remembered to drop a resent copy (as client/inbox.py).
const RECENT_IDS = LIMITS.RECEIVED_IDS_KEPT;

// Takes answered at once in a row before one waits for the next turn of the event loop:
// a consumer draining a long backlog in a loop of `await take()` runs on microtasks
// alone, and would otherwise keep the timers (heartbeats) and the socket waiting until
// the backlog is empty; a broker that hears nothing for 3 s takes the session for gone.
const YIELD_EVERY = 64;

export class Waitable {
  constructor() {
    this.items = [];
    this.head = 0; // items before it were taken (compacted now and then)
    this.waiters = []; // resolve functions of takers waiting, oldest first
    this.inARow = 0; // takes answered at once since the last turn of the event loop
  }

  get length() {
    return this.items.length - this.head;
  }

  putAll(items) {
    for (const item of items) this.items.push(item);
    while (this.waiters.length && this.length) this.waiters.shift()(this.popLeft());
  }

  popLeft() {
    if (this.head >= this.items.length) return undefined;
    const item = this.items[this.head];
    this.items[this.head++] = undefined;
    if (this.head > 1024 && this.head * 2 > this.items.length) {
      this.items = this.items.slice(this.head);
      this.head = 0;
    }
    return item;
  }

  /** The oldest item, waiting up to `timeout` seconds (null: no limit); null on timeout. */
  take(timeout) {
    if (timeout !== null && timeout !== undefined && !(timeout >= 0)) {
      return Promise.reject(new RangeError("timeout must be a non-negative number of seconds"));
    }
    const item = this.popLeft();
    if (item !== undefined) {
      if (++this.inARow < YIELD_EVERY) return Promise.resolve(this.taken(item));
      this.inARow = 0;
      return new Promise((resolve) => setImmediate(() => resolve(this.taken(item))));
    }
    this.inARow = 0;
    if (timeout === 0) return Promise.resolve(null);
    return new Promise((resolve) => {
      let timer = null;
      const waiter = (got) => {
        if (timer !== null) clearTimeout(timer);
        resolve(this.taken(got));
      };
      this.waiters.push(waiter);
      if (timeout !== null && timeout !== undefined) {
        timer = setTimeout(() => {
          const at = this.waiters.indexOf(waiter);
          if (at >= 0) this.waiters.splice(at, 1);
          resolve(null);
        }, timeout * 1000);
      }
    });
  }

  taken(item) {
    return item;
  }

  /** Fail every waiter with null (the session closed). */
  release() {
    for (const waiter of this.waiters.splice(0)) waiter(null);
  }
}

/** What a held message counts for: its text's length plus a fixed overhead. */
export function messageSize(msg) {
  return MESSAGE_OVERHEAD_BYTES + (typeof msg.message === "string" ? msg.message.length : 0);
}

export class Inbox extends Waitable {
  /** `onTake()` runs after each take (the transport resumes reading if it paused). */
  constructor(onTake = null) {
    super();
    this.size = 0;
    this.onTake = onTake;
    this.young = new Set(); // ids put lately
    this.old = new Set();
    this.duplicatesDropped = 0;
  }

  putAll(items) {
    const fresh = items.filter((msg) => this.fresh(msg.id));
    for (const msg of fresh) this.size += messageSize(msg);
    super.putAll(fresh);
  }

  taken(msg) {
    if (msg === null) return null;
    this.size -= messageSize(msg);
    if (this.onTake !== null) this.onTake();
    return msg;
  }

  /** True the first time `msgId` is put (and remembers it). */
  fresh(msgId) {
    if (this.young.has(msgId) || this.old.has(msgId)) {
      this.duplicatesDropped += 1;
      return false;
    }
    this.young.add(msgId);
    // Two generations: between RECENT_IDS/2 and RECENT_IDS of the newest ids.
    if (this.young.size >= RECENT_IDS / 2) {
      this.old = this.young;
      this.young = new Set();
    }
    return true;
  }
}
