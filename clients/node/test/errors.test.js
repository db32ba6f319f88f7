// Error texts and tool-parameter checks read exactly as the Python side writes them.

import assert from "node:assert/strict";
import { test } from "node:test";
import { errorReply, errorText, formatG, pyRepr } from "../src/errors.js";
import { intercomParamsProblem, validate } from "../src/validate.js";
import { TOOL_SCHEMAS } from "../src/schemas.js";

test("repr quotes like Python: single quotes unless the text holds one and no double", () => {
  assert.equal(pyRepr("abc"), "'abc'");
  assert.equal(pyRepr("it's"), `"it's"`);
  assert.equal(pyRepr(`it's "x"`), `'it\\'s "x"'`);
  assert.equal(pyRepr("a\nb\t\\"), "'a\\nb\\t\\\\'");
  assert.equal(pyRepr("é😀"), "'é😀'");
  assert.equal(pyRepr("\u0000\u200b"), "'\\x00\\u200b'");
  assert.equal(pyRepr(null), "None");
});

test("format g drops trailing zeros and switches to exponents as Python does", () => {
  assert.equal(formatG(10), "10");
  assert.equal(formatG(0.5), "0.5");
  assert.equal(formatG(600.0), "600");
  assert.equal(formatG(1234567), "1.23457e+06");
  assert.equal(formatG(0.00001), "1e-05");
  assert.equal(formatG(123.456789), "123.457");
});

test("a template is filled with str, repr and format fields, and left whole when a field is missing", () => {
  assert.equal(errorText("broker_unavailable", { timeout_s: 10 }), "Broker did not answer within 10 s");
  assert.equal(errorText("unknown_thread", { reply_to: "x'y" }),
    `No unresolved inbound ask or current message matches replyTo "x'y"`);
  assert.equal(errorText("too_many_asks", {}), "Too many pending asks (limit {limit}); wait for one to finish");
  assert.deepEqual(errorReply("session_closed"), { ok: false, code: "session_closed", error: "The session is closed" });
});

test("intercom parameters are refused with the schema's sentences", () => {
  assert.deepEqual(intercomParamsProblem({ action: "send", to: "a", message: "b" }), null);
  assert.deepEqual(intercomParamsProblem({}), ["invalid_params", { detail: "missing required parameter 'action'" }]);
  assert.deepEqual(intercomParamsProblem({ action: "list", bogus: 1 }), ["invalid_params", { detail: "unknown parameter 'bogus'" }]);
  assert.deepEqual(intercomParamsProblem({ action: "ask", timeout: -1 }),
    ["invalid_params", { detail: "timeout must be greater than 0" }]);
  assert.deepEqual(intercomParamsProblem({ action: "send", attachments: [{ type: "file", name: "n" }] }),
    ["invalid_attachment", { index: 0, detail: "missing required parameter attachment.'content'" }]);
  const long = "😀".repeat(262145); // code points, as Python counts them, not UTF-16 units
  assert.deepEqual(intercomParamsProblem({ action: "send", message: long }),
    ["message_too_large", { size: 262145, limit: 262144 }]);
  assert.equal(intercomParamsProblem({ action: "send", message: "😀".repeat(200000) }), null);
});

test("a value of the wrong JavaScript kind is refused, not sent", () => {
  assert.equal(validate(TOOL_SCHEMAS.intercom, { action: "send", to: () => 1 }), "to must be of type string");
  assert.equal(validate(TOOL_SCHEMAS.intercom, { action: "send", attachments: {} }), "attachments must be of type array");
  assert.equal(validate(TOOL_SCHEMAS.intercom, { action: "ask", timeout: true }), "timeout must be of type number");
});
