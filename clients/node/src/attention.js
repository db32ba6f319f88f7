// A session's attention, as schemas/attention.py declares it: the capabilities its list
// row shows (how a message reaches the program or model behind it) and its inbound gate.

export const INBOUND_POLICIES = ["accept", "hold", "refuse"];
export const CAPABILITY_FLAGS = ["push", "hooks", "steer"];
const MAX_HOST_CHARS = 64;

/** The capabilities as the broker keeps them: the known flags as booleans and `host` as
 * trimmed text; anything else is dropped. */
export function cleanCapabilities(value) {
  const kept = {};
  if (value === null || typeof value !== "object") return kept;
  for (const flag of CAPABILITY_FLAGS) if (typeof value[flag] === "boolean") kept[flag] = value[flag];
  if (typeof value.host === "string" && value.host.trim()) kept.host = value.host.trim().slice(0, MAX_HOST_CHARS);
  return kept;
}
