// How an inbound message reads to the agent: text, attachments, and a reply hint.
// The same text as client/render.py makes, character for character.

import { pyStr } from "./errors.js";

// The last stamp made: a burst of messages shares its second, and formatting the date
// is most of what rendering a plain body costs.
let lastSecond = null;
let lastStamp = "";

function stamp(sentAt) {
  if (typeof sentAt === "bigint") sentAt = Number(sentAt);
  if (typeof sentAt !== "number" || !Number.isFinite(sentAt)) return "unknown time";
  // Python renders the whole second, except a fraction this close to the next second,
  // which rounds up into it (whole microseconds).
  let second = Math.floor(sentAt);
  if (sentAt - second >= 0.999999) second = Math.floor(Math.round(sentAt * 1e6) / 1e6);
  if (second === lastSecond) return lastStamp;
  const date = new Date(second * 1000);
  if (Number.isNaN(date.getTime())) return "unknown time";
  const iso = date.toISOString(); // YYYY-MM-DDTHH:MM:SS.sssZ
  if (iso.length !== 24) return "unknown time";
  lastSecond = second;
  lastStamp = `${iso.slice(0, 10)} ${iso.slice(11, 19)} UTC`;
  return lastStamp;
}

/** Attachments in order, duplicates kept, each fenced with its name. */
export function renderAttachments(attachments) {
  return attachments
    .map((item) => `[${pyStr(item.type)}: ${pyStr(item.name)}]\n\`\`\`${item.language || ""}\n${pyStr(item.content)}\n\`\`\``)
    .join("\n\n");
}

// A message whose sender nobody can message (`replyable: false`: the command line or
// another control connection) says so instead of the reply hint, whatever the setting:
// the hint would propose a send that fails with target_not_found. An ask from one keeps
// its hint (its reply reaches the asker while it waits). As client/render.py.
export const UNANSWERABLE = "\n\nIts sender cannot be answered: it came from a command line or tool " +
  "that nobody can send to, so a send or reply to it fails.";

/** The agent-visible body of an inbound message. */
export function renderBody(msg, replyHint = true) {
  const from = pyStr(msg.from);
  const message = msg.message === undefined ? "" : pyStr(msg.message);
  const attachments = msg.attachments;
  const hasAttachments = Array.isArray(attachments) ? attachments.length > 0 : Boolean(attachments);
  let header = `Message from ${pyStr(msg.fromName)} (${from})`;
  if (msg.receivedBeforeStart) header = `Messages received before you started\n${header}`;
  let text = `${header}\nSent: ${stamp(msg.sentAt)}\n\n${message}`;
  if (hasAttachments) text += `\n\n${renderAttachments(attachments)}`;
  if (msg.replyable === false && !msg.expectsReply) {
    text += UNANSWERABLE;
  } else if (replyHint) {
    if (msg.expectsReply) {
      text += `\n\nThey are waiting for your answer: intercom({action: "reply", replyTo: "${pyStr(msg.id)}", message: "..."})`;
    } else if (!msg.replyTo) {
      text += `\n\nTo answer: intercom({action: "send", to: "${from}", message: "..."})`;
    }
  }
  return text;
}
