// The Node client against a real broker: one send in flight under load, the bounded
// inbox, the backlog `read` reports, failing fast, CURVE.

import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { after, before, test } from "node:test";
import { curveKeyPair } from "zeromq";
import { Client, ConnectError } from "../src/index.js";
import { ROOT, startBroker } from "../test-support/broker.js";

let broker; // the one most tests share
let small; // --max-backlog-bytes 65536
let curved; // --curve, with its keys
let keys;
const opened = [];
const group = `node-${process.pid}`;

async function connect(name, options = {}) {
  const session = await Client.connect({ name, endpoint: broker.endpoint, group, timeout: 15, ...options });
  opened.push(session);
  return session;
}

function makeKeys(dir) {
  execFileSync("python3", ["-m", "broker", "keys", "--dir", dir, "--client", "node"],
    { cwd: ROOT, env: { ...process.env, PYTHONPATH: ROOT } });
  const read = (file, field) => new RegExp(`${field} = "(.+)"`).exec(readFileSync(file, "utf8"))[1];
  return { dir, serverKey: read(`${dir}/broker.key`, "public-key"),
    publicKey: read(`${dir}/clients/node.key_secret`, "public-key"),
    secretKey: read(`${dir}/clients/node.key_secret`, "secret-key") };
}

before(async () => { // the brokers start side by side
  keys = makeKeys(mkdtempSync("/tmp/ic-keys-"));
  const started = await Promise.allSettled([startBroker(), startBroker("--max-backlog-bytes", "65536"),
    startBroker("--curve", keys.dir)]);
  [broker, small, curved] = started.map((one) => one.value); // after() stops those that started
  for (const one of started) if (one.status === "rejected") throw one.reason;
}, { timeout: 120_000 });
after(async () => {
  await Promise.all(opened.map((s) => s.close()));
  await Promise.all([broker, small, curved].map((b) => b?.stop()));
  rmSync(keys.dir, { recursive: true, force: true });
});

test("pipelined sends and calls made at once all leave through one send at a time, in order", { timeout: 60_000 }, async () => {
  const sender = await connect("sender");
  const receiver = await connect("receiver");
  const sends = Array.from({ length: 3000 }, (_, i) => sender.sendNowait("receiver", `m${i}`));
  const calls = Array.from({ length: 20 }, () => sender.intercom({ action: "status" }));
  const results = await Promise.all([...sends, ...calls]);
  assert.ok(results.every((r) => r.ok), JSON.stringify(results.find((r) => !r.ok)));
  for (let i = 0; i < 3000; i++) assert.equal((await receiver.receive({ timeout: 10 })).message, `m${i}`);
});

test("a full inbox pauses reading, a call is still answered from the reserve, and nothing is lost", { timeout: 60_000 }, async () => {
  const sender = await connect("flood");
  const reader = await connect("slow", { inboxLimitBytes: 20_000 });
  const text = "x".repeat(100);
  for (let batch = 0; batch < 20; batch++) { // a batch of sends is delivered as one frame
    const results = await Promise.all(Array.from({ length: 50 }, () => sender.sendNowait("slow", text)));
    assert.ok(results.every((r) => r.ok));
  }
  const waitUntil = async (condition) => { // a wait on the reader's own state, with a deadline
    const deadline = performance.now() + 10_000;
    while (!condition()) {
      assert.ok(performance.now() < deadline, "condition not met within 10 s");
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
  };
  await waitUntil(() => reader.inboxStatistics().paused);
  const held = reader.inboxStatistics();
  assert.ok(held.messages < 1000 && held.size >= 20_000, JSON.stringify(held));
  assert.equal((await reader.intercom({ action: "status" })).connected, true);
  for (let i = 0; i < 1000; i++) assert.equal((await reader.receive({ timeout: 10 }))?.message, text);
  assert.equal(await reader.receive({ timeout: 0.2 }), null);
  assert.equal(reader.inboxStatistics().paused, false);
});

test("reads are reported, so a reader taking far more than the broker's backlog bound is never refused", { timeout: 60_000 }, async () => {
  const sessions = [];
  try {
    const at = async (name) => {
      const s = await Client.connect({ name, endpoint: small.endpoint, group, timeout: 15 });
      sessions.push(s);
      return s;
    };
    const sender = await at("fast");
    const reader = await at("steady");
    const text = "y".repeat(1000);
    let received = 0;
    const reading = (async () => { while (received < 2000 && await reader.receive({ timeout: 10 })) received += 1; })();
    for (let batch = 0; batch < 100; batch++) { // each batch (one frame of 20 kB) under the bound
      const results = await Promise.all(Array.from({ length: 20 }, () => sender.sendNowait("steady", text)));
      const refused = results.find((r) => !r.ok);
      assert.equal(refused, undefined, JSON.stringify(refused));
    }
    await reading;
    assert.equal(received, 2000); // 2 MB through a 64 KiB backlog bound
  } finally {
    await Promise.all(sessions.map((s) => s.close()));
  }
});

test("nothing listening at the endpoint fails at once with no_broker", { timeout: 60_000 }, async () => {
  const started = performance.now();
  await assert.rejects(Client.connect({ name: "x", endpoint: `ipc://${broker.dir}/nobody.sock`, timeout: 15 }),
    (err) => err instanceof ConnectError && err.code === "no_broker");
  assert.ok(performance.now() - started < 5000);
});

test("under CURVE the right keys connect and a wrong broker key fails auth_failed, not at the timeout", { timeout: 60_000 }, async () => {
  const { serverKey, publicKey, secretKey } = keys;
  try {
    const options = { name: "sealed", endpoint: curved.endpoint, timeout: 15, curvePublicKey: publicKey, curveSecretKey: secretKey };
    const session = await Client.connect({ ...options, curveServerKey: serverKey });
    assert.equal((await session.intercom({ action: "status" })).connected, true);
    await session.close();
    const started = performance.now();
    await assert.rejects(Client.connect({ ...options, curveServerKey: curveKeyPair().publicKey }),
      (err) => err instanceof ConnectError && err.code === "auth_failed");
    assert.ok(performance.now() - started < 10_000);
  } finally {
    await curved.stop();
    curved = null;
  }
});
