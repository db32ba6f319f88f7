// Types of the package's whole public surface (src/index.js), written by hand.
// Answers are the broker's JSON: the fields PROTOCOL.md documents are typed, and every
// answer also admits fields not listed here (a newer broker may add some). Kept
// accurate by tests/conformance/test_node_install.py (tsc --strict on a consumer of
// this surface, and the runtime's exports and Session methods against these names).

// -- answers -------------------------------------------------------------------------------

/** Any field an answer carries beyond the ones typed. */
export interface OtherFields {
  readonly [field: string]: unknown;
}

/** A call that succeeded: `ok: true` and the answer's fields. */
export type Success<T extends object = {}> = { ok: true } & T & OtherFields;

/** A refusal: a stable `code` (docs/errors.md, or the keys of ERRORS) and its text.
 * Redirects (run_elsewhere, run_moving) add `endpoint`; target_not_found may add
 * `lastSeenAt`; the guard's flood_guard and loop_guard add `retryAfterS`. */
export interface Failure extends OtherFields {
  ok: false;
  code: string;
  error: string;
  endpoint?: string;
  lastSeenAt?: number;
  /** Seconds until a send to that session may pass again. */
  retryAfterS?: number;
}

/** What every Session call resolves to; it never rejects for a bad call. */
export type Result<T extends object = {}> = Success<T> | Failure;

// -- what goes in ----------------------------------------------------------------------------

/** An attachment of a message (the intercom tool's `attachments` items). */
export interface Attachment {
  type: "file" | "snippet" | "context";
  name: string;
  content: string;
  language?: string;
}

/** An attachment of a respond output: a file path; `altText` for images only. */
export interface OutputAttachment {
  path: string;
  altText?: string;
}

export type IntercomAction = "list" | "groups" | "join" | "leave" | "send" | "ask" | "reply" | "pending" | "status";

/** The intercom tool's parameters (TOOL_SCHEMAS.intercom), checked before anything is sent. */
export interface IntercomParams {
  action: IntercomAction;
  /** Full session id, exact name, unique 8-hex id prefix, Atomic session id, or workflow:<runId>/<stage>[/...] path. */
  to?: string;
  message?: string;
  attachments?: Attachment[];
  /** Exact message id or unique 8-hex prefix of an unresolved inbound ask. */
  replyTo?: string;
  group?: string;
  /** status only: a message this session sent; answers its receipt. */
  messageId?: string;
  /** ask only: seconds to wait for the reply (default 600). */
  timeout?: number;
}

export type SessionKind = "interactive" | "noninteractive" | "stage" | "control";

/** When the broker may forget a live message sent to this session: once this client
 * has it ("read"), or once the program took it ("seen": receive() or markSeen()). */
export type KeepUntil = "read" | "seen";

/** The client-side settings the Python client reads from its config file. */
export interface ClientConfig {
  replyHint: boolean;
  maxPendingAsks: number;
  askTimeout: number;
  status: string | null;
  group: string | null;
  confirmSend: boolean;
}

/** An `intercom_session_identity` history entry, or the part of one connect reads. */
export interface Identity {
  sessionId?: string | null;
  /** The reclaim secret: keep it private. */
  reclaimSecret?: string | null;
  atomicSessionId?: string | null;
}

