// Tool parameters checked against the shared JSON Schemas (schemas.json) with the small
// subset of JSON Schema they use, worded as schemas/tools.py words it: a bad call gets
// the same answer from this client as from the Python one, without a round trip.

import { pyRepr } from "./errors.js";
import { LIMITS, TOOL_SCHEMAS } from "./schemas.js";

const isObject = (v) =>
  v !== null && typeof v === "object" && !Array.isArray(v) &&
  (Object.getPrototypeOf(v) === Object.prototype || Object.getPrototypeOf(v) === null);
const isNumber = (v) => (typeof v === "number") || typeof v === "bigint";

const TYPES = {
  object: isObject,
  array: Array.isArray,
  string: (v) => typeof v === "string",
  boolean: (v) => typeof v === "boolean",
  number: isNumber,
  integer: (v) => typeof v === "bigint" || Number.isInteger(v),
};

/** Length in code points, as Python counts a str (cheap when it cannot matter). */
export function charCount(text, bound = Infinity) {
  if (text.length <= bound) return text.length <= 1 ? text.length : [...text].length;
  return [...text].length;
}

function exceeds(text, max) {
  return text.length > max && [...text].length > max;
}

/** The first way `value` breaks `schema`, as a sentence, or null. */
export function validate(schema, value, where = "") {
  const label = where || "parameters";
  const expected = schema.type;
  if (expected && !TYPES[expected](value)) return `${label} must be of type ${expected}`;
  if (schema.enum && !schema.enum.includes(value)) {
    return `${label} must be one of ${schema.enum.map(pyRepr).join(", ")}`;
  }
  if (typeof value === "string") {
    if ((schema.minLength ?? 0) > 0 && value.length === 0) return `${label} must not be empty`;
    if (schema.maxLength !== undefined && exceeds(value, schema.maxLength)) {
      return `${label} exceeds ${schema.maxLength} characters`;
    }
  }
  if (isNumber(value)) {
    if (schema.exclusiveMinimum !== undefined && !(value > schema.exclusiveMinimum)) {
      return `${label} must be greater than ${schema.exclusiveMinimum}`;
    }
    if (schema.minimum !== undefined && value < schema.minimum) {
      return `${label} must be at least ${schema.minimum}`;
    }
    if (schema.maximum !== undefined && value > schema.maximum) {
      return `${label} must be at most ${schema.maximum}`;
    }
  }
  if (Array.isArray(value)) {
    if (schema.maxItems !== undefined && value.length > schema.maxItems) {
      return `${label} has more than ${schema.maxItems} items`;
    }
    if (schema.items) {
      for (let index = 0; index < value.length; index++) {
        const problem = validate(schema.items, value[index], `${label}[${index}]`);
        if (problem) return problem;
      }
    }
  }
  if (isObject(value)) return validateObject(schema, value, where);
  return null;
}

function validateObject(schema, value, where) {
  const props = schema.properties ?? {};
  const prefix = where ? `${where}.` : "";
  const keys = Object.keys(value).filter((key) => value[key] !== undefined);
  if (schema.additionalProperties === false) {
    for (const key of keys) {
      if (!(key in props)) return `unknown parameter ${prefix}${pyRepr(key)}`;
    }
  }
  for (const key of schema.required ?? []) {
    if (!keys.includes(key)) return `missing required parameter ${prefix}${pyRepr(key)}`;
  }
  if (schema.oneOf) {
    const matches = schema.oneOf.filter((alt) => (alt.required ?? []).every((k) => keys.includes(k)));
    if (matches.length !== 1) {
      return `supply exactly one of ${schema.oneOf.map((alt) => pyRepr(alt.required[0])).join(" or ")}`;
    }
  }
  for (const [key, sub] of Object.entries(props)) {
    if (value[key] !== undefined) {
      const problem = validate(sub, value[key], `${prefix}${key}`);
      if (problem) return problem;
    }
  }
  return null;
}

/** [code, fields] for the first problem of intercom parameters, or null (as
 * schemas.tools.intercom_params_problem). */
export function intercomParamsProblem(params) {
  const message = params?.message;
  if (typeof message === "string" && exceeds(message, LIMITS.MAX_MESSAGE_CHARS)) {
    return ["message_too_large", { size: [...message].length, limit: LIMITS.MAX_MESSAGE_CHARS }];
  }
  const attachments = params?.attachments;
  if (Array.isArray(attachments)) {
    const checked = attachments.slice(0, LIMITS.MAX_ATTACHMENTS);
    for (let index = 0; index < checked.length; index++) {
      const problem = validate(TOOL_SCHEMAS.attachment, checked[index], "attachment");
      if (problem) return ["invalid_attachment", { index, detail: problem }];
    }
  }
  const problem = validate(TOOL_SCHEMAS.intercom, params);
  return problem ? ["invalid_params", { detail: problem }] : null;
}
