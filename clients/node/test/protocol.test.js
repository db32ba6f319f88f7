// The sans-IO protocol: what leaves when, what answers mean (a fake clock: `now` is
// passed in, nothing sleeps).

import assert from "node:assert/strict";
import { test } from "node:test";
import { ASK_RESEND_DELAY_S, ClientProtocol, State } from "../src/protocol.js";
import { LIMITS } from "../src/schemas.js";
import { envelope, pack, unpackFrame } from "../src/wire.js";

let helloCount = 0;
const hello = () => envelope("hello", { id: `hello-${++helloCount}`, name: "n" });
const sent = (protocol, now) => protocol.framesToSend(now).flatMap((frame) => unpackFrame(frame));
const feed = (protocol, env, now) => protocol.receiveFrame(Buffer.from(pack(env)), now);
const owed = (request) => ({ request });

function welcomed(now = 0, fields = {}) {
  const protocol = new ClientProtocol(hello);
  const [greeting] = sent(protocol, now);
  feed(protocol, { v: 1, k: "result", re: greeting.id, ok: true, sessionId: "s", token: "t", groups: ["g"], homeGroup: "g", ...fields }, now);
  protocol.nextEvents();
  return protocol;
}

test("a hello goes first and nothing else leaves until it is welcomed", () => {
  const protocol = new ClientProtocol(hello);
  protocol.request("r1", owed(envelope("call", { id: "r1", action: "list" })));
  const first = sent(protocol, 0);
  assert.deepEqual(first.map((env) => env.k), ["hello"]);
  assert.equal(protocol.wantsToSend(), false);
  feed(protocol, { v: 1, k: "result", re: first[0].id, ok: true, backlogBytes: 80 }, 0.1);
  const [welcome] = protocol.nextEvents();
  assert.deepEqual(welcome, { welcome: { ok: true, backlogBytes: 80 } });
  assert.equal(protocol.state, State.CONNECTED);
  assert.deepEqual(sent(protocol, 0.1).map((env) => env.id), ["r1"]);
});

test("an answer resolves its request once; an answer for an id not owed is dropped", () => {
  const protocol = welcomed();
  const mine = owed(envelope("call", { id: "r1", action: "list" }));
  protocol.request("r1", mine);
  sent(protocol, 1);
  feed(protocol, [{ v: 1, k: "msg", id: "m", message: "x" }, { v: 1, k: "result", re: "r1", ok: true, n: 1 },
    { v: 1, k: "result", re: "r1", ok: true, n: 2 }, { v: 1, k: "result", re: "zz", ok: true }], 1);
  const [{ inbound }] = protocol.nextEvents();
  assert.deepEqual(inbound.msgs.map((m) => m.id), ["m"]); // messages before the answers of the same read
  assert.deepEqual(inbound.answers, [[mine, { ok: true, n: 1 }]]);
});

test("a broker that forgot the session makes a hello due that restates the owed requests after its welcome", () => {
  const protocol = welcomed();
  protocol.request("r1", owed(envelope("call", { id: "r1", action: "send", to: "x", message: "m" })));
  sent(protocol, 1);
  feed(protocol, { v: 1, k: "result", re: null, ok: false, code: "not_connected" }, 2);
  assert.equal(protocol.state, State.GREETING);
  protocol.request("r2", owed(envelope("call", { id: "r2", action: "list" })));
  const again = sent(protocol, 2);
  assert.deepEqual(again.map((env) => env.k), ["hello"]);
  feed(protocol, { v: 1, k: "result", re: again[0].id, ok: true }, 2);
  protocol.nextEvents();
  assert.deepEqual(sent(protocol, 2).map((env) => env.id), ["r1", "r2"]);
});

test("an ask is resent only ASK_RESEND_DELAY_S after the welcome, with what is left of its timeout", () => {
  const protocol = welcomed(0);
  const ask = { ...owed(envelope("call", { id: "a1", action: "ask", to: "x", message: "?", timeout: 30 })), madeAt: 0 };
  protocol.request("a1", ask);
  sent(protocol, 0);
  protocol.timers(LIMITS.LIVENESS_S + 1); // silence: the broker is taken for gone
  const greeting = sent(protocol, 5);
  assert.deepEqual(greeting.map((env) => env.k), ["hello", "hb"]);
  feed(protocol, { v: 1, k: "result", re: greeting[0].id, ok: true }, 10);
  protocol.nextEvents();
  assert.deepEqual(sent(protocol, 10), []);
  protocol.timers(10 + ASK_RESEND_DELAY_S);
  const [resent] = sent(protocol, 10 + ASK_RESEND_DELAY_S).filter((env) => env.k === "call");
  assert.equal(resent.id, "a1");
  assert.equal(resent.timeout, 30 - (10 + ASK_RESEND_DELAY_S));
});