export interface ConnectOptions {
  /** 1 to 128 characters. */
  name: string;
  /** One endpoint, an array, or comma-separated text (brokers sharing one database, tried
   * in turn). Default: INTERCOM_ENDPOINT, else ipc://<INTERCOM_DATA_DIR or ~/.intercom>/broker.sock. */
  endpoint?: string | readonly string[] | null;
  group?: string | null;
  agent?: string | null;
  atomicSessionId?: string | null;
  /** Default "interactive"; anything else throws TypeError. */
  kind?: SessionKind;
  /** The launching session (its id, or the Session itself). */
  parent?: string | Session | null;
  sessionId?: string | null;
  /** A workflow stage's canonical path. */
  stage?: string | null;
  transcript?: string | null;
  /** What the launcher handed over: a stage's grant, or a child's (with `parent`). */
  grant?: string | null;
  /** Take that session id back. */
  identity?: Identity | null;
  /** Given each history entry; a sink that throws loses that entry, never the call. */
  history?: ((entry: HistoryEntry) => void) | null;
  /** z85 text; or INTERCOM_CURVE_SERVER_KEY / _PUBLIC_KEY / _SECRET_KEY. All three or none. */
  curveServerKey?: string | null;
  curvePublicKey?: string | null;
  curveSecretKey?: string | null;
  /** Seconds to wait for the welcome (default 10). */
  timeout?: number;
  /** Default 8 MiB; past it reading pauses until receive() takes messages. */
  inboxLimitBytes?: number;
  channel?: string | null;
  persistent?: boolean;
  /** What `list` shows as this session's working directory (default process.cwd()). */
  cwd?: string | null;
  /** Hear `undeliverable` events (default true). */
  notifyUndeliverable?: boolean;
  config?: Partial<ClientConfig>;
  /** Called before a send or ask that is not a reply when config.confirmSend is true;
   * false (or a throw) answers confirmation_declined. */
  confirm?: ((params: IntercomParams) => boolean | Promise<boolean>) | null;
  /** Default "read"; anything else throws TypeError. */
  keepUntil?: KeepUntil;
  /** How a message reaches the program behind this session, shown in list rows
   * (host defaults to "node"). */
  capabilities?: Capabilities | null;
  /** The gate for messages from other sessions (default "accept"). */
  inbound?: InboundPolicy | null;
  /** The flood and loop guard on this session's sends: true (the defaults) or the
   * bounds to change (0 turns one off); off when absent. Refusals: flood_guard,
   * loop_guard, with retryAfterS. */
  guard?: boolean | GuardBounds | null;
}

/** The guard's bounds (defaults 30, 20, 120). */
export interface GuardBounds {
  /** Messages to one session in any 60 s. */
  perMinute?: number;
  /** Turns of direction with one session with no person's input or pause between. */
  exchanges?: number;
  /** Seconds with no message between the two that start the turns again. */
  pauseS?: number;
}

export type InboundPolicy = "accept" | "hold" | "refuse";

/** How a message reaches the program or model behind a session. */
export interface Capabilities {
  /** Its host is pushed to (a channel notification, a receive loop). */
  push?: boolean;
  /** A host hook took its mail recently: a turn that ends does not leave mail unseen. */
  hooks?: boolean;
  /** It receives mid-turn (every tool result carries its inbox). */
  steer?: boolean;
  /** mcp, python, node, or the runtime's own name. */
  host?: string;
}

/** One message held by a session's gate. */
export interface HeldMessage extends OtherFields {
  messageId: string;
  from: string;
  fromName: string;
  sentAt: number;
  heldAt: number;
  expiresAt: number;
  expectsReply: boolean;
  chars: number;
  attachments: number;
  preview: string;
}

export interface HeldAnswer extends OtherFields {
  policy: InboundPolicy;
  held: HeldMessage[];
}

/** A held message was settled (by a person, or by its expiry). */
export interface HeldSettledEvent extends OtherFields {
  event: "held_settled";
  messageId: string;
  to: string;
  toName: string;
  outcome: "released" | "dropped" | "expired";
  at: number;
}

// -- what comes out --------------------------------------------------------------------------

/** The broker's welcome (PROTOCOL.md, section 4). */
export interface Welcome extends OtherFields {
  sessionId: string;
  /** The reclaim secret of this id: never show it. */
  token: string;
  name: string;
  groups: string[];
  homeGroup: string;
  brokerId: string;
  livenessS: number;
  parent: string | null;
  pubEndpoint: string | null;
  /** An integer; a BigInt past 32 bits (the frames are decoded with useBigInt64). */
  backlogBytes: number | bigint;
  channel?: string;
  persistent?: boolean;
  droppedGroups?: string[];
  reclaimed?: boolean;
  reason?: string;
}

