// Receipts against a real broker: what the client reports (read, seenThrough) and when,
// keepUntil, receipt() and the status action with messageId, the undelivered event.
// Heartbeats are watched where they leave (the protocol's framesToSend); waits poll
// for a state with a deadline, never a fixed sleep.

import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { Client, errorText } from "../src/index.js";
import { unpackFrame } from "../src/wire.js";
import { startBroker } from "../test-support/broker.js";

let broker; // parked messages are reported undelivered half a second after their session ends
const opened = [];
const group = `receipts-${process.pid}`;
let count = 0;

before(async () => {
  broker = await startBroker("--reclaim-window-s", "0.5");
}, { timeout: 60_000 });
after(async () => {
  await Promise.all(opened.map((s) => s.close()));
  await broker?.stop();
});

async function connect(prefix, options = {}) {
  const name = `${prefix}-${++count}`;
  const session = await Client.connect({ name, endpoint: broker.endpoint, group, timeout: 15, ...options });
  opened.push(session);
  return session;
}

/** Every hb `session` sends from now on (as sent, with the monotonic time), and a
 * promise of the next one. */
function watchHeartbeats(session) {
  const protocol = session.transport.protocol;
  const framesToSend = protocol.framesToSend.bind(protocol);
  const watch = { hbs: [], waiters: [] };
  watch.next = () => new Promise((resolve) => watch.waiters.push(resolve));
  protocol.framesToSend = (at) => {
    const frames = framesToSend(at);
    for (const frame of frames) {
      for (const env of unpackFrame(frame)) {
        if (env.k !== "hb") continue;
        watch.hbs.push({ ...env, at });
        for (const resolve of watch.waiters.splice(0)) resolve(env);
      }
    }
    return frames;
  };
  watch.seen = () => watch.hbs.filter((hb) => "seenThrough" in hb).map((hb) => hb.seenThrough);
  return watch;
}