test("silence while reading is paused proves nothing", () => {
  const protocol = welcomed(0);
  protocol.readingPaused = true;
  protocol.timers(100);
  assert.equal(protocol.state, State.CONNECTED);
  protocol.resumeReading(100);
  protocol.timers(100 + LIMITS.LIVENESS_S + 0.1);
  assert.equal(protocol.state, State.GREETING);
});

test("reads are reported in a heartbeat every eighth of the welcome's backlog bound, as an exact integer", () => {
  const protocol = welcomed(0, { backlogBytes: 2n ** 53n + 1n });
  assert.equal(protocol.reportEvery, Math.floor(2 ** 53 / 8));
  const small = welcomed(0, { backlogBytes: 800 });
  const sinceHello = small.readBytes; // the welcome itself: the broker counts from the hello
  assert.equal(small.wantsToSend(), false);
  const frame = Buffer.from(pack({ v: 1, k: "hb", pad: "x".repeat(120) }));
  small.receiveFrame(frame, 0.1);
  assert.equal(small.wantsToSend(), true);
  const [hb] = sent(small, 0.1);
  assert.deepEqual(hb, { v: 1, k: "hb", read: sinceHello + frame.length });
});

test("quiet sends are acknowledged in batches; a request too large is refused here", () => {
  const protocol = welcomed();
  const one = owed({ v: 1, k: "call", id: "q1", action: "send", to: "x", message: "m", quiet: true });
  const huge = owed(envelope("call", { id: "q2", action: "send", to: "x", message: "y".repeat(LIMITS.MAX_FRAME_BYTES) }));
  protocol.request("q1", one);
  protocol.request("q2", huge);
  assert.deepEqual(sent(protocol, 1).map((env) => env.id), ["q1"]);
  feed(protocol, { v: 1, k: "acks", ids: ["q1", 5] }, 1);
  const answers = protocol.nextEvents().flatMap((event) => event.inbound.answers);
  assert.equal(answers.length, 2);
  assert.equal(answers[0][0], huge);
  assert.equal(answers[0][1].code, "request_too_large");
  assert.deepEqual(answers[1], [one, { ok: true, delivered: true, messageId: "q1" }]);
});

test("a hello refused with a redirect is said again at the endpoint named", () => {
  const protocol = new ClientProtocol(hello);
  const [greeting] = sent(protocol, 0);
  feed(protocol, { v: 1, k: "result", re: greeting.id, ok: false, code: "run_elsewhere", error: "e", endpoint: "ipc:///b" }, 1);
  assert.equal(protocol.redirect, "ipc:///b");
  assert.deepEqual(protocol.nextEvents(), []);
  protocol.redial();
  assert.deepEqual(sent(protocol, 1).map((env) => env.k), ["hello"]);
});

test("a stage told run_moving asks again, pauses doubling to 2 s, for a minute; then the refusal stands", () => {
  const protocol = new ClientProtocol(hello);
  const moving = { v: 1, k: "result", ok: false, code: "run_moving", error: "m", endpoint: "ipc:///a" };
  let now = 0;
  let [greeting] = sent(protocol, now);
  const pauses = [];
  for (;;) {
    feed(protocol, { ...moving, re: greeting.id }, now);
    if (protocol.nextEvents().length > 0) break; // reported: the refusal stands
    protocol.redirect = null; // the driver stays on the same endpoint
    const from = now;
    let hellos = [];
    while (hellos.length === 0) {
      now += 0.1;
      protocol.timers(now);
      hellos = sent(protocol, now).filter((env) => env.k === "hello");
    }
    greeting = hellos[0];
    pauses.push(Math.round((now - from) * 10) / 10);
  }
  const expected = [0.2, 0.4, 0.8, 1.6, ...pauses.slice(4).map(() => 2)];
  // polled in 0.1 s steps: each pause is within one step of the expected one
  assert.ok(pauses.every((p, i) => Math.abs(p - expected[i]) < 0.15), `${pauses}`);
  assert.ok(now >= 60 && now < 62.5, `gave up after ${now} s`);
  assert.equal(protocol.state, State.REFUSED);
});

test("closing fails every owed request and every later one with session_closed", () => {
  const protocol = welcomed();
  const mine = owed(envelope("call", { id: "r1", action: "list" }));
  protocol.request("r1", mine);
  const failed = protocol.close();
  assert.deepEqual(failed.map(([item, answer]) => [item, answer.code]), [[mine, "session_closed"]]);
  assert.equal(protocol.request("r2", owed({ id: "r2" })).code, "session_closed");
});

// -- receipts: what was read and seen rides on heartbeats, in batches ---------------------

