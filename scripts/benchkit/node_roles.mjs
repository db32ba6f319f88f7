// The Node client's bench roles, speaking the role protocol of benchkit/role_io.py:
// JSON lines on stdout ({"event": "ready", ...}, then {"event": "result", ...}), "go" on
// stdin for senders and probes. Run as: node node_roles.mjs ROLE ARGS_JSON.
// Clock: process.hrtime is CLOCK_MONOTONIC, the clock of Python's perf_counter here,
// so a receiver's t1 compares with the parent's time of "go".

import { createInterface } from "node:readline";
import { Client } from "../../clients/node/src/index.js";

const emit = (event, fields = {}) => process.stdout.write(JSON.stringify({ event, ...fields }) + "\n");
const clock = () => Number(process.hrtime.bigint()) / 1e9;
const cpuS = (since = { user: 0, system: 0 }) => {
  const used = process.cpuUsage(since);
  return (used.user + used.system) / 1e6;
};
const connect = (name, endpoint) => Client.connect({ name, endpoint, timeout: 20 });

async function waitGo() {
  for await (const line of createInterface({ input: process.stdin })) {
    if (line.trim() === "go") return;
    break;
  }
  process.exit(0); // parent gone or aborted
}

function tally(errors, result) {
  if (!result.ok) errors[result.code ?? "?"] = (errors[result.code ?? "?"] ?? 0) + 1;
}

function percentiles(samplesNs) {
  const s = [...samplesNs].sort((a, b) => a - b);
  const n = s.length;
  const pick = (q) => s[Math.min(n - 1, Math.floor(q * n))] / 1000;
  return { n, p50_us: pick(0.5), p90_us: pick(0.9), p99_us: pick(0.99),
    mean_us: s.reduce((a, b) => a + b, 0) / n / 1000, min_us: s[0] / 1000 };
}

const ROLES = {
  /** Count receive(): the clock starts after `warm` messages, stops at warm + count. */
  async receiver({ endpoint, warm, count, timeout_s: timeoutS, idle_s: idleS = 10 }) {
    const session = await connect("bench-node-recv", endpoint);
    emit("ready", { pid: process.pid, session_id: session.id });
    const total = warm + count;
    let n = 0;
    let t0 = null;
    let n0 = 0;
    let t1 = null;
    let tLast = null;
    const deadline = clock() + timeoutS;
    while (clock() < deadline && n < total) {
      if ((await session.receive({ timeout: idleS })) === null) break;
      n += 1;
      tLast = clock();
      if (t0 === null && n >= warm) {
        t0 = clock();
        n0 = n;
      }
      if (n >= total) t1 = clock();
    }
    const end = t1 ?? tLast;
    const result = t0 === null || end === null || end <= t0
      ? { received: n, complete: false, rate: 0, cpu_s: cpuS() }
      : { received: n, complete: t1 !== null, measured: n - n0, elapsed_s: end - t0, rate: (n - n0) / (end - t0),
        cpu_s: cpuS(), t1: end };
    emit("result", result);
    await session.close();
  },

  /** Pipelined sendNowait with at most `window` answers outstanding. */
  async sender({ endpoint, to, warm, count, size, window }) {
    const session = await connect(`bench-node-send-${process.pid}`, endpoint);
    const text = "x".repeat(size);
    const errors = {};
    emit("ready", { pid: process.pid, session_id: session.id });
    await waitGo();
    const total = warm + count;
    const cpu0 = process.cpuUsage();
    const start = clock();
    const pending = [];
    let head = 0;
    for (let i = 0; i < total; i++) {
      if (pending.length - head >= window) tally(errors, await pending[head++]);
      pending.push(session.sendNowait(to, text));
    }
    while (head < pending.length) tally(errors, await pending[head++]);
    const elapsed = clock() - start;
    emit("result", { sent: total, send_rate: total / elapsed, errors, cpu_s: cpuS(cpu0) });
    await session.close();
  },

  /** Loop receive, then reply to each ask. */
  async ask_responder({ endpoint, idle_s: idleS = 30 }) {
    const session = await connect("bench-node-responder", endpoint);
    emit("ready", { pid: process.pid, session_id: session.id });
    let replies = 0;
    let other = 0;
    const errors = {};
    let cpu0 = null;
    for (;;) {
      const msg = await session.receive({ timeout: idleS });
      cpu0 ??= process.cpuUsage();
      if (msg === null || msg.message === "__stop__") break;
      if (!msg.expectsReply) {
        other += 1;
        continue;
      }
      const result = await session.intercom({ action: "reply", replyTo: msg.id, message: "pong" });
      if (result.ok) replies += 1;
      else tally(errors, result);
    }
    emit("result", { replies, errors, other, cpu_s: cpu0 === null ? 0 : cpuS(cpu0) });
    await session.close();
  },

  /** Ask round trips to the responder, one at a time. */
  async ask_probe({ endpoint, to, n, warm }) {
    const session = await connect("bench-node-asker", endpoint);
    emit("ready", { pid: process.pid });
    await waitGo();
    const samples = [];
    const cpu0 = process.cpuUsage();
    for (let i = 0; i < warm + n; i++) {
      const t = process.hrtime.bigint();
      const result = await session.intercom({ action: "ask", to, message: "ping" });
      const dt = Number(process.hrtime.bigint() - t);
      if (!result.ok || result.message !== "pong") throw new Error(`ask ${i} failed: ${JSON.stringify(result)}`);
      if (i >= warm) samples.push(dt);
    }
    const cpu = cpuS(cpu0);
    const stop = await session.intercom({ action: "send", to, message: "__stop__" });
    emit("result", { stop_ok: Boolean(stop.ok), cpu_s: cpu, ...percentiles(samples) });
    await session.close();
  },
};

const [role, args] = process.argv.slice(2);
try {
  await ROLES[role](JSON.parse(args));
} catch (exc) {
  emit("error", { error: String(exc?.stack ?? exc) });
  process.exitCode = 1;
}
