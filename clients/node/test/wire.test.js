// Frames: batching limits, `sends` runs, and 64-bit integers kept exact both ways.

import assert from "node:assert/strict";
import { test } from "node:test";
import { encode } from "@msgpack/msgpack";
import { LIMITS } from "../src/schemas.js";
import { PlainSend, envelope, expandMsgs, pack, packFrames, takeEnvelopes, unpackFrame, wireInt } from "../src/wire.js";

test("a uint64 and an int64 from the broker decode as exact BigInts", () => {
  // Python's msgpack writes 2**53 + 1 as uint64 (0xcf) and -2**63 as int64 (0xd3).
  const frame = Buffer.from("82a162cf0020000000000001a163d38000000000000000", "hex");
  assert.deepEqual(unpackFrame(frame), [{ b: 2n ** 53n + 1n, c: -(2n ** 63n) }]);
});

test("an integer past 32 bits is sent as an integer, not a float", () => {
  assert.equal(wireInt(5), 5);
  const hex = (value) => Buffer.from(pack(value)).toString("hex");
  assert.equal(hex({ read: wireInt(2 ** 40) }), "81a472656164cf0000010000000000");
  assert.equal(hex({ read: 2 ** 40 }), "81a472656164cb4270000000000000"); // a float64 without it
});

test("envelopes share frames up to MAX_BATCH, and one too large is left out for its caller", () => {
  const envs = Array.from({ length: LIMITS.MAX_BATCH + 1 }, (_, i) => envelope("hb", { read: i }));
  const [frames, oversize] = packFrames(envs);
  assert.equal(frames.length, 2);
  assert.equal(unpackFrame(frames[0]).length, LIMITS.MAX_BATCH);
  assert.deepEqual(unpackFrame(frames[1]), [envs[LIMITS.MAX_BATCH]]);
  assert.deepEqual(oversize, []);
  const huge = envelope("call", { id: "x", message: "x".repeat(LIMITS.MAX_FRAME_BYTES) });
  const [frames2, oversize2] = packFrames([envelope("hb"), huge]);
  assert.equal(frames2.length, 1);
  assert.deepEqual(oversize2, [huge]);
});

test("runs of plain sends to one target become one sends envelope, in order", () => {
  const items = [new PlainSend("a", "1", "x"), new PlainSend("a", "2", "y"), envelope("hb"), new PlainSend("a", "3", "z"),
    new PlainSend("b", "4", "w")];
  assert.deepEqual(takeEnvelopes(items), [
    { v: 1, k: "sends", to: "a", ids: ["1", "2"], messages: ["x", "y"] },
    { v: 1, k: "hb" },
    { v: 1, k: "sends", to: "a", ids: ["3"], messages: ["z"] },
    { v: 1, k: "sends", to: "b", ids: ["4"], messages: ["w"] },
  ]);
  const many = Array.from({ length: LIMITS.MAX_SEND_ITEMS + 1 }, (_, i) => new PlainSend("a", String(i), "m"));
  assert.deepEqual(takeEnvelopes(many).map((env) => env.ids.length), [LIMITS.MAX_SEND_ITEMS, 1]);
});

test("a msgs envelope stands for one msg per id", () => {
  const msgs = [];
  expandMsgs({ from: "s", fromName: "n", sentAt: 1.5, ids: ["1", "2"], messages: ["a", "b"] }, msgs);
  assert.deepEqual(msgs.map((m) => [m.id, m.message, m.from, m.expectsReply]), [["1", "a", "s", false], ["2", "b", "s", false]]);
  assert.ok(msgs.every((m) => !("replyable" in m)));
});

test("a msgs envelope from a sender nobody can message marks each of its msgs", () => {
  const msgs = [{ id: "0" }];
  expandMsgs({ from: "c", fromName: "cli", sentAt: 1.5, ids: ["1", "2"], messages: ["a", "b"], replyable: false }, msgs);
  assert.deepEqual(msgs.map((m) => m.replyable), [undefined, false, false]);
});

test("frames that are not envelopes are refused with the protocol's codes", () => {
  assert.throws(() => unpackFrame(Buffer.from([0xc1])), { code: "malformed_frame" });
  assert.throws(() => unpackFrame(Buffer.from(encode(5))), { code: "bad_envelope" });
  assert.throws(() => unpackFrame(Buffer.from(encode([]))), { code: "bad_envelope" });
});
