// Client.connect: from what the caller gives (endpoints, identity, CURVE keys) to a
// connected Session, failing fast when no broker listens (client/connecting.py).
//
// Unlike the Python client, this one never starts a broker and reads no config file:
// pass `endpoint` (or set INTERCOM_ENDPOINT; default ipc://<INTERCOM_DATA_DIR or
// ~/.intercom>/broker.sock) and, if needed, `config` ({replyHint, maxPendingAsks,
// askTimeout, status, group, confirmSend}).

import { homedir } from "node:os";
import { join } from "node:path";
import { INBOUND_POLICIES } from "./attention.js";
import { GRACE_S, listeningFirst, problem } from "./reach.js";
import { LIMITS, SESSION_KINDS } from "./schemas.js";
import { ConnectError, Session } from "./session.js";

const KEEP_UNTIL = ["read", "seen"]; // Client.connect({keepUntil})
const CURVE_ENV = ["INTERCOM_CURVE_SERVER_KEY", "INTERCOM_CURVE_PUBLIC_KEY", "INTERCOM_CURVE_SECRET_KEY"];

/** Endpoints to try in turn: an array, or text with commas (INTERCOM_ENDPOINT). */
export function endpointList(endpoint) {
  const parts = typeof endpoint === "string" ? endpoint.split(",") : [...endpoint];
  const endpoints = parts.map((part) => (typeof part === "string" ? part.trim() : part)).filter(Boolean);
  if (!endpoints.length) throw new ConnectError("invalid_endpoint", "endpoint names no broker");
  return endpoints;
}

export function defaultEndpoint(env = process.env) {
  const dataDir = env.INTERCOM_DATA_DIR || join(homedir(), ".intercom");
  return env.INTERCOM_ENDPOINT || `ipc://${join(dataDir, "broker.sock")}`;
}

/** The CURVE keys to use (z85 text), or null for none; throws when only some are given. */
function curveKeys(serverKey, publicKey, secretKey, env = process.env) {
  const values = [serverKey, publicKey, secretKey].map((v, i) => v || env[CURVE_ENV[i]] || null);
  if (!values.some(Boolean)) return null;
  if (!values.every(Boolean)) {
    const missing = CURVE_ENV.filter((_, i) => !values[i]);
    throw new TypeError(`CURVE needs the broker's public key and this client's key pair; missing ${missing.join(", ")}`);
  }
  return { serverKey: values[0], publicKey: values[1], secretKey: values[2] };
}

/** What a session says its working directory is (null when there is none to say). */
function workingDirectory(cwd) {
  let dir = cwd;
  if (dir === undefined || dir === null) {
    try {
      dir = process.cwd();
    } catch {
      return null; // the directory was removed under the process
    }
  }
  return [...dir].length <= LIMITS.MAX_CWD_CHARS ? dir : null;
}

export class Client {
  /** Open a session and wait for the broker's welcome. Options: name (required),
   * endpoint (one, an array, or comma-separated text: brokers sharing one database,
   * tried in turn), group, agent, atomicSessionId, kind (interactive, noninteractive,
   * stage, control), parent (an id or a Session), sessionId, stage, transcript, grant,
   * identity (an intercom_session_identity history entry: take that id back),
   * history (a function given each history entry), curveServerKey, curvePublicKey,
   * curveSecretKey (z85; or INTERCOM_CURVE_*), timeout (seconds, default 10),
   * inboxLimitBytes, channel, persistent, cwd, notifyUndeliverable, config, confirm,
   * keepUntil ("read", the default: the broker may forget a live message sent to this
   * session once this client has it; "seen": once the program took it, with receive()
   * or, for "seen", an explicit markSeen(); until then it is sent again when the session
   * comes back after a blip, a failover or a restart with the same identity),
   * capabilities ({push, hooks, steer, host}: how a message reaches the program behind
   * this session, shown in list rows; host defaults to "node"), inbound (the gate for
   * messages from other sessions: "accept", "hold" or "refuse"), guard (the flood and
   * loop guard on this session's sends: true for the defaults, or {perMinute, exchanges,
   * pauseS}, 0 turning one bound off; off unless given: see PROTOCOL.md, The guard).
   * Throws ConnectError (`code`: no_broker, invalid_endpoint, broker_unavailable,
   * auth_failed, grant_required, invalid_grant, ...) and TypeError for a bad kind or
   * keepUntil, or incomplete CURVE keys. */
  static async connect(options = {}) {
    const { name, endpoint = null, kind = "interactive", timeout = LIMITS.CALL_TIMEOUT_S, identity = null,
      curveServerKey = null, curvePublicKey = null, curveSecretKey = null, cwd = null, keepUntil = "read" } = options;
    if (!KEEP_UNTIL.includes(keepUntil)) throw new TypeError("keepUntil must be 'read' or 'seen'");
    if (options.inbound != null && !INBOUND_POLICIES.includes(options.inbound)) {
      throw new TypeError(`inbound must be one of ${INBOUND_POLICIES.join(", ")}`);
    }
    if (!SESSION_KINDS.includes(kind)) throw new TypeError(`kind must be one of ${SESSION_KINDS.join(", ")}`);
    let { parent = null, sessionId = null, atomicSessionId = null } = options;
    if (parent instanceof Session) parent = parent.id;
    let token = null;
    if (identity !== null) {
      sessionId = identity.sessionId || sessionId;
      token = identity.reclaimSecret ?? null;
      atomicSessionId = atomicSessionId || identity.atomicSessionId || null;
    }
    const curve = curveKeys(curveServerKey, curvePublicKey, curveSecretKey);
    let endpoints = endpointList(endpoint ?? defaultEndpoint());
    for (const one of endpoints) {
      const unusable = problem(one);
      if (unusable !== null) throw new ConnectError(...unusable);
    }
    try {
      endpoints = await listeningFirst(endpoints, Math.min(GRACE_S, timeout));
    } catch (refusal) {
      if (Array.isArray(refusal)) throw new ConnectError(...refusal);
      throw refusal;
    }
    const session = new Session({ ...options, endpoints, kind, parent, sessionId, token, atomicSessionId, curve,
      cwd: workingDirectory(cwd), keepUntil });
    await session.waitWelcome(timeout);
    return session;
  }
}
