// The Intercom bus client for Node.js: Client.connect({...}) returns a Session whose
// intercom(), respond(), invoke() and host methods take the tool parameters and
// resolve to JSON-ready results, as the Python client's do.

import { Client, defaultEndpoint, endpointList } from "./client.js";
import { ConversationMethods } from "./conversation.js";
import { BusError, errorReply, errorText } from "./errors.js";
import { HostingMethods } from "./hosting.js";
import { parse, stringify } from "./json.js";
import { ERRORS, LIMITS, PROTOCOL_VERSION, TOOL_SCHEMAS } from "./schemas.js";
import { ConnectError, Session } from "./session.js";

Object.assign(Session.prototype, HostingMethods, ConversationMethods);

export {
  BusError, Client, ConnectError, ERRORS, LIMITS, PROTOCOL_VERSION, Session, TOOL_SCHEMAS,
  defaultEndpoint, endpointList, errorReply, errorText, parse, stringify,
};