/** An inbound message, as receive() gives it. */
export interface InboundMessage extends OtherFields {
  id: string;
  from: string;
  fromName: string;
  message: string;
  attachments: Attachment[];
  /** Wall-clock seconds. */
  sentAt: number;
  expectsReply: boolean;
  /** The text the agent sees: header, message, attachments and a reply hint. */
  body: string;
  replyTo?: string;
  supervisor?: boolean;
  timeoutS?: number;
  target?: string;
  ackRequired?: boolean;
  receivedBeforeStart?: boolean;
  postMortem?: boolean;
  stage?: string;
  held?: boolean;
}

/** The answer of a send or reply: delivered to a live session, or queued for a stage. */
export interface SendAnswer {
  delivered?: true;
  queued?: true;
  to?: string;
  toName?: string;
  messageId?: string;
  replyTo?: string;
  target?: string;
  position?: number;
  held?: boolean;
}

/** The answer of an ask (and of contactSupervisor): the reply. */
export interface AskAnswer {
  from: string;
  fromName: string;
  message: string;
  attachments: Attachment[];
  /** The reply's id. */
  replyId: string;
  /** The ask's id. */
  messageId: string;
  sentAt: number;
}

export type ReceiptState = "delivered" | "read" | "seen" | "replied" | "undelivered";
export type UndeliveredReason = "session_ended" | "bound_reached" | "never_seen";

/** What became of a message this session sent; times are wall-clock seconds, null until reached. */
export interface Receipt {
  messageId: string;
  state: ReceiptState;
  to: string;
  toName: string;
  deliveredAt: number | null;
  readAt: number | null;
  seenAt: number | null;
  repliedAt: number | null;
  undeliveredAt: number | null;
  reason: UndeliveredReason | null;
}

export interface RespondAnswer {
  final: boolean;
  /** The broker took it for delivery (not that a person read it). */
  sent: true;
  channel: string;
  outputId: string;
}

export interface InvokeAnswer {
  queued: true;
  /** The job id (its invocation event's id). */
  id: string;
  session: string;
}

export interface AckOutputAnswer {
  acked: true;
  outputId: string;
  /** Whether the output's sender was there to be told (output_acked). */
  told: boolean;
}

export interface SessionsAnswer {
  sessions: Array<Record<string, unknown>>;
}

export interface GrantAnswer {
  grant: string;
}

export type StageKind = "agent" | "prompt" | "tool" | "ui";
export type StageState = "PENDING" | "RUNNING" | "completed" | "failed" | "skipped";

/** One node of a run's stage tree. */
export interface StageSpec {
  /** Non-empty, without '/' or '*'. */
  name: string;
  id?: string | null;
  /** Default "agent". */
  kind?: StageKind;
  /** Default "PENDING". */
  state?: StageState;
  /** A group name, or true for the stage's own subgroup. */
  group?: string | true | null;
  intercom?: boolean;
  children?: StageSpec[];
}

/** register_run, take_over and add_stages answers. */
export interface RunAnswer {
  runId: string;
  /** The run's agent stages (canonical paths). */
  stages: string[];
  /** Stage path -> the grant its session passes at connect. */
  grants: Record<string, string>;
}

export interface RegisteredRun extends RunAnswer {
  group: string;
  groups: string[];
  /** Lets another session take the run over (takeOver). */
  runGrant: string;
}

export interface TakenOverRun extends RegisteredRun {
  tookOverFrom: string | null;
}

export interface InboxStatistics {
  messages: number;
  size: number;
  limitBytes: number;
  paused: boolean;
  duplicatesDropped: number;
}

/** A session's public row, as presence events and list carry it. */
export type SessionRow = Record<string, unknown>;

