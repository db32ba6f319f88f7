"""Every error the bus can report: a stable code and its text, defined once.

Codes are grouped by class the way a caller reacts to them (:data:`CLASSES`).

Each code also says whether sending the request again may help (``retry``, one of
:data:`RETRY_RULES`): most refusals stand until the request or the setup changes; a
few depend on state that changes by itself (a backlog drains, a queue empties, a lock
goes), and a few send the client elsewhere. Codes in :data:`LOCAL` are a client's
own answers to its caller: no broker sends them.

Texts are ``str.format`` templates; :func:`error_text` fills them. The broker and the
client both build error replies through :func:`error_reply`, so a code always carries
the same text wherever it is raised.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


CLASSES = {
    "protocol": "the frame or envelope itself is wrong (a client bug or a hostile peer)",
    "request": "the tool parameters are wrong; fix the call",
    "target": "the target cannot be resolved or may not be reached",
    "authority": "the caller holds no grant (or a wrong one) for what it asked",
    "state": "the call is well-formed but the bus refuses it in its current state",
    "peer": "the other side went away or never answered",
}

# Whether the same request, sent again, may succeed.
NO = "no"                # refused the same way until the request or the setup changes
LATER = "later"          # the state behind it changes by itself: again later, under a new id
REDIRECT = "redirect"    # hello again at the ``endpoint`` the answer names
HELLO = "hello"          # the broker does not know this connection: hello, then resend
RETRY_RULES = {
    NO: "no: the same request is refused the same way; change the request or the setup",
    LATER: "later: what refused it changes by itself; send it again later, under a new "
           "message id (a resent id only gets its first answer again)",
    REDIRECT: "elsewhere: say hello again at the `endpoint` the answer names (with its "
              "`serverKey` under CURVE)",
    HELLO: "after a hello: say hello again on this connection, then resend what is owed",
}


@dataclass(frozen=True)
class ErrorSpec:
    code: str
    kind: str
    text: str
    retry: str = NO


_TABLE = [
    # -- protocol ------------------------------------------------------------------
    ErrorSpec("malformed_frame", "protocol", "Frame is not a valid msgpack envelope"),
    ErrorSpec("frame_too_large", "protocol", "Frame of {size} bytes exceeds the limit of {limit} bytes"),
    ErrorSpec("bad_envelope", "protocol", "Invalid envelope: {detail}"),
    ErrorSpec("unknown_kind", "protocol", "Unknown message kind {kind!r}"),
    ErrorSpec("unsupported_version", "protocol", "Protocol version {version!r} is not supported (broker speaks {supported})"),
    ErrorSpec("not_connected", "protocol", "This connection has no session; send hello first", HELLO),
    ErrorSpec("already_connected", "protocol", "This connection already has a session"),
    ErrorSpec("stale_hello", "protocol", "Hello attempt {attempt} for session {session_id!r} "
              "is older than one the same client made since: the client holds its id "
              "elsewhere, and nothing was opened here"),
    ErrorSpec("batch_too_large", "protocol", "Batch of {size} envelopes exceeds the limit of {limit}"),
    # -- request -------------------------------------------------------------------
    ErrorSpec("invalid_params", "request", "{detail}"),
    ErrorSpec("invalid_endpoint", "request", "{detail}"),
    ErrorSpec("request_too_large", "request", "Request of {size} bytes exceeds the broker's limit of {limit} bytes; send less text or fewer attachments"),
    ErrorSpec("unknown_action", "request", "Unknown action {action!r}"),
    ErrorSpec("unknown_tool", "request", "Unknown tool {tool!r}; this server offers {tools}"),
    ErrorSpec("missing_param", "request", "Action {action!r} requires {param!r}"),
    ErrorSpec("invalid_attachment", "request", "Attachment {index}: {detail}"),
    ErrorSpec("message_too_large", "request", "Message of {size} characters exceeds the limit of {limit}"),
    ErrorSpec("invalid_group", "request", "Group name must be a non-empty string of at most {limit} characters, with no control characters"),
    ErrorSpec("reserved_group", "request", "Group name {group!r} is reserved for subagent auto-groups"),
    ErrorSpec("invalid_name", "request", "Session name must be a non-empty string of at most {limit} characters, with no control characters"),
    ErrorSpec("invalid_status", "request", "Status must be 'idle', 'thinking' or 'tool:<name>' "
              "(a noninteractive child may also report completed, failed, interrupted or cancelled)"),
    ErrorSpec("message_id_conflict", "request", "Message id {id!r} was already used for a different message"),
    ErrorSpec("invalid_channel", "request", "{channel!r} is not a channel id: expected "
              "<platform>:<id> with platform discord, remote or internal, at most {limit} characters"),
    ErrorSpec("invalid_agent", "request", "Agent name {agent!r} is not safe: 1-{limit} characters "
              "of A-Z a-z 0-9 . _ -, not starting with '.'"),
    ErrorSpec("invoke_alias", "request", "invoke needs an explicit session id from list_sessions, "
              "not the alias {session!r}"),
    # -- target --------------------------------------------------------------------
    ErrorSpec("target_not_found", "target", "No session you can see matches {to!r}; use intercom list to find targets", LATER),
    ErrorSpec("control_other_broker", "target", "{name!r} is held by broker {broker}, and a "
              "control connection reaches only the sessions of the broker it is connected to: "
              "connect to that broker's endpoint"),
    ErrorSpec("ambiguous_target", "target", "{to!r} matches several sessions ({candidates}); use the full session id"),
    ErrorSpec("invalid_target", "target", "{to!r} is neither a full session id, an exact name, nor a unique 8-hex id prefix"),
    ErrorSpec("self_target", "target", "Cannot message the current session"),
    ErrorSpec("different_group", "target", "Target session is in a different intercom group"),
    ErrorSpec("workflow_different_group", "target", "Target workflow run is in a different intercom group{hint}"),
    ErrorSpec("non_agent_target", "target", "{to!r} is a non-agent workflow node (prompt or tool) and cannot receive messages"),
    ErrorSpec("ambiguous_stage", "target", "{to!r} matches several live stages ({candidates}); ask by the exact stage path from intercom list"),
    ErrorSpec("invalid_path", "target", "{to!r} is not a valid workflow path: {detail}"),
    ErrorSpec("not_supervisor", "target", "This session has no supervisor to contact"),
    ErrorSpec("not_output_channel", "authority", "Only the session of channel {channel!r} "
              "acknowledges the outputs sent to it"),
    ErrorSpec("unknown_output", "target", "No output {output_id!r} is known here: it was never sent, "
              "or it is too old (the broker remembers the latest outputs only)"),
    ErrorSpec("channel_not_found", "target", "No session {channel!r} exists for agent {agent!r}; "
              "use list_sessions to find its sessions"),
    ErrorSpec("owner_not_configured", "target", "Agent {agent!r} has no owner: set ownerId in "
              "agents/{agent}/config/agent.toml in the broker's data directory"),
    ErrorSpec("remote_channel_refused", "target", "A remote session may respond only to 'current' "
              "or a remote: session of its agent, not {channel!r}"),
    ErrorSpec("attachments_unsupported", "target", "Channel {channel!r} does not support "
              "attachments (only discord: channels do); send the text without them"),
    ErrorSpec("invoke_self", "target", "Cannot invoke the current session"),
    ErrorSpec("invoke_ephemeral", "target", "Session {session!r} is ephemeral: only persistent "
              "sessions can be invoked"),
    ErrorSpec("invoke_remote_target", "target", "Session {session!r} is remote: remote sessions "
              "cannot be invoked"),
    ErrorSpec("invoke_cross_agent", "target", "Session {session!r} belongs to another agent: "
              "invoke reaches only this agent's sessions"),
    # -- authority -----------------------------------------------------------------
    ErrorSpec("grant_required", "authority", "A grant is required to {what}: the session that "
              "launches this one receives it (register_run's grants, grant_child) and passes it on"),
    ErrorSpec("invalid_grant", "authority", "The grant does not allow this session to {what} "
              "(another stage, run or launcher, or revoked)"),
    ErrorSpec("grant_used", "authority", "This child grant has admitted its child already: a "
              "grant admits one child; the launcher asks for one per child (grant_child)"),
    ErrorSpec("grant_expired", "authority", "This child grant has expired (a grant admits its "
              "child within {seconds:g} s of issue): the launcher asks for a new one (grant_child)"),
    ErrorSpec("non_agent_launcher", "authority", "This session is the connection of a non-agent "
              "workflow node ({stage}): it cannot launch or supervise a child, so it gets no "
              "child grant"),
    ErrorSpec("auth_failed", "authority", "The broker refused this client's handshake: {detail}"),
    ErrorSpec("no_agent", "authority", "This session belongs to no agent; connect with agent=... "
              "to use {what}"),
    ErrorSpec("control_read_only", "authority", "A control connection may read (list, "
              "groups, status, sessions) and send or ask as itself; {what} needs a session: "
              "connect without sessionKind \"control\""),
    ErrorSpec("act_for_needed", "authority", "{action!r} on a control connection is made for a "
              "live session it acts for: name it in the hello (actFor, actForToken: the id and "
              "reclaim secret of its intercom_session_identity entry; the CLI's --identity)"),
    ErrorSpec("act_for_refused", "authority", "No live session on this broker has id {id!r} "
              "with that reclaim secret: a control connection acts only for a live session "
              "held by the broker it is connected to"),
    ErrorSpec("operator_only", "authority", "{what} is for the broker's operator: a control "
              "connection over ipc or loopback on the broker's host, or one with the broker's "
              "own CURVE key"),
    ErrorSpec("control_only", "authority", "{what} is for control connections only (connect "
              "with sessionKind \"control\")"),
    ErrorSpec("invoke_remote_caller", "authority", "A remote session cannot invoke other sessions"),
    ErrorSpec("invoke_disabled", "authority", "invoke is not enabled for agent {agent!r}: set "
              "invoke = true in agents/{agent}/config/tools.toml in the broker's data directory"),
    # -- state ---------------------------------------------------------------------
    ErrorSpec("not_member", "state", "This session is not a member of group {group!r}"),
    ErrorSpec("last_group", "state", "Cannot leave {group!r}: it is this session's only group; use leave without a group to reset"),
    ErrorSpec("queue_full", "state", "Pending stage message queue is full (limit {limit})", LATER),
    ErrorSpec("channel_in_use", "state", "Agent {agent!r} already has a live session on "
              "channel {channel!r}; close it first or connect with another channel", LATER),
    ErrorSpec("not_persistent", "state", "This session is ephemeral (or was deleted): only a "
              "persistent session can be reset or deleted"),
    ErrorSpec("too_many_invocations", "state", "Session {session!r} already has {limit} queued "
              "invocations, its limit; wait for it to take some", LATER),
    ErrorSpec("unknown_invocation", "state", "No invocation {id!r} was handed to this session "
              "and is still running"),
    ErrorSpec("pending_stage_ask_unsupported", "state",
              "{to!r} is not a live stage: ask needs a running, reply-capable target; use send, "
              "which queues for the stage because it may start much later or never"),
    ErrorSpec("terminal_child", "state", "Target noninteractive child is terminal and cannot reply"),
    ErrorSpec("supervisor_busy", "state", "Already waiting for a supervisor reply", LATER),
    ErrorSpec("too_many_asks", "state", "Too many pending asks (limit {limit}); wait for one to finish", LATER),
    # The flood and loop guard of a session that turned it on (broker.core.sessions.guard).
    ErrorSpec("flood_guard", "state", "More than {limit} messages a minute to {name}, this "
              "session's flood guard; nothing was sent: try again in {retry_after_s:.1f} s "
              "(retryAfterS). The guard is set when the session connects (guard perMinute; "
              "the MCP server's --guard-per-minute, --no-guard)", LATER),
    ErrorSpec("loop_guard", "state", "{turns} back-and-forth exchanges with {name} with no "
              "other input, this session's loop guard (limit {limit}); nothing was sent: "
              "{reset}. The guard is set when the session connects (guard exchanges, pauseS; "
              "the MCP server's --guard-exchanges, --guard-pause-s, --no-guard)", LATER),
    ErrorSpec("ask_cycle", "state", "{name} ({id}) already waits on you ({chain}): this ask "
              "would close a wait cycle, each waiting on the other until the timeout; reply "
              "first, or send instead"),
    ErrorSpec("no_pending_ask", "state", "No unresolved inbound ask to reply to"),
    ErrorSpec("reply_ambiguous", "state", "Several asks are pending ({count}); pass to or replyTo (see intercom pending)"),
    ErrorSpec("unknown_message", "state", "No receipt of message {message_id!r} is kept for "
              "you: it is not one you sent, or it is older than the receipts a broker keeps"),
    ErrorSpec("inbound_refused", "target", "{name} ({id}) refuses messages from other sessions "
              "(its inbound policy is refuse, set by its person); nothing was sent"),
    ErrorSpec("unknown_held", "state", "No message {message_id!r} is held for this session "
              "(see held: it was released, dropped or expired, or never held)"),
    ErrorSpec("held_dropped", "peer", "{name} held your ask for its person, who dropped it: "
              "it was never delivered and will not be answered"),
    ErrorSpec("unknown_thread", "state", "No unresolved inbound ask or current message matches replyTo {reply_to!r}"),
    ErrorSpec("thread_sender_mismatch", "state", "replyTo {reply_to!r} was not sent by {to!r}"),
    ErrorSpec("stale_turn", "state", "The message of this turn ({id!r}) can no longer be answered: "
              "its sender left or its ask ended; see intercom pending and pass replyTo or to"),
    ErrorSpec("confirmation_declined", "state", "Send was not confirmed"),
    ErrorSpec("unknown_run", "state", "No workflow run {run_id!r} is registered"),
    ErrorSpec("not_run_host", "state", "Only the session that registered run {run_id!r} may change it{detail}"),
    ErrorSpec("run_has_host", "state", "Run {run_id!r} has a live host (session {host}): only "
              "it ends the run"),
    ErrorSpec("invalid_transition", "state", "Stage {stage!r} cannot go from {old} to {new}"),
    ErrorSpec("stage_not_deliverable", "state", "{to!r} is a stage with group \"default\": it is "
              "not workflow-owned and cannot receive Intercom messages before it starts; send "
              "to it once it is running", LATER),
    # Resource limits (broker flags --max-*; see the limits table in docs/operations.md).
    ErrorSpec("too_many_sessions", "state", "The broker holds {count} sessions{scope}, its limit "
              "(--{flag} {limit}); close a session or ask the operator to raise the limit", LATER),
    ErrorSpec("session_rate_limited", "state", "Sessions from this {scope} are opened faster "
              "than the broker allows ({limit} a second after a burst of {burst}, "
              "--max-new-sessions-per-second); try again in {wait_s:.2f} s", LATER),
    ErrorSpec("too_many_groups", "state", "A session may belong to at most {limit} groups "
              "(--max-groups); leave one first"),
    ErrorSpec("too_many_runs", "state", "This session already hosts {limit} workflow runs "
              "(--max-runs-per-session); end one first"),
    ErrorSpec("run_full", "state", "Workflow run {run_id!r} already keeps {what} of queued "
              "messages, its limit (--{flag} {limit}); wait for stages to start or end the run", LATER),
    ErrorSpec("sticky_storage_full", "state", "The broker already keeps {size} bytes of queued "
              "stage messages, its limit (--max-sticky-bytes {limit}); nothing was queued", LATER),
    ErrorSpec("too_many_conversations", "state", "Agent {agent!r} already has {limit} "
              "conversations (--max-conversations); delete one, or resume an existing one"),
    ErrorSpec("target_backlogged", "state", "{name} is not reading its messages: {size} bytes "
              "sent to it are unread (limit {limit}); nothing was delivered, try again later", LATER),
    ErrorSpec("stage_closed", "state", "{to!r} is a stage of a run that ended and cannot answer "
              "asks (reply: unavailable): contact a live stage, or start new work with the "
              "context it needs"),
    ErrorSpec("run_taken_over", "state", "Workflow run {run_id!r} was taken over by {name} "
              "({id}); its subagents answer through that session now"),
    ErrorSpec("run_elsewhere", "state", "Workflow run {run_id!r} is held by the broker at "
              "{endpoint}; connect there (the client does so by itself)", REDIRECT),
    ErrorSpec("run_moving", "state", "Workflow run {run_id!r} is changing brokers (its broker "
              "stopped, lost its lease or was taken over); nothing was queued: try again "
              "in a moment", REDIRECT),
    ErrorSpec("run_dormant", "state", "Workflow run {run_id!r} is dormant; asks are refused until it resumes", LATER),
    # respond's drafts (checked by the client; see client.drafts)
    ErrorSpec("unknown_draft", "state", "No draft {draft!r} was recorded in this conversation; "
              "send the text with content instead"),
    ErrorSpec("draft_expired", "state", "Draft {draft!r} belongs to an earlier turn: a draft can "
              "be sent by reference only during the turn that recorded it; send content instead"),
    ErrorSpec("draft_not_current", "state", "A draft can be sent by reference only with channel "
              "\"current\" (not 'last', not a channel id, not even this conversation's own); "
              "send content to reach another channel"),
    ErrorSpec("draft_already_sent", "state", "Draft {draft!r} was already sent by reference in "
              "this turn: it is no longer an undelivered draft; send new content to say more"),
    ErrorSpec("draft_incomplete", "state", "Draft {draft!r} is {completion}: only a complete draft "
              "can be sent by reference; author a complete replacement with content"),
    ErrorSpec("session_id_held", "state", "A live session on another broker holds that id", LATER),
    ErrorSpec("session_id_unverified", "state", "No broker on this database remembers that id "
              "with that reclaim secret, or a live session on another broker holds it"),
    ErrorSpec("invocation_taken", "state", "The invocation was already started by another "
              "broker, or its conversation was deleted"),
    ErrorSpec("store_unavailable", "state", "The broker's database is locked by another process "
              "or otherwise unavailable; the message was not kept: retry later", LATER),
    # -- peer ----------------------------------------------------------------------
    ErrorSpec("ask_timeout", "peer", "No reply within {timeout_s:g} s", LATER),
    ErrorSpec("peer_disconnected", "peer", "{name} disconnected before replying", LATER),
    ErrorSpec("broker_unreachable", "peer", "{name} is held by broker {broker}, which this "
              "broker cannot reach now (their link is down, though the database says it is "
              "alive); nothing was delivered or queued: try again in a moment", LATER),
    ErrorSpec("broker_unavailable", "peer", "Broker did not answer within {timeout_s:g} s", LATER),
    ErrorSpec("no_broker", "peer", "No broker is listening at {endpoint} ({detail}); start one "
              "with `python -m broker` (with --endpoint {endpoint} if that is not its default)", LATER),
    ErrorSpec("broker_start_failed", "peer", "No broker was listening and starting one failed "
              "({detail}); its log is {log}"),
    ErrorSpec("unknown_host", "peer", "The host {host!r} of {endpoint} does not resolve "
              "({detail}); check the host name in the endpoint (or $INTERCOM_ENDPOINT)"),
    ErrorSpec("inbox_full", "peer", "The inbox holds {count} messages ({size} bytes, limit "
              "{limit}): reading from the broker is paused; take messages with receive()", LATER),
    ErrorSpec("session_closed", "peer", "The session is closed"),
    ErrorSpec("internal_error", "peer", "Internal broker error; the request was not applied"),
]

ERRORS: dict[str, ErrorSpec] = {spec.code: spec for spec in _TABLE}
# Refusals that tell the client where to go: their ``endpoint`` is on the wire too.
REDIRECTS = frozenset(spec.code for spec in _TABLE if spec.retry == REDIRECT)
# A client's own answers to its caller (its checks, its connection, its inbox): no
# broker sends these, so a client in another language produces them itself.
LOCAL = frozenset({
    "invalid_endpoint", "request_too_large", "unknown_tool", "auth_failed",
    "confirmation_declined", "unknown_draft", "draft_expired", "draft_already_sent",
    "draft_incomplete", "broker_unavailable", "no_broker", "broker_start_failed",
    "unknown_host", "inbox_full", "session_closed",
})


class BusError(Exception):
    """A refusal with a stable code; ``str()`` is the human text."""

    def __init__(self, code: str, **fields: Any) -> None:
        self.code = code
        self.fields = fields
        super().__init__(error_text(code, **fields))

    @classmethod
    def with_text(cls, code: str, text: str, **fields: Any) -> BusError:
        """This refusal with a text already known (a remembered answer given again)."""
        error = cls(code, **fields)
        error.args = (text,)
        return error

    @property
    def text(self) -> str:
        return self.args[0]

    def reply(self) -> dict[str, Any]:
        answer = {"ok": False, "code": self.code, "error": self.text}
        if isinstance(self.fields.get("last_seen_at"), float):
            answer["lastSeenAt"] = self.fields["last_seen_at"]    # target_not_found
        if isinstance(self.fields.get("retry_after_s"), float):
            answer["retryAfterS"] = round(self.fields["retry_after_s"], 3)   # the guard's
        if self.code == "ask_cycle" and isinstance(self.fields.get("cycle"), list):
            # who the asker would wait on, and the chain by which it waits on the asker
            answer.update(waitsOn=self.fields.get("id"), waitsOnName=self.fields.get("name"),
                          cycle=self.fields["cycle"])
        if self.code in REDIRECTS and isinstance(self.fields.get("endpoint"), str):
            answer["endpoint"] = self.fields["endpoint"]
            if isinstance(self.fields.get("server_key"), str):
                answer["serverKey"] = self.fields["server_key"]   # its CURVE key
        return answer


# A value a refusal quotes back is cut to this many characters: a 250 KB run id or
# target is not echoed whole (a refusal costs the broker and the wire little).
QUOTED_CHARS_MAX = 1000


def error_text(code: str, **fields: Any) -> str:
    """Fill the text template of ``code``; missing fields never raise; a long text
    value is quoted cut (``QUOTED_CHARS_MAX``)."""
    spec = ERRORS[code]
    for key, value in fields.items():
        if value.__class__ is str and len(value) > QUOTED_CHARS_MAX:
            fields[key] = value[:QUOTED_CHARS_MAX - 1] + "…"
    try:
        return spec.text.format(**fields)
    except (KeyError, IndexError, ValueError):
        return spec.text


def error_reply(code: str, **fields: Any) -> dict[str, Any]:
    """The JSON-ready failure dict every tool call returns."""
    return {"ok": False, "code": code, "error": error_text(code, **fields)}
