// Run from a fresh project that installed the packed Node client (test_node_install.py):
// the package resolves by its name, its dependencies load, a session talks to a real
// broker, and the runtime surface is the one the types declare.
//
//   node smoke.mjs ENDPOINT SURFACE_JSON
//
// SURFACE_JSON: {exports, sessionMembers, sessionMethods, sessionInternals}. Prints one
// JSON line of what it saw; exits non-zero with the reason on stderr otherwise.

import assert from "node:assert/strict";
import * as bus from "intercom-bus-client";

const [endpoint, surfaceText] = process.argv.slice(2);
const surface = JSON.parse(surfaceText);
const { Client, ConnectError, Session } = bus;
const sorted = (names) => [...names].sort();

assert.deepEqual(sorted(Object.keys(bus)), sorted(surface.exports), "the package's exports");

// The public methods are the prototype's functions less the internal ones the types
// leave out: a method added to Session is either declared or named internal.
const methods = Object.entries(Object.getOwnPropertyDescriptors(Session.prototype))
  .filter(([name, d]) => typeof d.value === "function" && name !== "constructor")
  .map(([name]) => name)
  .filter((name) => !surface.sessionInternals.includes(name));
assert.deepEqual(sorted(methods), sorted(surface.sessionMethods), "Session's public methods");

let started = performance.now();
const refused = await Client.connect({ name: "nobody", endpoint: "ipc:///nonexistent/intercom/broker.sock" })
  .then(() => null, (error) => error);
assert.ok(refused instanceof ConnectError, String(refused));
assert.equal(refused.code, "no_broker");
const refusedAfterS = (performance.now() - started) / 1000;

const suffix = `${process.pid}`;
const sender = await Client.connect({ name: `packed-a-${suffix}`, endpoint, group: `packed-${suffix}` });
const receiver = await Client.connect({ name: `packed-b-${suffix}`, endpoint, group: `packed-${suffix}`,
  keepUntil: "seen" });
try {
  for (const name of surface.sessionMembers) assert.ok(name in receiver, `Session has no ${name}`);
  assert.equal(typeof Client.connect, "function");
  const sent = await sender.intercom({ action: "send", to: receiver.id, message: "from a tarball ✓" });
  assert.equal(sent.ok, true, JSON.stringify(sent));
  const msg = await receiver.receive({ timeout: 5 });
  assert.equal(msg?.message, "from a tarball ✓");
  receiver.markSeen(msg.id);
  started = performance.now();
  let receipt;
  do { // the seen report rides on a heartbeat 0.25 s later
    receipt = await sender.receipt(sent.messageId);
    assert.equal(receipt.ok, true, JSON.stringify(receipt));
    if (receipt.state === "seen") break;
    await new Promise((resolve) => setTimeout(resolve, 50));
  } while (performance.now() - started < 5000);
  assert.equal(receipt.state, "seen", JSON.stringify(receipt));
  console.log(bus.stringify({ ok: true, noBrokerAfterS: Number(refusedAfterS.toFixed(2)), receipt: receipt.state,
    backlogBytes: receiver.welcome.backlogBytes, exports: Object.keys(bus).length, methods: methods.length }));
} finally {
  await sender.close();
  await receiver.close();
}
