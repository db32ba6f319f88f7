// What the bus promises, read from schemas.json: generated from the Python package
// `schemas` (python -m schemas.bundle clients/node/src/schemas.json), never retyped here.

import { readFileSync } from "node:fs";

const bundle = JSON.parse(readFileSync(new URL("./schemas.json", import.meta.url), "utf8"));

export const PROTOCOL_VERSION = bundle.protocolVersion;
export const LIMITS = Object.freeze(bundle.limits);
export const ERRORS = Object.freeze(bundle.errors);
export const REDIRECTS = new Set(bundle.redirects);
export const GROUPS = Object.freeze(bundle.groups);
export const SESSION_KINDS = Object.freeze(bundle.sessionKinds);
export const TOOL_SCHEMAS = Object.freeze(bundle.tools);
