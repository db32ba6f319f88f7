// A session's attention from Node against a real broker: the row shows host "node" and
// what updateCapabilities changes; a held message is answered held, listed, released to
// its receiver, and its sender hears held_settled; the flood and loop guard is off
// unless asked for, a guarded send past its bound is refused flood_guard with
// retryAfterS, and one past its turns loop_guard until humanInput() says a person spoke.

import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { Client } from "../src/index.js";
import { startBroker } from "../test-support/broker.js";

let broker;
const opened = [];
const group = `attention-${process.pid}`;
let count = 0;

before(async () => {
  broker = await startBroker();
}, { timeout: 60_000 });
after(async () => {
  await Promise.all(opened.map((s) => s.close()));
  await broker?.stop();
});

async function connect(prefix, options = {}) {
  const session = await Client.connect({ name: `${prefix}-${++count}`, endpoint: broker.endpoint, group, timeout: 15, ...options });
  opened.push(session);
  return session;
}

async function rowOf(session, viewer) {
  const listed = await viewer.intercom({ action: "list" });
  return listed.sessions.find((row) => row.id === session.id);
}

test("rows carry capabilities and the gate; updateCapabilities changes them", { timeout: 30_000 }, async () => {
  const alice = await connect("alice", { capabilities: { steer: true } });
  const bob = await connect("bob");
  assert.deepEqual((await rowOf(alice, bob)).capabilities, { steer: true, host: "node" });
  assert.equal((await rowOf(alice, bob)).inbound, "accept");
  alice.updateCapabilities({ hooks: true });
  assert.ok((await alice.intercom({ action: "status" })).ok); // its status went first
  assert.equal((await rowOf(alice, bob)).capabilities.hooks, true);
});

test("a held message is listed, released, and its sender is told", { timeout: 30_000 }, async () => {
  const alice = await connect("alice", { inbound: "hold" });
  const bob = await connect("bob");
  const sent = await bob.intercom({ action: "send", to: alice.name, message: "wait for it" });
  assert.equal(sent.held, true, JSON.stringify(sent));
  assert.equal((await bob.receipt(sent.messageId)).state, "held");
  const held = await alice.heldMessages();
  assert.deepEqual(held.held.map((h) => h.messageId), [sent.messageId]);
  assert.deepEqual((await alice.releaseHeld(sent.messageId)).released, [sent.messageId]);
  const msg = await alice.receive({ timeout: 10 });
  assert.equal(msg.message, "wait for it");
  let event;
  do event = await bob.nextEvent({ timeout: 10 }); while (event && event.event !== "held_settled");
  assert.equal(event?.outcome, "released");
  assert.equal((await alice.setInbound("refuse")).policy, "refuse");
  assert.equal((await bob.intercom({ action: "send", to: alice.name, message: "no" })).code, "inbound_refused");
});

test("a guarded session is refused past perMinute; an unguarded one is not", { timeout: 30_000 }, async () => {
  const alice = await connect("alice", { guard: { perMinute: 2 } });
  const bob = await connect("bob");
  for (let n = 0; n < 2; n++) assert.ok((await alice.intercom({ action: "send", to: bob.name, message: `m${n}` })).ok);
  const refused = await alice.intercom({ action: "send", to: bob.name, message: "one more" });
  assert.equal(refused.code, "flood_guard", JSON.stringify(refused));
  assert.ok(refused.retryAfterS > 0 && refused.retryAfterS <= 60);
  for (let n = 0; n < 40; n++) assert.ok((await bob.intercom({ action: "send", to: alice.name, message: `b${n}` })).ok);
});

test("a guarded session's loop is refused loop_guard until humanInput() says a person spoke", { timeout: 30_000 }, async () => {
  const alice = await connect("alice", { guard: { exchanges: 2 } });
  const carol = await connect("carol");
  for (let n = 0; n < 2; n++) {
    assert.ok((await alice.intercom({ action: "send", to: carol.name, message: `ping${n}` })).ok);
    assert.ok((await carol.intercom({ action: "send", to: alice.name, message: `pong${n}` })).ok);
  }
  const refused = await alice.intercom({ action: "send", to: carol.name, message: "ping2" });
  assert.equal(refused.code, "loop_guard", JSON.stringify(refused));
  alice.humanInput();
  const sent = await alice.intercom({ action: "send", to: carol.name, message: "a person asked me to" });
  assert.ok(sent.ok, JSON.stringify(sent));
});