export interface PresenceEvent extends OtherFields {
  event: "session_joined" | "session_left" | "presence_update";
  session: SessionRow;
}

/** A message queued for a workflow stage could not be delivered. */
export interface UndeliverableEvent extends OtherFields {
  event: "undeliverable";
  messageId: string;
  runId: string;
  target: string;
  reason: string;
}

/** A live message this session sent never reached its receiver. */
export interface UndeliveredEvent extends OtherFields {
  event: "undelivered";
  messageId: string;
  to: string;
  toName: string;
  reason: UndeliveredReason;
}

/** A control connection acting for this session changed its memberships. */
export interface MembershipsChangedEvent extends OtherFields {
  event: "memberships_changed";
  groups: string[];
}

/** A respond to this session's channel. */
export interface OutputEvent extends OtherFields {
  event: "output";
  channel: string;
  content: string;
  attachments: OutputAttachment[];
  final: boolean;
  fromSession: string;
  /** Acknowledge it with ackOutput(outputId). */
  outputId: string;
  fromId: string;
}

/** An output this session sent was acknowledged. */
export interface OutputAckedEvent extends OtherFields {
  event: "output_acked";
  outputId: string;
  channel: string;
}

/** A turn another session of the agent asked for: report it with finishInvocation(id). */
export interface InvocationEvent extends OtherFields {
  event: "invocation";
  id: string;
  agent: string;
  fromSession: string;
  reason: string;
}

/** What nextEvent() gives. */
export type BusEvent =
  | PresenceEvent
  | UndeliverableEvent
  | UndeliveredEvent
  | MembershipsChangedEvent
  | OutputEvent
  | OutputAckedEvent
  | InvocationEvent;

/** Each entry has its `type` and `at` (wall-clock seconds). */
export type HistoryEntry =
  | {
      type: "intercom_session_identity";
      sessionId: string;
      /** Keep it private. */
      reclaimSecret: string;
      name: string;
      atomicSessionId: string | null;
      brokerId: string | null;
      at: number;
    }
  | {
      type: "intercom_sent";
      action: "send" | "ask" | "reply" | "contact_supervisor";
      to: string | null;
      message: string | null;
      replyTo: string | null;
      result: Success;
      at: number;
    }
  | {
      type: "intercom_received";
      messageId: string | null;
      from: string | null;
      fromName: string | null;
      message: string | null;
      attachments: Attachment[] | null;
      sentAt: number | null;
      expectsReply: boolean | null;
      replyTo: string | null;
      target?: string | null;
      at: number;
    }
  | {
      type: "respond";
      content: string;
      draft: null;
      channel: string;
      attachments: OutputAttachment[] | null;
      final: boolean;
      result: Success<RespondAnswer>;
      at: number;
    };

/** Seconds (null: no limit), as a number or `{timeout}`. */
export type WaitOptions = number | { timeout?: number | null } | null;

// -- classes ---------------------------------------------------------------------------------

export declare class Client {
  private constructor();
  /** Open a session and wait for the broker's welcome. Throws ConnectError (`code`:
   * no_broker within about a second when nothing listens, invalid_endpoint,
   * broker_unavailable, auth_failed, grant_required, invalid_grant, ...) and TypeError
   * for a bad kind or keepUntil, or incomplete CURVE keys. */
  static connect(options: ConnectOptions): Promise<Session>;
}

/** A session on the bus; made by Client.connect. */
export declare class Session {
  private constructor();

  /** The session's id (a UUID), as the welcome gave it. */
  readonly id: string;
  readonly name: string;
  readonly kind: SessionKind;
  readonly keepUntil: KeepUntil;
  /** The broker's latest welcome (without `ok`). */
  readonly welcome: Welcome;
  /** Memberships, as last acknowledged. */
  readonly groups: string[];
  readonly homeGroup: string;
  /** This conversation's channel id (sessions with an agent), else null. */
  get channel(): string | null;
  get connected(): boolean;

