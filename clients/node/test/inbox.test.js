// The inbox: counted, deduplicated by id, taken with a timeout; rendering of bodies.

import assert from "node:assert/strict";
import { test } from "node:test";
import { Inbox, MESSAGE_OVERHEAD_BYTES } from "../src/inbox.js";
import { renderBody } from "../src/render.js";
import { parse, stringify } from "../src/json.js";

test("a resent copy of a message handed out already is dropped and counted", async () => {
  let takes = 0;
  const inbox = new Inbox(() => takes++);
  inbox.putAll([{ id: "a", message: "xy" }, { id: "b", message: "" }]);
  assert.equal(inbox.size, 2 * MESSAGE_OVERHEAD_BYTES + 2);
  assert.equal((await inbox.take(0)).id, "a");
  inbox.putAll([{ id: "a", message: "xy" }, { id: "c", message: "" }]);
  assert.equal(inbox.duplicatesDropped, 1);
  assert.deepEqual([(await inbox.take(0)).id, (await inbox.take(0)).id], ["b", "c"]);
  assert.equal(inbox.size, 0);
  assert.equal(takes, 3);
});

test("a take waits for what is put, and gives null at its timeout", async () => {
  const inbox = new Inbox();
  const waiting = inbox.take(5);
  inbox.putAll([{ id: "x", message: "m" }]);
  assert.equal((await waiting).id, "x");
  const started = performance.now();
  assert.equal(await inbox.take(0.05), null);
  assert.ok(performance.now() - started >= 45);
});

test("bodies read as the Python client renders them", () => {
  const msg = { id: "m1", from: "s1", fromName: "alice", message: "hi", sentAt: 1796216272.3417838, expectsReply: true,
    attachments: [{ type: "snippet", name: "x", content: "y", language: "py" }] };
  assert.equal(renderBody(msg), "Message from alice (s1)\nSent: 2026-12-02 12:57:52 UTC\n\nhi\n\n[snippet: x]\n```py\ny\n```" +
    '\n\nThey are waiting for your answer: intercom({action: "reply", replyTo: "m1", message: "..."})');
  assert.equal(renderBody({ ...msg, expectsReply: false, attachments: [], receivedBeforeStart: true }, false),
    "Messages received before you started\nMessage from alice (s1)\nSent: 2026-12-02 12:57:52 UTC\n\nhi");
  assert.match(renderBody({ from: "s", fromName: null, message: "m", sentAt: "later" }), /^Message from None \(s\)\nSent: unknown time/);
});

test("a message whose sender nobody can message says so instead of the reply hint", () => {
  const msg = { id: "m2", from: "c1", fromName: "cli", message: "hi", sentAt: 1796216272.5, expectsReply: false,
    attachments: [], replyable: false };
  const said = "Message from cli (c1)\nSent: 2026-12-02 12:57:52 UTC\n\nhi\n\nIts sender cannot be answered: it came " +
    "from a command line or tool that nobody can send to, so a send or reply to it fails.";
  assert.equal(renderBody(msg), said);
  assert.equal(renderBody(msg, false), said);
  // An ask from it is answered with reply while it waits: the hint stays.
  assert.match(renderBody({ ...msg, expectsReply: true }), /They are waiting for your answer: intercom\(\{action: "reply", replyTo: "m2"/);
  // Without the field (a broker that does not send it), the usual hint.
  const { replyable, ...plain } = msg;
  assert.match(renderBody(plain), /To answer: intercom\(\{action: "send", to: "c1"/);
});

test("JSON text keeps 64-bit integers exact both ways", () => {
  const value = { big: 2n ** 63n - 1n, small: 5, text: "9007199254740993", list: [-(2n ** 63n)] };
  const text = stringify(value);
  assert.equal(text, '{"big":9223372036854775807,"small":5,"text":"9007199254740993","list":[-9223372036854775808]}');
  assert.deepEqual(parse(text), value);
  assert.deepEqual(parse('[0.12345678901234567, 1e12345678901234567, "12345678901234567890"]'),
    [0.12345678901234567, Infinity, "12345678901234567890"]);
});

test("draining a long backlog lets the event loop turn (timers, the socket) every few takes", async () => {
  const inbox = new Inbox();
  inbox.putAll(Array.from({ length: 500 }, (_, i) => ({ id: String(i), message: "" })));
  let turned = false;
  setImmediate(() => { turned = true; });
  let firstAfterTurn = null;
  for (let i = 0; i < 500; i++) {
    assert.equal((await inbox.take(0)).id, String(i));
    if (turned && firstAfterTurn === null) firstAfterTurn = i;
  }
  assert.ok(firstAfterTurn !== null && firstAfterTurn < 100, `the loop turned only at take ${firstAfterTurn}`);
});
