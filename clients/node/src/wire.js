// Frames: one msgpack value per ZeroMQ frame, an envelope (a map) or a batch (an array
// of maps), as schemas/protocol.py packs them; plus what the client puts into frames
// beyond single envelopes (client/wire.py): runs of plain sends to one target travel
// as one `sends` envelope, and a `msgs` envelope stands for several `msg` ones.
//
// Integers: 64-bit values decode as BigInt (useBigInt64), so none loses precision; a
// number this side sends that is an integer beyond 32 bits must be passed as a BigInt
// (wireInt), else the encoder writes it as a float.

import { Decoder, Encoder } from "@msgpack/msgpack";
import { BusError } from "./errors.js";
import { LIMITS, PROTOCOL_VERSION } from "./schemas.js";

const encoder = new Encoder({ useBigInt64: true, ignoreUndefined: true });
const decoder = new Decoder({ useBigInt64: true });

// Text bytes (an upper bound) of one `sends` envelope: a quarter of a frame.
export const SENDS_BYTES = LIMITS.MAX_FRAME_BYTES / 4;

/** One envelope (or any value) as msgpack bytes. Throws on values msgpack cannot hold. */
export function pack(value) {
  return encoder.encode(value);
}

/** An integer for the wire: a BigInt past 32 bits, so it stays an integer there. */
export function wireInt(n) {
  return Number.isSafeInteger(n) && (n > 0xffffffff || n < -0x80000000) ? BigInt(n) : n;
}

/** Envelopes packed, in order, into as few frames as the limits allow: [frames,
 * oversize], the second holding envelopes that alone pack past `maxBytes` (left out:
 * the caller answers for them) or cannot be encoded at all. */
export function packFrames(envs, maxBytes = LIMITS.MAX_FRAME_BYTES) {
  const frames = [];
  const oversize = [];
  let parts = [];
  let size = 0;
  const limit = maxBytes - 3; // room for the array header
  for (const env of envs) {
    let data;
    try {
      data = pack(env);
    } catch {
      oversize.push(env);
      continue;
    }
    if (data.length > maxBytes) {
      oversize.push(env);
      continue;
    }
    if (parts.length && (size + data.length > limit || parts.length === LIMITS.MAX_BATCH)) {
      frames.push(join(parts, size));
      parts = [];
      size = 0;
    }
    parts.push(data);
    size += data.length;
  }
  if (parts.length) frames.push(join(parts, size));
  return [frames, oversize];
}

function join(parts, size) {
  const n = parts.length;
  if (n === 1) return parts[0];
  const head = n < 16 ? Buffer.from([0x90 | n]) : Buffer.from([0xdc, n >> 8, n & 0xff]);
  return Buffer.concat([head, ...parts], head.length + size);
}

/** The envelopes of one frame. Throws BusError (frame_too_large, malformed_frame,
 * batch_too_large, bad_envelope). */
export function unpackFrame(frame, maxBytes = LIMITS.MAX_INBOUND_FRAME_BYTES) {
  if (frame.length > maxBytes) throw new BusError("frame_too_large", { size: frame.length, limit: maxBytes });
  let value;
  try {
    value = decoder.decode(frame);
  } catch {
    throw new BusError("malformed_frame");
  }
  if (isMap(value)) return [value];
  if (Array.isArray(value)) {
    if (value.length > LIMITS.MAX_BATCH) {
      throw new BusError("batch_too_large", { size: value.length, limit: LIMITS.MAX_BATCH });
    }
    if (!value.length || !value.every(isMap)) {
      throw new BusError("bad_envelope", { detail: "a batch must be a non-empty array of maps" });
    }
    return value;
  }
  throw new BusError("bad_envelope", { detail: "a frame must hold a map or an array of maps" });
}

function isMap(value) {
  return value !== null && typeof value === "object" && !Array.isArray(value) && !(value instanceof Uint8Array);
}

export function envelope(kind, fields = {}) {
  return { v: PROTOCOL_VERSION, k: kind, ...fields };
}

/** A plain pipelined send, queued as it is and packed with its neighbours. */
export class PlainSend {
  constructor(to, id, message) {
    this.to = to;
    this.id = id;
    this.message = message;
  }
}

const ASCII = /^[\x00-\x7f]*$/;
const utf8Bound = (text) => (ASCII.test(text) ? text.length : 4 * text.length);

/** Everything queued in `items`, in order, as envelopes: each run of PlainSends to one
 * target as one `sends` envelope (at most MAX_SEND_ITEMS, about SENDS_BYTES of text). */
export function takeEnvelopes(items) {
  const envs = [];
  for (let i = 0; i < items.length; ) {
    const item = items[i++];
    if (!(item instanceof PlainSend)) {
      envs.push(item);
      continue;
    }
    const ids = [item.id];
    const texts = [item.message];
    let size = utf8Bound(item.message);
    while (i < items.length && ids.length < LIMITS.MAX_SEND_ITEMS) {
      const after = items[i];
      if (!(after instanceof PlainSend) || after.to !== item.to) break;
      size += utf8Bound(after.message);
      if (size > SENDS_BYTES) break;
      ids.push(after.id);
      texts.push(after.message);
      i++;
    }
    envs.push({ v: PROTOCOL_VERSION, k: "sends", to: item.to, ids, messages: texts });
  }
  return envs;
}

/** The `msg` envelopes a `msgs` envelope stands for, appended to `msgs`. */
export function expandMsgs(env, msgs) {
  const { ids, messages } = env;
  if (!Array.isArray(ids) || !Array.isArray(messages)) return;
  const count = Math.min(ids.length, messages.length);
  for (let i = 0; i < count; i++) {
    const msg = { id: ids[i], message: messages[i], sentAt: env.sentAt, expectsReply: false,
      fromName: env.fromName, from: env.from };
    if (env.replyable === false) msg.replyable = false; // a sender nobody can message
    msgs.push(msg);
  }
}