  /** One intercom tool call. `status` with `messageId` answers that message's receipt. */
  intercom(params: IntercomParams & { action: "status"; messageId: string }): Promise<Result<Receipt>>;
  intercom(params: IntercomParams & { action: "ask" }): Promise<Result<AskAnswer>>;
  intercom(params: IntercomParams & { action: "send" | "reply" }): Promise<Result<SendAnswer>>;
  intercom(params: IntercomParams): Promise<Result>;

  /** The next inbound message (it becomes the current turn), or null on timeout. */
  receive(options?: WaitOptions): Promise<InboundMessage | null>;
  /** The next in-band event, or null on timeout. */
  nextEvent(options?: WaitOptions): Promise<BusEvent | null>;
  /** What became of a message this session sent; anyone else's, or one the broker no
   * longer keeps, answers unknown_message. */
  receipt(messageId: string): Promise<Result<Receipt>>;
  /** The program has message `messageId` and every one received before it (for
   * keepUntil "seen"). Anything but a non-empty string is ignored. */
  markSeen(messageId: string): void;
  /** Change what this session's row says about how it is reached (fire and forget). */
  updateCapabilities(changes: Capabilities): void;
  /** A person just gave this session input: the loop guard's counts start again (fire and forget). */
  humanInput(): void;
  /** Set the inbound gate. */
  setInbound(policy: InboundPolicy): Promise<Result<{ policy: InboundPolicy; held: number }>>;
  /** The messages the gate holds, oldest first. */
  heldMessages(): Promise<Result<HeldAnswer>>;
  /** Deliver a held message (or every one with {all: true}). */
  releaseHeld(messageId?: string | null, options?: { all?: boolean }): Promise<Result<{ released: string[]; held: number }>>;
  /** Drop a held message (or every one with {all: true}); its sender is told. */
  dropHeld(messageId?: string | null, options?: { all?: boolean }): Promise<Result<{ dropped: string[]; held: number }>>;
  /** Pipelined send: many share frames. A live delivery resolves to {ok: true,
   * delivered: true, ...}; parameters are checked by the broker. */
  sendNowait(to: string, message: string, attachments?: Attachment[] | null): Promise<Result<SendAnswer>>;
  /** What waits for receive() now, and whether reading is paused for it. */
  inboxStatistics(): InboxStatistics;
  /** Publish lifecycle status: idle, thinking or tool:<name> (a noninteractive child may
   * also report completed, failed, interrupted or cancelled). */
  setStatus(status: string): Promise<Result>;
  /** Declare that this session can no longer answer asks (a finished child). */
  markTerminal(): Promise<Result>;
  /** Ask the session that launched this one and wait for its reply; one at a time. */
  contactSupervisor(options?: {
    message?: string | null;
    attachments?: Attachment[] | null;
    timeout?: number | null;
  }): Promise<Result<AskAnswer>>;
  /** Leave the bus now: peers see this session gone at once. */
  close(): Promise<void>;

  // respond / invoke (the agent's conversations)
  /** Post this agent's output to a channel: "current" (default), "last", "owner" or a
   * channel id of the same agent. `draft` always answers unknown_draft (no drafts here). */
  respond(options: {
    content?: string | null;
    draft?: string | null;
    channel?: string;
    attachments?: OutputAttachment[] | null;
    final?: boolean;
  }): Promise<Result<RespondAnswer>>;
  /** Acknowledge an `output` event: its sender gets output_acked. */
  ackOutput(outputId: string): Promise<Result<AckOutputAnswer>>;
  /** This agent's conversations; a control connection names the `agent`. */
  listSessions(agent?: string | null): Promise<Result<SessionsAnswer>>;
  /** Queue a turn in another existing persistent conversation of this agent. */
  invoke(options: { session: string; reason: string }): Promise<Result<InvokeAnswer>>;
  /** Report how the turn of invocation `id` (from an `invocation` event) ended. */
  finishInvocation(id: string, outcome?: { ok?: boolean; error?: string | null }): Promise<Result>;
  /** Forget this persistent conversation's response recovery record. */
  reset(): Promise<Result>;
  /** Delete this persistent conversation's record; the session goes on as ephemeral. */
  delete(): Promise<Result>;

