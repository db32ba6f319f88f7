"""What to do about each error code: the advice column of ``docs/errors.md``.

:data:`HELP` has one entry per code of :data:`schemas.errors.ERRORS` (a unit test keeps
the two in step). The error's text says what happened; this says what the caller, the
client's author or the operator does next. Whether simply sending again may help is
the code's ``retry`` in :mod:`schemas.errors`, not repeated here.
"""

from __future__ import annotations

HELP: dict[str, str] = {
    # -- protocol --------------------------------------------------------------------
    "malformed_frame": "A client bug: each frame must be one msgpack value (a map, or an "
                       "array of maps) with UTF-8 strings and string keys.",
    "frame_too_large": "Send less per frame: split a batch, or shorten the request "
                       "(attachments count). From the broker: an answer too large to "
                       "deliver was replaced by this refusal.",
    "bad_envelope": "A client bug: the text names the field. Check `v`, `k`, `id` and "
                    "the declared types and lengths in PROTOCOL.md.",
    "unknown_kind": "A client bug, or a client newer than the broker: use the kinds "
                    "PROTOCOL.md lists.",
    "unsupported_version": "Send `v: 1` as an integer; upgrade the client or the broker "
                           "so that both speak the same version.",
    "not_connected": "Say hello again on this connection (with `sessionId`, `token` and "
                     "`instance` to keep the session), then resend what is owed. Clients "
                     "do this by themselves.",
    "already_connected": "A client bug: one connection holds one session. Open another "
                         "connection (socket) for a second session.",
    "stale_hello": "Nothing to do: this hello reached the broker after a newer one of the "
                   "same client, which holds the session elsewhere. A client that sees it "
                   "sent hellos out of order (its attempt numbers must grow).",
    "batch_too_large": "Put fewer envelopes in one frame (see the limit) or send several "
                       "frames.",
    # -- request ---------------------------------------------------------------------
    "invalid_params": "Fix the parameter the text names; the tool's JSON Schema is in "
                      "`schemas/tools.py`.",
    "invalid_endpoint": "Give an endpoint such as `ipc:///path/broker.sock` or "
                        "`tcp://127.0.0.1:5555`.",
    "request_too_large": "Send less text or fewer or smaller attachments; a frame to the "
                         "broker holds at most 1 MiB.",
    "unknown_action": "Use one of the intercom actions: list, groups, join, leave, send, "
                      "ask, reply, pending, status.",
    "unknown_tool": "Call one of the tools the MCP server listed (`tools/list`).",
    "missing_param": "Add the parameter the text names.",
    "invalid_attachment": "Fix the attachment at the index given: `type` (file, snippet, "
                          "context), `name` and `content` for intercom; `path` (an existing "
                          "file) and `altText` (images only) for respond.",
    "message_too_large": "Shorten the message, or send it in parts.",
    "invalid_group": "Use a group name of 1 to 128 characters without control characters.",
    "reserved_group": "Pick another group name: `true` and `auto` are reserved.",
    "invalid_name": "Use a session name of 1 to 128 characters without control "
                    "characters.",
    "invalid_status": "Report `idle`, `thinking` or `tool:<name>` (a noninteractive child "
                      "may also report completed, failed, interrupted or cancelled).",
    "message_id_conflict": "Use a fresh id for every new message; resend an id only with "
                           "the same message, to the same target.",
    "invalid_channel": "Give a channel id `<platform>:<id>` with platform discord, remote or "
                       "internal.",
    "invalid_agent": "Use an agent name of letters, digits, `.`, `_` and `-` that does not "
                     "start with `.`.",
    "invoke_alias": "Pass the destination's channel id as `list_sessions` shows it, not "
                    "current, last or owner.",
    # -- target ----------------------------------------------------------------------
    "target_not_found": "Check the name with `intercom list` (only sessions sharing a group "
                        "are visible); a session that is reconnecting is back within "
                        "seconds.",
    "ambiguous_target": "Use the full session id (or a longer prefix) from `intercom "
                        "list`.",
    "invalid_target": "Use a full session id, an exact name, a unique 8-hex prefix, an "
                      "Atomic session id or a `workflow:` path.",
    "self_target": "Message another session; a session cannot message itself.",
    "different_group": "Join a group the target is in (`intercom join`), or ask the target "
                       "to join yours.",
    "workflow_different_group": "Join the run's group `workflow:<run>` first, if you are "
                                "meant to steer that run.",
    "non_agent_target": "Message an agent stage: prompt and tool nodes have nobody to "
                        "read messages.",
    "ambiguous_stage": "Ask by the exact stage path `intercom list` shows.",
    "invalid_path": "Write the path as `workflow:<run>/<stage>[/<child>...]`; `*` matches "
                    "one segment, `**` any depth.",
    "not_supervisor": "Only a session launched with a child grant has a supervisor; "
                      "message the session you want by name or id instead.",
    "unknown_output": "Acknowledge outputs soon after they arrive; an unknown id cannot be "
                      "acknowledged.",
    "channel_not_found": "Pick a session from `list_sessions`, or connect one on that "
                         "channel first.",
    "owner_not_configured": "The operator sets `ownerId` in the agent's `agent.toml` "
                            "(see docs/operations.md), then `kill -HUP` the broker.",
    "remote_channel_refused": "Respond to `current`, or to a `remote:` channel of the same "
                              "agent.",
    "attachments_unsupported": "Send the text alone, or respond to a `discord:` channel.",
    "invoke_self": "Invoke another session of the agent; the current session is already "
                   "taking a turn.",
    "invoke_ephemeral": "Invoke a persistent session; connect the destination with "
                        "`persistent` true.",
    "invoke_remote_target": "Invoke a session that is not `remote:`.",
    "invoke_cross_agent": "Invoke only sessions of your own agent (from `list_sessions`).",
    # -- authority -------------------------------------------------------------------
    "grant_required": "Connect with the grant your launcher handed over (a stage's from "
                      "`register_run`/`add_stages`, a child's from `grant_child`).",
    "invalid_grant": "Use the grant made for this stage, run or launcher; a revoked grant "
                     "needs a new one from the host.",
    "grant_used": "Ask the launcher for a new grant: each child needs its own.",
    "grant_expired": "Ask the launcher for a new grant and connect within two minutes of "
                     "it.",
    "non_agent_launcher": "Launch children from an agent session; a prompt or tool node "
                          "cannot supervise.",
    "auth_failed": "Check the CURVE keys: the broker's public key, and a client pair whose "
                   "public key is in the broker's `clients/` directory (then `kill -HUP` "
                   "it).",
    "no_agent": "Connect with `agent` (and a `channel`) to use respond, invoke and "
                "sessions.",
    "control_read_only": "Open an ordinary session to act; a control connection only "
                         "reads.",
    "control_other_broker": "Run the command against the endpoint of the broker that "
                            "holds the target (its `list` row names it), or use an ordinary "
                            "session, which reaches sessions on every broker.",
    "act_for_needed": "Name the session to act for: the CLI's `--identity` (a history file "
                      "or an MCP server's name); a client's hello `actFor`/`actForToken`.",
    "act_for_refused": "Check the identity entry is the live session's latest (id and reclaim "
                       "secret) and that you connect to the broker holding it.",
    "not_output_channel": "Acknowledge an output from the conversation it was sent to (the "
                          "session holding that channel).",
    "operator_only": "Connect over the broker's ipc endpoint or loopback, or with the "
                     "broker's own CURVE pair (`--operator-key`).",
    "control_only": "Call this from a control connection (`sessionKind` \"control\").",
    "invoke_remote_caller": "Invoke from a session that is not `remote:`.",
    "invoke_disabled": "The operator sets `invoke = true` in the agent's `tools.toml` (see "
                       "docs/operations.md), then `kill -HUP` the broker.",
    # -- state -----------------------------------------------------------------------
    "not_member": "Nothing to leave; `intercom groups` shows your memberships.",
    "last_group": "Join another group first, or call `leave` without a group to reset to "
                  "the home group.",
    "queue_full": "Wait until the stage starts and takes its queued messages, or send less "
                  "to it.",
    "channel_in_use": "Close the other session on this channel (a silent one is dropped "
                      "within the liveness window), or use another channel.",
    "not_persistent": "Nothing to reset or delete: an ephemeral conversation keeps no "
                      "record.",
    "too_many_invocations": "Wait until the destination has taken some of its queued "
                            "turns.",
    "unknown_invocation": "Report only invocations handed to this session, once each.",
    "pending_stage_ask_unsupported": "Use `send` (it queues until the stage starts), or "
                                     "ask once the stage is running.",
    "terminal_child": "The child has finished; send it nothing more, or ask its "
                      "supervisor.",
    "supervisor_busy": "Wait for the pending supervisor reply before asking again.",
    "too_many_asks": "Wait for one of the pending asks to be answered or to time out.",
    "flood_guard": "Send to that session less often: wait `retryAfterS` seconds, or put "
                   "several things in one message. A program that needs more turns the "
                   "bound up or off at connect (`guard`: `perMinute`, 0 for none; the MCP "
                   "server's `--guard-per-minute N` or `--no-guard`).",
    "loop_guard": "Two agents are answering each other with nobody else involved: stop "
                  "and tell your user. A person's prompt to either session, or `retryAfterS` "
                  "seconds without messages between the two, starts the count again; the "
                  "bound is `guard` `exchanges` at connect (the MCP server's "
                  "`--guard-exchanges N`, `--guard-pause-s S`, `--no-guard`).",
    "ask_cycle": "Do not ask again while it waits on you: reply to its ask first "
                 "(`intercom pending` lists it), or `send` your question; its answer "
                 "comes as a message.",
    "no_pending_ask": "Nothing to reply to; use `send` to start a new message.",
    "reply_ambiguous": "Pass `replyTo` (a message id from `intercom pending`) or `to`.",
    "unknown_message": "Ask with the messageId a send or ask of yours answered, within the "
                       "hour; older receipts are forgotten.",
    "inbound_refused": "Do not retry: the person behind that session refuses messages "
                       "for now. Tell your own user, or reach someone else.",
    "unknown_held": "List the held messages first (`python -m client held --identity "
                    "NAME`); each is released or dropped once.",
    "held_dropped": "The receiver's person decided against your ask; do not send it again "
                    "unless your user says so.",
    "unknown_thread": "Check the id with `intercom pending`; the ask may have ended.",
    "thread_sender_mismatch": "Pass the `to` that sent the message, or leave `to` out.",
    "stale_turn": "Reply to a pending ask instead (`intercom pending`), or send a new "
                  "message.",
    "confirmation_declined": "The person declined; do not send, or ask them again.",
    "unknown_run": "Check the run id (`intercom list`); the run may have ended.",
    "run_has_host": "Ask the run's host to end it (`end_run`), or wait until its host has "
                    "left; an operator ends only runs without a live host.",
    "not_run_host": "Only the run's host changes it; another session takes it over with "
                    "`take_over` and the run grant.",
    "invalid_transition": "Report states in order: PENDING, RUNNING, then completed, "
                          "failed or skipped.",
    "stage_not_deliverable": "Send to it once it is running, or give it a workflow group.",
    "too_many_sessions": "Close sessions you no longer use; the operator may raise "
                         "`--max-sessions` or `--max-sessions-per-connection`.",
    "session_rate_limited": "Open sessions more slowly; the text says how long to wait.",
    "too_many_groups": "Leave a group before joining another.",
    "too_many_runs": "End a run before registering another; the operator may raise "
                     "`--max-runs-per-session`.",
    "run_full": "Wait until stages start and take their messages, or end the run.",
    "sticky_storage_full": "Wait until queued messages are taken or runs end; the "
                           "operator may raise `--max-sticky-bytes`.",
    "too_many_conversations": "Delete conversations the agent no longer needs, or resume "
                              "an existing one.",
    "target_backlogged": "The target is not reading; try later (it is dropped if it stays "
                         "stuck), and tell its owner.",
    "stage_closed": "Ask a stage that is still running, or begin fresh work and give it "
                    "what it needs to know.",
    "run_taken_over": "Talk to the run through the session that took it over.",
    "run_elsewhere": "Clients follow this by themselves: say hello again at `endpoint`.",
    "run_moving": "Too many requests wait for the run's adoption, or another broker owns "
                  "a run this one had not heard of yet: send again in a moment, "
                  "under a new id. A refused hello is said again at `endpoint` (this "
                  "broker) after a short pause; clients do that by themselves.",
    "run_dormant": "Wait until the run's host comes back, or `send` (held until it "
                   "resumes).",
    "unknown_draft": "Send the text with `content`.",
    "draft_expired": "Send the text with `content`.",
    "draft_not_current": "Send by reference only to `current`; use `content` for any other "
                         "channel.",
    "draft_already_sent": "Send new text with `content`.",
    "draft_incomplete": "Write a complete answer and send it with `content`.",
    "session_id_held": "Wait until the other session leaves, or connect without asking for "
                       "that id.",
    "session_id_unverified": "Connect with the identity entry (id and reclaim secret) that "
                             "last held the id, or without one for a fresh id.",
    "invocation_taken": "Nothing to do: another broker runs that turn, or nobody needs it.",
    "store_unavailable": "Send again later; the operator checks what holds the database "
                         "(`persist_failed` in the broker's log).",
    # -- peer ------------------------------------------------------------------------
    "ask_timeout": "Ask again with a longer `timeout`, or check the target with "
                   "`intercom list`.",
    "peer_disconnected": "Ask again once the target is back (`intercom list`).",
    "broker_unreachable": "Send again with the same message id in a few seconds: nothing is "
                          "queued twice. If it lasts, check the network between the brokers "
                          "(`python -m client status` lists them).",
    "broker_unavailable": "Check the broker (`python -m client status`); the call was not "
                          "sent again and will not be.",
    "no_broker": "Start one (`python -m broker`), or fix the endpoint.",
    "broker_start_failed": "Read the broker's log named in the text, fix what it says, "
                           "start it by hand to check.",
    "unknown_host": "Fix the host name in the endpoint or `$INTERCOM_ENDPOINT`.",
    "inbox_full": "Take messages with `receive()`; reading resumes as soon as there is "
                  "room.",
    "session_closed": "Open a new session.",
    "internal_error": "Report it with the broker's `internal_error` log line; the request "
                      "was not applied.",
}
