// Session history: what a runtime records so a reopened session knows who it was
// (client/history.py). Entries are JSON-ready objects with a `type`:
// intercom_session_identity (sessionId, reclaimSecret: keep it private, name,
// atomicSessionId, brokerId; pass it back as Client.connect({identity})),
// intercom_sent, intercom_received and respond. A sink that throws loses that entry,
// never the call.

export const IDENTITY = "intercom_session_identity";
export const SENT = "intercom_sent";
export const RECEIVED = "intercom_received";
export const RESPONDED = "respond";

export class History {
  constructor(sink = null) {
    this.sink = sink;
  }

  get enabled() {
    return this.sink !== null;
  }

  record(type, fields) {
    if (this.sink === null) return;
    const entry = { type, ...fields };
    if (entry.at === undefined) entry.at = Date.now() / 1000;
    try {
      this.sink(entry);
    } catch (exc) {
      process.emitWarning(`intercom: history sink failed for a ${type} entry: ${exc}`);
    }
  }
}