  // workflow hosts
  /** Register a run this session hosts, and join `workflow:<runId>`. With `postMortem`
   * (or `lateRouter`) this session answers asks to the run's stages after it ends. */
  registerRun(
    runId: string,
    stages: StageSpec[],
    options?: { postMortem?: boolean | null; lateRouter?: boolean | null },
  ): Promise<Result<RegisteredRun>>;
  /** Host a run whose host is gone, with the `runGrant` its host was given. */
  takeOver(runId: string, grant: string): Promise<Result<TakenOverRun>>;
  /** Materialize more stages (nested under `parent`, a stage path). */
  addStages(runId: string, stages: StageSpec[], parent?: string | null): Promise<Result<RunAnswer>>;
  /** Report a stage's transition. */
  setStageState(runId: string, stage: string, state: StageState): Promise<Result>;
  /** No session can bind to the stage with its grant any more. */
  revokeStage(runId: string, stage: string): Promise<Result<{ runId: string; stage: string; revoked: true }>>;
  /** A grant for one child this session is about to launch. */
  grantChild(): Promise<Result<GrantAnswer>>;
  /** The root run terminated: settle and drop its sticky entries. */
  endRun(runId: string): Promise<Result>;
}

/** Client.connect failed; `code` says why. */
export declare class ConnectError extends Error {
  constructor(code: string, text: string);
  readonly name: "ConnectError";
  readonly code: string;
}

/** A refusal with a stable code; `message` is its text. */
export declare class BusError extends Error {
  constructor(code: string, fields?: Record<string, unknown>);
  readonly code: string;
  readonly fields: Record<string, unknown>;
  /** As every call answers it: {ok: false, code, error} (and `endpoint` for a redirect). */
  reply(): Failure;
}

// -- functions and tables --------------------------------------------------------------------

/** Endpoints to try in turn, from an array or text with commas; throws ConnectError
 * (invalid_endpoint) when it names none. */
export declare function endpointList(endpoint: string | readonly string[]): string[];
/** INTERCOM_ENDPOINT, else ipc://<INTERCOM_DATA_DIR or ~/.intercom>/broker.sock. */
export declare function defaultEndpoint(env?: Record<string, string | undefined>): string;
/** The text of error `code` with `fields` filled in (as the Python side fills it);
 * throws for a code not in ERRORS. */
export declare function errorText(code: string, fields?: Record<string, unknown>): string;
/** {ok: false, code, error}. */
export declare function errorReply(code: string, fields?: Record<string, unknown>): Failure;
/** JSON.stringify, with BigInt values written as plain integers. */
export declare function stringify(value: unknown): string;
/** JSON.parse, with integers past Number's safe range read as BigInt. */
export declare function parse(text: string): any;

/** The wire protocol's version. */
export declare const PROTOCOL_VERSION: number;
/** The bus's limits (characters, bytes, counts, seconds), generated from the Python package. */
export declare const LIMITS: Readonly<Record<string, number>>;
/** Error code -> its text template. */
export declare const ERRORS: Readonly<Record<string, string>>;
/** A JSON Schema, as handed to a model. */
export type JsonSchema = { readonly [keyword: string]: unknown };
/** The tools' parameter JSON Schemas, ready to hand to a model. */
export declare const TOOL_SCHEMAS: Readonly<{
  intercom: JsonSchema;
  respond: JsonSchema;
  invoke: JsonSchema;
  wait: JsonSchema;
  attachment: JsonSchema;
}>;
