// Error replies: a code from the shared table and its text, filled the way the Python
// side fills it (str.format with {name}, {name!r}, {name:g}, {name:.2f}), so a refusal
// made here reads exactly like one the broker or the Python client makes.

import { ERRORS, REDIRECTS } from "./schemas.js";

const FIELD = /\{(\w+)(![rs])?(?::([^{}]*))?\}/g;

/** A refusal with a stable code; `message` is its text. */
export class BusError extends Error {
  constructor(code, fields = {}) {
    super(errorText(code, fields));
    this.code = code;
    this.fields = fields;
  }

  reply() {
    const answer = { ok: false, code: this.code, error: this.message };
    if (REDIRECTS.has(this.code) && typeof this.fields.endpoint === "string") {
      answer.endpoint = this.fields.endpoint;
    }
    return answer;
  }
}

/** The text of `code` with `fields` filled in; a missing field leaves the template as
 * it is (as the Python side does). */
export function errorText(code, fields = {}) {
  const template = ERRORS[code];
  if (template === undefined) throw new Error(`unknown error code ${code}`);
  let missing = false;
  const text = template.replace(FIELD, (_, name, conversion, spec) => {
    if (!(name in fields)) {
      missing = true;
      return "";
    }
    const value = fields[name];
    if (conversion === "!r") return pyRepr(value);
    if (spec) return formatSpec(value, spec);
    return pyStr(value);
  });
  return missing ? template : text;
}

/** The JSON-ready failure every call returns. */
export function errorReply(code, fields = {}) {
  return { ok: false, code, error: errorText(code, fields) };
}

export function pyStr(value) {
  if (value === null || value === undefined) return "None";
  if (value === true) return "True";
  if (value === false) return "False";
  if (typeof value === "string") return value;
  if (typeof value === "number" || typeof value === "bigint") return String(value);
  return JSON.stringify(value);
}

// Python's str.isprintable(): false for the categories Cc, Cf, Cs, Co, Cn, Zl, Zp, Zs
// (the space excepted).
const UNPRINTABLE = /[\p{Cc}\p{Cf}\p{Cs}\p{Co}\p{Cn}\p{Zl}\p{Zp}\p{Zs}]/u;

/** Python's repr() of a string (and of None, booleans and numbers). */
export function pyRepr(value) {
  if (typeof value !== "string") return pyStr(value);
  const quote = value.includes("'") && !value.includes('"') ? '"' : "'";
  let out = quote;
  for (const ch of value) {
    if (ch === quote || ch === "\\") out += "\\" + ch;
    else if (ch === "\t") out += "\\t";
    else if (ch === "\n") out += "\\n";
    else if (ch === "\r") out += "\\r";
    else if (ch !== " " && UNPRINTABLE.test(ch)) {
      const code = ch.codePointAt(0);
      if (code < 0x100) out += "\\x" + code.toString(16).padStart(2, "0");
      else if (code < 0x10000) out += "\\u" + code.toString(16).padStart(4, "0");
      else out += "\\U" + code.toString(16).padStart(8, "0");
    } else out += ch;
  }
  return out + quote;
}

function formatSpec(value, spec) {
  if (typeof value !== "number") return pyStr(value);
  if (spec === "g") return formatG(value);
  const fixed = /^\.(\d+)f$/.exec(spec);
  if (fixed) return value.toFixed(Number(fixed[1]));
  return pyStr(value);
}

/** Python's format(x, "g"): six significant digits, trailing zeros dropped. */
export function formatG(x) {
  if (Number.isNaN(x)) return "nan";
  if (!Number.isFinite(x)) return x > 0 ? "inf" : "-inf";
  if (x === 0) return Object.is(x, -0) ? "-0" : "0";
  const [mantissa, exponentText] = x.toExponential(5).split("e");
  const exponent = Number(exponentText);
  const strip = (text) => (text.includes(".") ? text.replace(/0+$/, "").replace(/\.$/, "") : text);
  if (exponent >= -4 && exponent < 6) return strip(x.toFixed(5 - exponent));
  const sign = exponent < 0 ? "-" : "+";
  return `${strip(mantissa)}e${sign}${String(Math.abs(exponent)).padStart(2, "0")}`;
}