const ACK = LIMITS.ACK_DELAY_S; // times below are sums of powers of two: exact, as the comparisons need
const msg = (id) => ({ v: 1, k: "msg", id, from: "f", fromName: "f", message: "m", attachments: [], sentAt: 1, expectsReply: false });
const hbs = (envs) => envs.filter((env) => env.k === "hb");

test("messages arriving make one heartbeat due ACK_DELAY_S after the first, not one per frame", () => {
  const protocol = welcomed(0);
  sent(protocol, 0.5); // nothing due: the hello went at 0
  feed(protocol, msg("m1"), 0.5);
  feed(protocol, { v: 1, k: "msgs", from: "f", fromName: "f", sentAt: 1, ids: ["m2", "m3"], messages: ["a", "b"] }, 0.55);
  assert.equal(protocol.wantsToSend(), false); // reading alone never sends
  assert.equal(protocol.ackDueAt(), 0.5 + ACK);
  protocol.timers(0.5 + ACK - 0.01);
  assert.equal(protocol.wantsToSend(), false);
  feed(protocol, msg("m4"), 0.5 + ACK - 0.005); // a later frame does not move the deadline
  assert.equal(protocol.ackDueAt(), 0.5 + ACK);
  protocol.timers(0.5 + ACK);
  const first = sent(protocol, 0.5 + ACK);
  assert.deepEqual(first.map((env) => env.k), ["hb"]);
  assert.equal(first[0].read, protocol.readBytes); // every frame read so far, in one report
  assert.equal("seenThrough" in first[0], false); // nothing taken yet
  assert.equal(protocol.ackDueAt(), null);
  protocol.timers(0.5 + 2 * ACK);
  assert.deepEqual(sent(protocol, 0.5 + 2 * ACK), []); // reported: nothing more is due
});

test("a take makes a heartbeat carrying seenThrough due ACK_DELAY_S later; later takes ride on it", () => {
  const protocol = welcomed(0);
  protocol.saw("m1", 0.25);
  assert.equal(protocol.ackDueAt(), 0.25 + ACK);
  protocol.saw("m2", 0.375); // the newest id taken, on the same heartbeat
  assert.equal(protocol.ackDueAt(), 0.25 + ACK);
  protocol.timers(0.25 + ACK - 0.01);
  assert.deepEqual(sent(protocol, 0.25 + ACK - 0.01), []);
  protocol.timers(0.25 + ACK);
  assert.deepEqual(hbs(sent(protocol, 0.25 + ACK)).map((hb) => hb.seenThrough), ["m2"]);
  protocol.timers(2); // the next heartbeat, for liveness: the seen id was told already
  const [next] = hbs(sent(protocol, 2));
  assert.equal("seenThrough" in next, false);
  protocol.saw("m2", 2.1); // told already: nothing becomes due
  assert.equal(protocol.ackDueAt(), null);
});

test("a liveness heartbeat carries a seen id not told yet", () => {
  const protocol = welcomed(0);
  protocol.saw("m1", 0.9);
  protocol.timers(LIMITS.HEARTBEAT_S);
  assert.deepEqual(hbs(sent(protocol, LIMITS.HEARTBEAT_S)).map((hb) => hb.seenThrough), ["m1"]);
});

test("after a new hello the last seen id is told again, once connected, ACK_DELAY_S after the welcome", () => {
  const protocol = welcomed(0);
  protocol.saw("m1", 0.125);
  protocol.timers(0.125 + ACK);
  assert.equal(hbs(sent(protocol, 0.125 + ACK))[0].seenThrough, "m1");
  protocol.timers(0.2 + LIMITS.LIVENESS_S); // silence: a new hello
  const greeting = sent(protocol, 5);
  assert.deepEqual(greeting.map((env) => env.k), ["hello", "hb"]);
  assert.equal("seenThrough" in greeting[1], false); // not before the broker knows the session again
  protocol.timers(5.5);
  assert.deepEqual(hbs(sent(protocol, 5.5)).map((hb) => "seenThrough" in hb), []);
  feed(protocol, { v: 1, k: "result", re: greeting[0].id, ok: true }, 6);
  protocol.nextEvents();
  assert.equal(protocol.ackDueAt(), 6 + ACK);
  protocol.timers(6 + ACK);
  assert.deepEqual(hbs(sent(protocol, 6 + ACK)).map((hb) => hb.seenThrough), ["m1"]);
});

test("a take before the first welcome is told once connected", () => {
  const protocol = new ClientProtocol(hello);
  const [greeting] = sent(protocol, 0);
  protocol.saw("m0", 0.125);
  assert.equal(protocol.ackDueAt(), null);
  feed(protocol, { v: 1, k: "result", re: greeting.id, ok: true }, 0.25);
  protocol.nextEvents();
  protocol.timers(0.25 + ACK);
  assert.deepEqual(hbs(sent(protocol, 0.25 + ACK)).map((hb) => hb.seenThrough), ["m0"]);
});
