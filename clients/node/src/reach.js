// Before waiting for a welcome: can this endpoint work at all, and is anyone there?
// (client/reach.py, schemas/endpoints.py). An endpoint that cannot be parsed is
// invalid_endpoint at once; an ipc path with no socket file, a socket nobody accepts
// on, or a TCP port that refuses is retried for a short grace and then no_broker, in
// about a second instead of after the connect timeout. Anything else leaves the wait
// to the welcome.

import net from "node:net";
import { errorText, pyRepr } from "./errors.js";

export const GRACE_S = 1.0;
const PROBE_EVERY_MS = 20;
const TCP = /^tcp:\/\/(\[[0-9a-fA-F:.]+\]|[^:/[\]\s]+):(\d{1,5}|\*)$/;
const NOT_AN_ENDPOINT = "not an endpoint (expected ipc://PATH or tcp://HOST:PORT)";

/** Why `endpoint` cannot be used by a client, or null. */
export function endpointProblem(endpoint) {
  if (typeof endpoint !== "string" || !endpoint) return NOT_AN_ENDPOINT;
  const sep = endpoint.indexOf("://");
  const scheme = sep < 0 ? endpoint : endpoint.slice(0, sep);
  const where = sep < 0 ? "" : endpoint.slice(sep + 3);
  if (sep >= 0 && (scheme === "ipc" || scheme === "inproc")) {
    // eslint-disable-next-line no-control-regex
    return where && !/[\x00-\x1f]/.test(where) ? null : "no usable path after ipc://";
  }
  const match = scheme === "tcp" ? TCP.exec(endpoint) : null;
  if (match === null) return NOT_AN_ENDPOINT;
  if (match[2] === "*") return "a client needs the port number, not '*'";
  const port = Number(match[2]);
  if (port < 1 || port > 65535) return `port ${port} is not between 1 and 65535`;
  return null;
}

/** [code, text] when `endpoint` can never reach a broker, else null. */
export function problem(endpoint) {
  const why = endpointProblem(endpoint);
  return why === null ? null : ["invalid_endpoint", `${pyRepr(endpoint)}: ${why}`];
}

function probe(endpoint, timeoutMs) {
  const sep = endpoint.indexOf("://");
  const scheme = endpoint.slice(0, sep);
  const where = endpoint.slice(sep + 3);
  let options;
  if (scheme === "ipc") options = { path: where };
  else if (scheme === "tcp") {
    const at = where.lastIndexOf(":");
    options = { host: where.slice(0, at).replace(/^\[|\]$/g, ""), port: Number(where.slice(at + 1)) };
  } else return Promise.resolve(null);
  return new Promise((resolve) => {
    const socket = net.connect(options);
    const done = (why) => {
      socket.destroy();
      resolve(why);
    };
    socket.setTimeout(timeoutMs, () => done(null));
    socket.once("connect", () => done(null));
    socket.once("error", (err) => {
      if (err.code === "ENOENT") done(`no socket file ${where}`);
      else if (err.code === "ECONNREFUSED") done("connection refused");
      else done(null); // unresolvable, unreachable: let ZeroMQ try
    });
  });
}

/** Why nothing can be listening at `endpoint`, after probing it for up to `graceS`;
 * null once something accepts, or when a probe cannot tell. */
export async function nobodyListens(endpoint, graceS = GRACE_S) {
  const deadline = performance.now() + graceS * 1000;
  for (;;) {
    const why = await probe(endpoint, Math.max(50, deadline - performance.now()));
    if (why === null || performance.now() >= deadline) return why;
    await new Promise((resolve) => setTimeout(resolve, PROBE_EVERY_MS)); // polling for the socket to appear
  }
}

/** `endpoints` turned to start with the first one where a broker listens; throws
 * [code, text] (no_broker) when none does. */
export async function listeningFirst(endpoints, graceS) {
  let nobody = null;
  for (let index = 0; index < endpoints.length; index++) {
    nobody = await nobodyListens(endpoints[index], graceS);
    if (nobody === null) return [...endpoints.slice(index), ...endpoints.slice(0, index)];
  }
  throw ["no_broker", errorText("no_broker", { endpoint: endpoints.join(","), detail: nobody })];
}
