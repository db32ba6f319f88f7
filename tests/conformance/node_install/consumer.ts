// A TypeScript program of the kind a runtime author writes against the Node client,
// installed from its packed tarball into a fresh project: `tsc --strict --noEmit`
// must accept it (test_node_install.py). It is type-checked, never run. The lines
// marked @ts-expect-error must fail to type-check: they show the types are not `any`.
// The test puts the exact-name checks of the surface where the SURFACE line is.

import * as bus from "intercom-bus-client";
import {
  BusError, Client, ConnectError, ERRORS, LIMITS, PROTOCOL_VERSION, Session, TOOL_SCHEMAS,
  defaultEndpoint, endpointList, errorReply, errorText, parse, stringify,
} from "intercom-bus-client";
import type {
  AskAnswer, Attachment, BusEvent, ConnectOptions, Failure, HistoryEntry, InboundMessage,
  InboxStatistics, IntercomParams, Receipt, Result, StageSpec, Welcome,
} from "intercom-bus-client";

// SURFACE

function is<T>(_value: T): void {}

const history: HistoryEntry[] = [];
const options: ConnectOptions = {
  name: "typed",
  endpoint: ["ipc:///tmp/a.sock", "ipc:///tmp/b.sock"],
  group: "dev",
  agent: "reviewer",
  kind: "interactive",
  keepUntil: "seen",
  timeout: 5,
  inboxLimitBytes: 1 << 20,
  config: { replyHint: false, askTimeout: 30 },
  confirm: async (params: IntercomParams) => params.action === "send",
  history: (entry) => {
    history.push(entry);
    if (entry.type === "intercom_session_identity") is<string>(entry.reclaimSecret);
  },
  // @ts-expect-error: cwd is a path
  cwd: 3,
};

export async function consume(endpoint: string): Promise<string> {
  let session: Session;
  try {
    session = await Client.connect({ ...options, endpoint, cwd: "/srv" });
  } catch (error) {
    if (error instanceof ConnectError) return `${error.name} ${error.code}: ${error.message}`;
    throw error;
  }
  // @ts-expect-error: sessions come from Client.connect
  new Session();
  // @ts-expect-error: a name is required
  await Client.connect({ endpoint });
  // @ts-expect-error: not a session kind
  await Client.connect({ name: "x", kind: "robot" });

  is<string>(session.id);
  is<string[]>(session.groups);
  is<string>(session.homeGroup);
  is<string | null>(session.channel);
  is<boolean>(session.connected);
  const welcome: Welcome = session.welcome;
  is<number | bigint>(welcome.backlogBytes);

  const sent = await session.intercom({ action: "send", to: "coder", message: "tests are red" });
  if (!sent.ok) {
    is<Failure>(sent);
    is<string>(sent.code);
    return sent.error;
  }
  const messageId = sent.messageId;
  is<string | undefined>(messageId);
  // @ts-expect-error: not an action
  await session.intercom({ action: "shout" });
  // @ts-expect-error: attachments have a type, a name and content
  await session.intercom({ action: "send", to: "x", message: "y", attachments: [{ name: "a" }] });

  const attachment: Attachment = { type: "snippet", name: "a.py", content: "print(1)", language: "python" };
  const asked = await session.intercom({ action: "ask", to: "coder", message: "ready?", timeout: 5,
    attachments: [attachment] });
  if (asked.ok) is<AskAnswer["message"]>(asked.message);

  const listed: Result = await session.intercom({ action: "list" });
  if (listed.ok) is<unknown>(listed.sessions);

  const receipt = await session.receipt(messageId ?? "");
  if (receipt.ok) {
    is<Receipt["state"]>(receipt.state);
    is<number | null>(receipt.seenAt);
    // @ts-expect-error: a state is one of five words
    is<"lost">(receipt.state);
  }
  const viaStatus = await session.intercom({ action: "status", messageId: "m1" });
  if (viaStatus.ok) is<"delivered" | "read" | "seen" | "replied" | "undelivered">(viaStatus.state);

  const msg: InboundMessage | null = await session.receive({ timeout: 5 });
  if (msg !== null) {
    is<string>(msg.body);
    is<boolean>(msg.expectsReply);
    session.markSeen(msg.id);
    await session.intercom({ action: "reply", message: "on it" });
  }
  await session.receive(1.5);
  await session.receive();
  // @ts-expect-error: the timeout is in seconds, a number
  await session.receive({ timeout: "5" });

  const event: BusEvent | null = await session.nextEvent({ timeout: 0.1 });
  if (event?.event === "output") await session.ackOutput(event.outputId);
  if (event?.event === "invocation") await session.finishInvocation(event.id, { ok: false, error: "busy" });
  if (event?.event === "undelivered") is<"session_ended" | "bound_reached" | "never_seen">(event.reason);
  if (event?.event === "session_joined") is<Record<string, unknown>>(event.session);

  const fast = await session.sendNowait("coder", "bulk");
  if (fast.ok) is<true | undefined>(fast.delivered);
  const stats: InboxStatistics = session.inboxStatistics();
  is<boolean>(stats.paused);
  await session.setStatus("thinking");
  await session.markTerminal();
  const boss = await session.contactSupervisor({ message: "stuck", timeout: 10 });
  if (boss.ok) is<string>(boss.replyId);

  const out = await session.respond({ content: "done", channel: "owner", attachments: [{ path: "/tmp/a.png", altText: "a" }] });
  if (out.ok) is<string>(out.outputId);
  const queued = await session.invoke({ session: "discord:42", reason: "follow up" });
  if (queued.ok) is<string>(queued.id);
  const sessions = await session.listSessions("reviewer");
  if (sessions.ok) is<Array<Record<string, unknown>>>(sessions.sessions);
  await session.reset();
  await session.delete();

  const stages: StageSpec[] = [{ name: "plan" }, { name: "build", kind: "agent", group: true,
    children: [{ name: "test", state: "RUNNING" }] }];
  const run = await session.registerRun("r1", stages, { postMortem: true });
  if (run.ok) {
    is<Record<string, string>>(run.grants);
    is<string>(run.runGrant);
    const taken = await session.takeOver("r1", run.runGrant);
    if (taken.ok) is<string | null>(taken.tookOverFrom);
  }
  await session.addStages("r1", [{ name: "deploy" }], "workflow:r1/build");
  await session.setStageState("r1", "plan", "completed");
  // @ts-expect-error: not a stage state
  await session.setStageState("r1", "plan", "done");
  await session.revokeStage("r1", "build");
  const child = await session.grantChild();
  if (child.ok) is<string>(child.grant);
  await session.endRun("r1");
  await session.close();

  is<string[]>(endpointList("ipc:///a, ipc:///b"));
  is<string>(defaultEndpoint({ INTERCOM_DATA_DIR: "/tmp/x" }));
  is<string>(errorText("session_closed"));
  is<false>(errorReply("invalid_params", { detail: "x" }).ok);
  const refusal = new BusError("session_closed");
  is<Failure>(refusal.reply());
  is<string>(stringify({ big: 2n ** 60n }));
  is<unknown>(parse("{\"n\": 18446744073709551615}"));
  is<number>(PROTOCOL_VERSION);
  is<number | undefined>(LIMITS.MAX_MESSAGE_CHARS);
  is<string | undefined>(ERRORS.no_broker);
  is<unknown>(TOOL_SCHEMAS.intercom.properties);
  return `${history.length}`;
}