/** `ask()` again until `done(result)`, for up to `seconds`; the last result. */
async function until(ask, done, seconds = 10) {
  const deadline = performance.now() + seconds * 1000;
  for (;;) {
    const result = await ask();
    if (done(result)) return result;
    assert.ok(performance.now() < deadline, `not reached within ${seconds} s: ${JSON.stringify(result)}`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

const stateIs = (state) => (receipt) => receipt.state === state;

test("keepUntil is 'read' or 'seen'; anything else throws before connecting", async () => {
  for (const keepUntil of ["never", null, 1, "SEEN"]) {
    await assert.rejects(Client.connect({ name: "x", endpoint: broker.endpoint, keepUntil }),
      (err) => err instanceof TypeError && err.message === "keepUntil must be 'read' or 'seen'");
  }
});

test("a send's receipt goes delivered, seen once received, replied; it is the sender's alone", { timeout: 60_000 }, async () => {
  const sender = await connect("sender");
  const receiver = await connect("receiver");
  const sent = await sender.intercom({ action: "send", to: receiver.name, message: "one" });
  assert.equal(sent.ok, true, JSON.stringify(sent));
  const id = sent.messageId;
  const first = await sender.receipt(id);
  assert.deepEqual({ ...first, state: null, deliveredAt: null, readAt: null }, {
    ok: true, messageId: id, state: null, to: receiver.id, toName: receiver.name, deliveredAt: null,
    readAt: null, seenAt: null, repliedAt: null, undeliveredAt: null, reason: null });
  assert.ok(["delivered", "read"].includes(first.state), first.state);
  assert.equal(typeof first.deliveredAt, "number");
  assert.equal((await receiver.receive({ timeout: 10 })).id, id);
  const seen = await until(() => sender.receipt(id), stateIs("seen"));
  assert.ok(seen.readAt >= seen.deliveredAt && seen.seenAt >= seen.readAt, JSON.stringify(seen));
  assert.equal((await receiver.intercom({ action: "reply", message: "got it" })).ok, true);
  const replied = await sender.intercom({ action: "status", messageId: id }); // routed to receipt()
  assert.equal(replied.state, "replied", JSON.stringify(replied));
  assert.ok(replied.repliedAt >= replied.seenAt);
  const notYours = errorText("unknown_message", { message_id: id });
  assert.deepEqual(await receiver.receipt(id), { ok: false, code: "unknown_message", error: notYours });
  assert.deepEqual(await sender.receipt("no-such-id"),
    { ok: false, code: "unknown_message", error: errorText("unknown_message", { message_id: "no-such-id" }) });
});

test("a bad message id is refused here, as the Python client refuses it", async () => {
  const session = await connect("asker");
  const refusal = { ok: false, code: "invalid_params", error: "message_id must be a non-empty string" };
  for (const bad of ["", 5, null, undefined, { id: "x" }]) assert.deepEqual(await session.receipt(bad), refusal);
  assert.deepEqual(await session.intercom({ action: "status", messageId: "" }),
    { ok: false, code: "invalid_params", error: "messageId must not be empty" });
  await session.close();
  assert.equal((await session.receipt("x")).code, "session_closed");
  assert.equal((await session.intercom({ action: "status", messageId: "x" })).code, "session_closed");
});

test("a busy receiver reports what it took in a few heartbeats, the newest id last", { timeout: 60_000 }, async () => {
  const sender = await connect("burst");
  const receiver = await connect("drain");
  const watch = watchHeartbeats(receiver);
  const results = await Promise.all(Array.from({ length: 300 }, (_, i) => sender.sendNowait(receiver.name, `m${i}`)));
  assert.ok(results.every((r) => r.ok), JSON.stringify(results.find((r) => !r.ok)));
  let last = null;
  for (let i = 0; i < 300; i++) last = await receiver.receive({ timeout: 10 });
  assert.equal(last.message, "m299");
  await until(() => sender.receipt(results[299].messageId), stateIs("seen"));
  const told = watch.seen();
  assert.equal(told.at(-1), last.id);
  assert.ok(told.length <= 10, `${told.length} heartbeats told what was seen of 300 messages`);
  assert.equal((await sender.receipt(results[0].messageId)).state, "seen"); // and everything before it
});

test("with keepUntil 'seen' only markSeen reports; a new hello gets the kept message again, dropped as a copy, and the seen id told again", { timeout: 60_000 }, async () => {
  const sender = await connect("teller");
  const watcher = await connect("mcp", { keepUntil: "seen" });
  const watch = watchHeartbeats(watcher);
  const sent = await sender.intercom({ action: "send", to: watcher.name, message: "kept" });
  const id = sent.messageId;
  assert.equal((await watcher.receive({ timeout: 10 })).id, id);
  await until(() => sender.receipt(id), stateIs("read"));
  await watch.next(); // a heartbeat after the take and its report: seen was never said
  assert.deepEqual(watch.seen(), []);
  assert.equal((await sender.receipt(id)).state, "read");

  watcher.transport.resync(); // a new hello on the same connection: the broker sends it again
  await until(() => watcher.inboxStatistics(), (stats) => stats.duplicatesDropped === 1);
  assert.equal(await watcher.receive({ timeout: 0 }), null);

  watcher.markSeen(id);
  await until(() => sender.receipt(id), stateIs("seen"));
  assert.deepEqual(watch.seen(), [id]);
  const hellos = watcher.attempt;
  watcher.transport.resync();
  await until(async () => watch.seen(), (told) => told.length === 2);
  assert.ok(watcher.attempt > hellos);
  assert.deepEqual(watch.seen(), [id, id]); // told again to the new hello
  assert.equal(watcher.inboxStatistics().duplicatesDropped, 1); // seen: not sent again
});

test("a sender hears undelivered once, through nextEvent, when its receiver ends without seeing the message", { timeout: 60_000 }, async () => {
  const sender = await connect("hopeful");
  const keeper = await connect("leaver", { keepUntil: "seen" });
  const sent = await sender.intercom({ action: "send", to: keeper.name, message: "never seen" });
  assert.equal(sent.ok, true, JSON.stringify(sent));
  assert.equal((await keeper.receive({ timeout: 10 })).id, sent.messageId);
  await until(() => sender.receipt(sent.messageId), stateIs("read"));
  await keeper.close();
  // presence events (the keeper left) come first: skipped
  const event = await until(() => sender.nextEvent({ timeout: 10 }), (got) => got === null || got.event === "undelivered");
  assert.deepEqual(event, { event: "undelivered", messageId: sent.messageId, to: keeper.id, toName: keeper.name,
    reason: "never_seen" });
  const receipt = await sender.receipt(sent.messageId);
  assert.equal(receipt.state, "undelivered");
  assert.equal(receipt.reason, "never_seen");
  assert.equal(typeof receipt.undeliveredAt, "number");
});
