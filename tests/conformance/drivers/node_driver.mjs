// The conformance driver of the Node client: JSON lines in, JSON lines out, as
// python_driver.py (see tests/conformance/README.md). Commands run concurrently;
// answers are written as they complete, with 64-bit integers exact.

import { createInterface } from "node:readline";
import { Client, ConnectError, parse, stringify } from "../../../clients/node/src/index.js";

const sessions = new Map();
const histories = new Map();

async function connect(name, args) {
  const history = histories.get(name) ?? [];
  histories.set(name, history);
  try {
    const session = await Client.connect({ ...args, history: (entry) => history.push(entry) });
    sessions.set(name, session);
    return { ok: true, id: session.id, welcome: session.welcome };
  } catch (exc) {
    if (exc instanceof ConnectError) return { ok: false, code: exc.code, error: exc.message };
    throw exc;
  }
}

const COMMANDS = {
  intercom: (s, a) => s.intercom(a),
  receive: (s, a) => s.receive({ timeout: a.timeout ?? null }),
  next_event: (s, a) => s.nextEvent({ timeout: a.timeout ?? null }),
  respond: (s, a) => s.respond(a),
  invoke: (s, a) => s.invoke(a),
  grant_child: (s) => s.grantChild(),
  register_run: (s, a) => s.registerRun(a.runId, a.stages, { postMortem: a.postMortem }),
  add_stages: (s, a) => s.addStages(a.runId, a.stages, a.parent ?? null),
  set_stage_state: (s, a) => s.setStageState(a.runId, a.stage, a.state),
  end_run: (s, a) => s.endRun(a.runId),
  set_status: (s, a) => s.setStatus(a.status),
  receipt: (s, a) => s.receipt(a.messageId),
  mark_seen: (s, a) => s.markSeen(a.messageId),
  contact_supervisor: (s, a) => s.contactSupervisor(a),
  close: async (s) => {
    await s.close();
    return null;
  },
};

async function run(request) {
  let line;
  try {
    const { cmd, session, args = {} } = request;
    let result;
    if (cmd === "connect") result = await connect(session, args);
    else if (cmd === "history") result = histories.get(session) ?? [];
    else result = await COMMANDS[cmd](sessions.get(session), args);
    line = stringify({ id: request.id, result: result ?? null });
  } catch (exc) {
    line = stringify({ id: request.id ?? null, crash: String(exc?.stack ?? exc) });
  }
  process.stdout.write(line + "\n");
}

const pending = [];
for await (const line of createInterface({ input: process.stdin })) {
  if (line.trim()) pending.push(run(parse(line)));
}
await Promise.allSettled(pending);
await Promise.all([...sessions.values()].map((s) => s.close()));
