// Several brokers on one database: a session whose broker dies says hello to the next
// endpoint with its id and memberships, and goes on there.

import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { test } from "node:test";
import { Client } from "../src/index.js";
import { startBroker } from "../test-support/broker.js";

test("a session whose broker is killed moves to the other broker with its id and groups", { timeout: 90_000 }, async () => {
  const shared = mkdtempSync("/tmp/ic-db-");
  const started = await Promise.allSettled([startBroker("--db", `${shared}/bus.db`),
    startBroker("--db", `${shared}/bus.db`)]);
  const [first, second] = started.map((one) => one.value);
  let session = null;
  try {
    for (const one of started) if (one.status === "rejected") throw one.reason;
    session = await Client.connect({ name: "mover", endpoint: [first.endpoint, second.endpoint], group: "move", timeout: 15 });
    assert.equal((await session.intercom({ action: "join", group: "kept" })).ok, true);
    const statusUntil = async (done) => { // polls the session's own answer, with a deadline
      const deadline = performance.now() + 30_000;
      for (;;) {
        const status = await session.intercom({ action: "status" });
        if (done(status)) return status;
        assert.ok(performance.now() < deadline, `not as expected: ${JSON.stringify(status)}`);
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
    };
    // The brokers have linked: the second one knows this session before the first dies.
    const before = await statusUntil((status) => status.broker.otherBrokersLive === 1);
    await first.stop("SIGKILL");
    const status = await statusUntil((now) => now.connected && now.broker.id !== before.broker.id);
    assert.equal(status.sessionId, before.sessionId);
    assert.deepEqual(status.groups, ["move", "kept"]);
    assert.equal(session.transport.endpoint, second.endpoint);
  } finally {
    await session?.close();
    await Promise.all([first?.stop(), second?.stop()]);
    rmSync(shared, { recursive: true, force: true });
  }
});
