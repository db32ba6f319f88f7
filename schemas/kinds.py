"""The wire protocol, declared once: every envelope kind, its direction and its fields.

Everything else about envelopes is derived from :data:`KINDS`: the broker's check of
incoming envelopes (:func:`check`), the builders of outgoing ones
(:mod:`schemas.envelopes`, each checked against this table by the tests), and the
protocol tables of PROTOCOL.md (:func:`describe`, and ``scripts/docgen``).

Every envelope is a msgpack map with ``v`` (protocol version), ``k`` (kind) and, for a
request, ``id`` (the caller's message id, 1 to 128 characters). A frame holds one
envelope or an array of them (see :mod:`schemas.protocol`). Fields not declared here
are ignored by the receiver, so a newer peer may add fields without breaking an older
one; a declared field with the wrong type or past its limit is refused as
``bad_envelope``.

Invariants:

* a kind's name is unique per direction; ``hb`` is the only kind both sides send;
* ``required`` fields are present in every envelope of that kind a peer may send;
* the tool parameters of ``call`` are declared by the ``intercom`` JSON Schema
  (:mod:`schemas.tools`), not here: ``params`` names that schema.
"""

from __future__ import annotations

from typing import Any

from .errors import BusError
from .fields import TEXT_MAX, Field, Kind, field as _f, type_name  # noqa: F401 (re-exported)
from .generated import main, replace_section
from .limits import (MAX_BATCH, MAX_CHANNEL_CHARS, MAX_CWD_CHARS, MAX_FRAME_BYTES,
                     MAX_MESSAGE_CHARS, MAX_NAME_CHARS, MAX_SEND_ITEMS, MAX_WAITED_BY,
                     STATS_TOP_DEFAULT, STATS_TOP_MAX)

CLIENT, BROKER = "client → broker", "broker → client"
LINK = "broker → broker"    # over the links of brokers sharing one database
ID_MAX = 128

_NONE = type(None)
_STR_OR_NULL = (str, _NONE)
_NUM = (int, float)

CLIENT_KINDS: tuple[Kind, ...] = (
    Kind("hello", CLIENT, "Open a session on this connection, or take one back after a "
         "reconnect or a broker restart. Answered by a ``result`` holding the welcome.", (
        _f("name", str, f"session name (at most {MAX_NAME_CHARS} characters once trimmed)",
           required=True),
        _f("sessionKind", _STR_OR_NULL, "interactive, noninteractive, stage or control (a "
           "control connection: never listed, announces nothing, may read, send and ask, and "
           "with actFor reply, see pending, join and leave for that session)"),
        _f("group", _STR_OR_NULL, "explicit home group"),
        _f("fallbackGroup", _STR_OR_NULL, "the client's env > config > default group"),
        _f("homeGroup", _STR_OR_NULL, "home group resolved at the first connect (reconnects)"),
        _f("groups", (list, _NONE), "memberships to restore after a reconnect", max_len=None),
        _f("agent", _STR_OR_NULL, "agent this session belongs to"),
        _f("atomicSessionId", _STR_OR_NULL, "the runtime's own session id"),
        _f("parent", _STR_OR_NULL, "id of the launching session"),
        _f("sessionId", _STR_OR_NULL, "id to take back"),
        _f("token", _STR_OR_NULL, "secret proving a previous hold of sessionId"),
        _f("instance", _STR_OR_NULL, "a random nonce of this client's session object, the "
           "same in each of its hellos: a hello presenting a live session's token with another "
           "instance is a second process and gets a fresh id", max_len=ID_MAX),
        _f("attempt", (*_NUM, _NONE), "a whole number that grows with each hello this client "
           "says (the Python and Node clients send the wall clock in milliseconds, or one "
           "more than the last): with sessionId, a newer attempt takes the id from a "
           "live holder on another broker, an older one is refused stale_hello"),
        _f("stage", _STR_OR_NULL, "canonical workflow path of a stage session"),
        _f("transcript", _STR_OR_NULL, "a stage's transcript: the same one means no duplicates"),
        _f("statusSuffix", _STR_OR_NULL, "configured status suffix"),
        _f("notifyUndeliverable", (bool, _NONE), "send undeliverable notices for sticky entries"),
        _f("keepUntil", _STR_OR_NULL, "when the broker may forget a live message sent to this "
           "session: ``read`` (default: once the client reports it read) or ``seen`` (once the "
           "client reports it handed to the program or model with ``seenThrough``)", max_len=16),
        _f("grant", _STR_OR_NULL, "the grant a stage or a child got from its launcher"),
        _f("channel", _STR_OR_NULL, "an agent session's channel id (default internal:<session id>)",
           max_len=MAX_CHANNEL_CHARS),
        _f("persistent", (bool, _NONE), "an agent session's lifetime: kept after it leaves "
           "(default true) or forgotten"),
        _f("cwd", _STR_OR_NULL, "the client's working directory, shown in list rows",
           max_len=MAX_CWD_CHARS),
        _f("actFor", _STR_OR_NULL, "control connections only: the id of a live session of "
           "this broker to act for (reply, pending, join, leave)", max_len=ID_MAX),
        _f("actForToken", _STR_OR_NULL, "with actFor: that session's reclaim secret"),
        _f("capabilities", (dict, _NONE), "how a message reaches the agent behind this "
           "session, shown in list rows: ``push``, ``hooks``, ``steer`` (booleans) and "
           "``host`` (mcp, python, node or the runtime's name)", max_len=None),
        _f("inbound", _STR_OR_NULL, "what happens to messages from other sessions: "
           "``accept`` (default), ``hold`` (kept for a person to release or drop) or "
           "``refuse``", max_len=16),
        _f("guard", (bool, dict, _NONE), "the flood and loop guard on this session's sends: "
           "``true`` (the defaults) or ``{perMinute, exchanges, pauseS}``; off when absent",
           max_len=None),
    ), request=True),
    Kind("call", CLIENT, "One intercom tool call: ``action`` and the tool's parameters.", (
        _f("action", object, "list, groups, join, leave, send, ask, reply, pending or status "
           "(anything else: unknown_action)", max_len=None),
        _f("currentTurn", str, "id of the message this session is answering now", max_len=ID_MAX),
        _f("quiet", bool, "answer success with ``acks`` instead of a ``result``"),
    ), request=True, params="intercom"),
    Kind("sends", CLIENT, "Pipelined plain sends to one target: each (id, message) pair "
         "means the quiet ``call`` send of that id and text, answered in ``acks`` or by "
         "its own ``result``.", (
        _f("to", _STR_OR_NULL, "target, as in send (one that names nobody, or is too long, "
           "is refused per message)", max_len=None),
        _f("ids", list, "message ids (an unusable one is dropped)", required=True,
           max_len=MAX_SEND_ITEMS),
        _f("messages", list, "message texts, one per id", required=True, max_len=MAX_SEND_ITEMS,
           items=str),
    )),
    Kind("supervisor", CLIENT, "Ask the launching session, across groups: ``message``, "
         "``attachments`` and ``timeout``, checked as the parameters of an ``ask``.",
         request=True, params="intercom"),
    Kind("workflow", CLIENT, "A workflow host operation; its parameters are checked by "
         "the operation (a bad one is ``invalid_params``).", (
        _f("op", str, "register_run, add_stages, stage_state, end_run, revoke_stage or "
           "take_over", required=True, max_len=32),
        _f("runId", object, "run id: a non-empty string without '/'", max_len=None),
        _f("stages", object, "register_run, add_stages: the stage tree (a list)", max_len=None),
        _f("parent", object, "add_stages: the parent stage path", max_len=None),
        _f("stage", object, "stage_state: the stage path or name", max_len=None),
        _f("state", object, "stage_state: PENDING, RUNNING, completed, failed or skipped",
           max_len=None),
        _f("savedSession", object, "stage_state: \"unreadable\" when the stage's saved session "
           "cannot be read (it has no held subagents from then on: sends to them are no "
           "longer held, those held are reported undeliverable; its own route is unaffected)",
           max_len=None),
        _f("lateRouter", object, "register_run: the host answers asks to the run's stages "
           "after it ends (post-mortem)", max_len=None),
        _f("grant", object, "take_over: the run grant register_run gave its host", max_len=None),
    ), request=True),
    Kind("status", CLIENT, "Lifecycle status and reply capability.", (
        _f("status", _STR_OR_NULL, "idle, thinking or tool:<name> (a child: completed, ...)"),
        _f("replyCapability", _STR_OR_NULL, "live or terminal"),
        _f("capabilities", (dict, _NONE), "capabilities changed since the hello (merged "
           "into them; see hello)", max_len=None),
        _f("humanInput", (bool, _NONE), "a person just gave this session input (a prompt): "
           "the loop guard's exchange counts of its pairs start again"),
    )),
    Kind("received", CLIENT, "Receipt: these delivered messages entered the session's context.", (
        _f("ids", list, "message ids", required=True, max_len=None),
    )),
    Kind("grant", CLIENT, "Ask for a grant: ``for: \"child\"`` (the default) gives one a "
         "child passes with ``parent`` at connect. Answered ``{grant}``.", (
        _f("for", str, "what the grant is for: child", max_len=16),
    ), request=True),
    Kind("respond", CLIENT, "Post the agent's output to a channel; answered ``{final, sent, "
         "channel, outputId[, draft]}``.", (
        _f("content", str, "the exact text (a draft already turned into its text)",
           required=True, max_len=MAX_MESSAGE_CHARS),
        _f("draft", _STR_OR_NULL, "the draft id when sent by reference", max_len=ID_MAX),
        _f("channel", str, "current (default), last, owner or a channel id of the agent",
           max_len=MAX_CHANNEL_CHARS),
        _f("attachments", list, "[{path, altText?}] (discord: channels only)", max_len=None),
        _f("final", bool, "the turn's final message (default true)"),
    ), request=True),
    Kind("ack_output", CLIENT, "Acknowledge an ``output`` (by the channel's session or a "
         "bridge): its sender gets an ``output_acked`` event; answered ``{acked, outputId, "
         "told}`` (``told``: the sender was connected to hear it).", (
        _f("outputId", str, "the output event's outputId", required=True, max_len=ID_MAX),
    ), request=True),
    Kind("sessions", CLIENT, "The caller's agent's sessions, or (a control connection) the "
         "named agent's: ``{sessions: [...]}``. Read-only: it takes no invocation.", (
        _f("agent", str, "control connections only, and required there: whose sessions",
           max_len=None),
    ), request=True),
    Kind("stats", CLIENT, "What the broker holds and does (control connections only; a "
         "session is refused ``control_only``): ``{broker, sessions, groups, runs, queues, "
         "backlog, asks, invocations, conversations, brokers, store, counters, "
         "lastRefusals}``; ``queues`` and ``backlog`` list the largest first.", (
        _f("top", int, f"how many rows the largest-first lists hold (1 to {STATS_TOP_MAX}, "
           f"default {STATS_TOP_DEFAULT})"),
    ), request=True),
    Kind("overview", CLIENT, "Every session (but control connections) and every workflow run "
         "this broker holds: ``{brokerId, sessions: [...], workflows: [...]}``, each session "
         "row with ``broker`` (null: held here) and ``homeGroup``, each run as in ``list``. "
         "For the operator's control connection only (over ipc or loopback, or with the "
         "broker's own CURVE key).", request=True),
    Kind("end_run", CLIENT, "End a workflow run whose host left and will not come back "
         "(dormant, or waiting out its host's lease): its queued entries are reported "
         "undeliverable, its groups close, and it is forgotten. For the operator's control "
         "connection only (as ``overview``); a run with a live host is refused "
         "``run_has_host``. Answered ``{runId, ended, undeliverable}``.", (
        _f("runId", str, "the run", required=True, max_len=None),
    ), request=True),
    Kind("inbound", CLIENT, "The session's inbound gate (its own, or, from a control "
         "connection acting for it, the person's at the terminal): ``op`` ``policy`` sets "
         "``policy`` (accept, hold or refuse; answered ``{policy, held}``), ``held`` lists "
         "the held messages (``{policy, held: [rows]}``), ``release`` and ``drop`` settle "
         "one held message by ``messageId`` (or every one with ``all``). A held message's "
         "sender gets its receipt states: held, then released, dropped or expired.", (
        _f("op", str, "policy, held, release or drop", required=True, max_len=16),
        _f("policy", _STR_OR_NULL, "with op policy: accept, hold or refuse", max_len=16),
        _f("messageId", _STR_OR_NULL, "with release or drop: the held message", max_len=ID_MAX),
        _f("all", (bool, _NONE), "with release or drop: every held message"),
    ), request=True),
    Kind("invoke", CLIENT, "Queue a one-shot turn in another persistent session of the agent; "
         "answered ``{queued, id, session}`` once the job is committed.", (
        _f("session", str, "the destination's channel id", required=True,
           max_len=MAX_CHANNEL_CHARS),
        _f("reason", str, "why the destination should take a turn", required=True),
    ), request=True),
    Kind("finish_invocation", CLIENT, "The outcome of an invocation handed to this session; "
         "the request's ``id`` is the invocation's id.", (
        _f("ok", bool, "the turn succeeded", required=True),
        _f("error", _STR_OR_NULL, "why it failed"),
    ), request=True),
    Kind("turn", CLIENT, "The session starts a turn (it becomes the agent's most recently "
         "active session).", (
        _f("turn", str, "the turn id", max_len=ID_MAX),
    )),
    Kind("recovery", CLIENT, "The current rejected-output turn of this session, kept in the "
         "broker's response_recovery table (persistent sessions only).", (
        _f("turn", str, "the turn id", required=True, max_len=ID_MAX),
        _f("drafts", list, "[{id, text, completion, outcome}]", required=True, max_len=None),
        _f("outcome", str, "pending, recovered or failed", required=True, max_len=16),
    ), request=True),
    Kind("reset", CLIENT, "Forget this persistent session's response recovery row.", (),
         request=True),
    Kind("delete", CLIENT, "Delete this persistent session's record, recovery row and queued "
         "invocations; the live session goes on as ephemeral.", (), request=True),
    Kind("bye", CLIENT, "Close the session now, with the last reports of what was read and "
         "seen (as in ``hb``), so nothing this client had is reported undelivered.", (
        _f("read", int, "as in hb"),
        _f("seenThrough", str, "as in hb", max_len=ID_MAX),
    )),
    Kind("hb", CLIENT, "Heartbeat, due after a third of the welcome's ``livenessS`` (at "
         "most 1 s) without sending; answered with ``hb``. Also sent whenever ``read`` has "
         "grown by an eighth of the welcome's ``backlogBytes``.", (
        _f("read", int, "bytes of frames this connection has read since its hello "
           "(the broker's backlog bound counts sent minus read; a live message is read once "
           "every byte up to its frame is)"),
        _f("seenThrough", str, "the id of the newest message handed to the program or model: "
           "it and every message delivered to this session before it are seen", max_len=ID_MAX),
    )),
)

_MSG_FIELDS = (
    _f("id", str, "message id (reply to it with replyTo)", required=True, max_len=ID_MAX),
    _f("from", str, "sender session id", required=True),
    _f("fromName", str, "sender name", required=True),
    _f("message", str, "text", required=True, max_len=None),
    _f("attachments", list, "attachments", required=True, max_len=None),
    _f("sentAt", _NUM, "wall-clock time it was sent (seconds)", required=True),
    _f("expectsReply", bool, "an ask: the sender waits for a reply", required=True),
    _f("replyTo", str, "the message this one answers", max_len=ID_MAX),
    _f("supervisor", bool, "an ask from a child to its supervisor"),
    _f("timeoutS", _NUM, "an ask's timeout"),
    _f("target", str, "the workflow path it was sent to", max_len=None),
    _f("ackRequired", bool, "send ``received`` once it is in the session's context"),
    _f("receivedBeforeStart", bool, "retained for the stage before it started"),
    _f("postMortem", bool, "a late message to a closed stage (``stage``), for its host"),
    _f("stage", str, "a late message's closed stage: its canonical path", max_len=None),
    _f("held", bool, "held for this subagent while its run was dormant"),
    _f("replyable", bool, "false: from a control connection (the command line), which no "
       "session can message: a reply or send to it fails (an ask from one is answered "
       "with reply as usual)"),
)

BROKER_KINDS: tuple[Kind, ...] = (
    Kind("result", BROKER, "The answer to a request: ``ok`` and the answer's fields, or "
         "``ok: false`` with ``code`` and ``error``.", (
        _f("re", _STR_OR_NULL, "id of the request answered (null: not attributable)",
           required=True, max_len=ID_MAX),
        _f("ok", bool, "success", required=True),
        _f("code", str, "error code (schemas.errors)"),
        _f("error", str, "error text", max_len=None),
        _f("endpoint", str, "where to go instead (codes run_elsewhere, run_moving)"),
        _f("serverKey", str, "the CURVE server key at that endpoint, when it serves CURVE"),
        _f("retryAfterS", _NUM, "seconds until a send to that session may pass again "
           "(codes flood_guard, loop_guard)"),
    )),
    Kind("msg", BROKER, "An inbound message.", _MSG_FIELDS),
    Kind("msgs", BROKER, "Several plain text messages from one sender; each (id, message) "
         "pair reads as a ``msg`` without attachments that expects no reply.", (
        _f("from", str, "sender session id", required=True),
        _f("fromName", str, "sender name", required=True),
        _f("sentAt", _NUM, "wall-clock time they were sent", required=True),
        _f("ids", list, "message ids", required=True, max_len=None),
        _f("messages", list, "texts", required=True, max_len=None),
    )),
    Kind("acks", BROKER, "Quiet requests that succeeded with a plain delivery.", (
        _f("ids", list, "their ids", required=True, max_len=None),
    )),
    Kind("event", BROKER, "An in-band event: presence (``session_joined``, "
         "``session_left``, ``presence_update`` with the session's row), "
         "``undeliverable``, ``undelivered`` (a live message this session sent never reached its receiver: see PROTOCOL.md, Receipts), ``memberships_changed`` (a control connection acting for this "
         "session changed its memberships: ``groups`` holds them now), ``output`` (a respond to this session's channel; also "
         "published on PUB, topic ``channel:<channel id>``), ``output_acked`` (an output "
         "this session sent was acknowledged) or ``invocation`` (a turn "
         "another session of the agent asked for). Presence is also published on PUB, "
         "topic = group.", (
        _f("event", str, "event name", required=True),
        _f("session", dict, "the session's public row (presence)"),
        _f("group", str, "the group (PUB only)"),
        _f("groups", list, "memberships_changed: the session's memberships now", max_len=None,
           items=str),
        _f("joinedGroups", list, "PUB presence_update in a kept group: the groups gained",
           max_len=None),
        _f("leftGroups", list, "PUB presence_update in a kept group: the groups lost",
           max_len=None),
        _f("messageId", str, "undeliverable: the sticky message; undelivered: the live "
           "message", max_len=ID_MAX),
        _f("runId", str, "undeliverable: its run", max_len=None),
        _f("target", str, "undeliverable: its target", max_len=None),
        _f("to", str, "undelivered: the receiving session's id"),
        _f("toName", str, "undelivered: its name"),
        _f("reason", str, "undeliverable: why; undelivered: session_ended, bound_reached or "
           "never_seen; invocation: the caller's reason"),
        _f("channel", str, "output: the channel id", max_len=MAX_CHANNEL_CHARS),
        _f("content", str, "output: the text", max_len=None),
        _f("attachments", list, "output: [{path, altText?}]", max_len=None),
        _f("final", bool, "output: the turn's final message"),
        _f("fromSession", str, "output, invocation: the sender's channel id",
           max_len=MAX_CHANNEL_CHARS),
        _f("outputId", str, "output, output_acked: the output's id (acknowledge it with "
           "ack_output)", max_len=ID_MAX),
        _f("fromId", str, "output: the sending session's id"),
        _f("id", str, "invocation: the job id (report it with finish_invocation)", max_len=ID_MAX),
        _f("agent", str, "invocation: the calling agent"),
    )),
    Kind("hb", BROKER, "Heartbeat answer."),
)

_ROWS = _f("sessions", list, "session rows: the public row plus homeGroup, parent, "
           "statusSuffix, tokenHash, hosts (the run ids it hosts)", required=True, max_len=None)

LINK_KINDS: tuple[Kind, ...] = (
    Kind("link", LINK, "Hello on a new link (a DEALER to the other broker's ROUTER): who "
         "this broker is, proved with the database's grant key, and every session it "
         "holds. Sent again when the other broker asks with ``link_reset``.", (
        _f("broker", str, "the sending broker's id", required=True),
        _f("proof", str, "HMAC of the broker id under the database's grant key", required=True),
        _f("endpoint", str, "its ROUTER endpoint", required=True),
        _f("until", _NUM, "its lease end (wall clock)", required=True),
        _ROWS,
        _f("runs", list, "ids of the workflow runs it owns", max_len=None),
        _f("subagents", dict, "run id -> records of the subagents of its dormant runs "
           "(sends to them are held there)", max_len=None),
    )),
    Kind("link_runs", LINK, "Workflow runs the sending broker took (registered, adopted "
         "from a dead broker) or no longer owns (ended).", (
        _f("owned", list, "run ids it owns now", required=True, max_len=None),
        _f("dropped", list, "run ids it no longer owns", required=True, max_len=None),
        _f("subagents", dict, "run id -> subagent records, for the owned runs that are "
           "dormant", max_len=None),
    )),
    Kind("link_presence", LINK, "Sessions of the sending broker that changed (rows) or left "
         "(ids), in order.", (
        _ROWS,
        _f("gone", list, "ids of sessions that left", required=True, max_len=None),
    )),
    Kind("forward", LINK, "A request of one of the sender's sessions for a session held "
         "here: handled here as if that session were connected here.", (
        _f("from", str, "the requesting session's id", required=True),
        _f("env", dict, "the request envelope, as the client sent it", required=True),
        _f("waitedBy", list, "with an ask or supervisor ask: the ids of the sessions that "
           "wait on the requesting session (directly or through others), nearest first, "
           "as the sender knows them (the receiver refuses an ask that would close a wait "
           "cycle: ``ask_cycle``)", max_len=MAX_WAITED_BY, items=str),
        _f("waitedVia", list, "with ``waitedBy``, one per id: the index in ``waitedBy`` of "
           "the session it waits on next (always an earlier one), -1 for the requesting "
           "session", max_len=MAX_WAITED_BY, items=int),
    )),
    Kind("link_waiters", LINK, "Who waits on the askers of asks the sender forwarded here "
         "changed: for each such ask still pending, who waits on its asker now.", (
        _f("asks", dict, "ask id -> ``{waitedBy, waitedVia}`` (as in ``forward``; empty "
           f"lists: nobody), at most {MAX_WAITED_BY} sessions each", required=True,
           max_len=None),
    )),
    Kind("link_human_input", LINK, "A person gave input to a session the sending broker "
         "holds (``status`` ``humanInput``): the receiver's guarded sessions count their "
         "turns with it from zero.", (
        _f("session", str, "the session's id", required=True),
    )),
    Kind("relay", LINK, "An envelope for a session held by the receiving broker (an "
         "answer, a message, an event other than presence).", (
        _f("to", str, "the session's id", required=True),
        _f("env", dict, "the envelope", required=True),
    )),
    Kind("link_list", LINK, "The run rows of a ``list`` of one of the sender's sessions, "
         "for runs the receiving broker owns: answered with ``link_listed``.", (
        _f("from", str, "the listing session's id", required=True),
        _f("token", str, "the sender's handle of that list", required=True, max_len=ID_MAX),
        _f("runs", list, "run ids: those of the session's invocation groups the receiver "
           "owns", required=True, max_len=None),
    )),
    Kind("link_listed", LINK, "The answer to ``link_list``: the rows of those runs that the "
         "session controls (as ``list`` shows them on the owner).", (
        _f("to", str, "the listing session's id", required=True),
        _f("token", str, "the handle ``link_list`` named", required=True, max_len=ID_MAX),
        _f("rows", list, "run rows (``workflows`` items)", required=True, max_len=None),
    )),
    Kind("link_jobs", LINK, "Committed invoke jobs for conversations whose session is held "
         "by the receiving broker: it hands them over now (the sender forgot them).", (
        _f("jobs", list, "jobs: id, agent, channel, fromChannel, reason, createdAt, request",
           required=True, max_len=None),
    )),
    Kind("link_hb", LINK, "Link heartbeat; a link silent for the liveness window is gone.", (
        _f("until", _NUM, "the sender's lease end (wall clock)", required=True),
    )),
    Kind("link_reset", LINK, "This broker lost the link's state: send ``link`` again."),
    Kind("link_bye", LINK, "The sending broker is stopping: its sessions leave now."),
)

KINDS: dict[tuple[str, str], Kind] = {(k.direction, k.name): k
                                      for k in CLIENT_KINDS + BROKER_KINDS + LINK_KINDS}
CLIENT_KIND_NAMES = frozenset(k.name for k in CLIENT_KINDS)
BROKER_KIND_NAMES = frozenset(k.name for k in BROKER_KINDS)
LINK_KIND_NAMES = frozenset(k.name for k in LINK_KINDS)


def _compile(kind: Kind):
    fields = kind.fields
    required = tuple(f.name for f in fields if f.required)

    def check_env(env: dict) -> None:
        for name in required:
            if name not in env:
                raise BusError("bad_envelope", detail=f"missing field {name!r}")
        for field in fields:
            if field.name in env:
                problem = field.problem(env[field.name])
                if problem:
                    raise BusError("bad_envelope", detail=problem)
    return check_env


_CHECKS = {key: _compile(kind) for key, kind in KINDS.items()}


def kind_of(env: Any, direction: str = CLIENT) -> str:
    """The name of the kind of ``direction`` that ``env`` is.

    Raises BusError(bad_envelope) when ``env`` is not a map or its ``k`` is not a
    string, BusError(unknown_kind) when no kind of ``direction`` has that name.
    """
    if env.__class__ is not dict:
        raise BusError("bad_envelope", detail="an envelope must be a map")
    name = env.get("k")
    if name.__class__ is not str:
        raise BusError("bad_envelope", detail="field 'k' must be a string")
    if (direction, name) not in KINDS:
        raise BusError("unknown_kind", kind=name)
    return name


def check(env: dict, kind: str, direction: str = CLIENT) -> None:
    """Check ``env``'s declared fields. Raises BusError(bad_envelope)."""
    _CHECKS[(direction, kind)](env)


def describe() -> str:
    """The protocol as a Markdown summary table (PROTOCOL.md's)."""
    lines = ["Every envelope: `v` (protocol version), `k` (kind); requests also `id` "
             f"(1 to {ID_MAX} characters). A frame holds one envelope or an array of up to "
             f"{MAX_BATCH} (at most {MAX_FRAME_BYTES >> 20} MiB). Undeclared fields are "
             "ignored; a declared one of the wrong type or too long is `bad_envelope`."]
    for direction, kinds in ((CLIENT, CLIENT_KINDS), (BROKER, BROKER_KINDS), (LINK, LINK_KINDS)):
        lines += ["", f"#### {direction}", "", "| kind | fields (* required) | what |",
                  "|---|---|---|"]
        for kind in kinds:
            fields = ", ".join(f"`{f.name}`{'*' if f.required else ''}: {type_name(f)}"
                               for f in kind.fields)
            if kind.request:
                fields = "`id`*: str" + (", " + fields if fields else "")
            if kind.params:
                fields += f", plus the `{kind.params}` tool parameters"
            lines.append(f"| `{kind.name}` | {fields or '-'} | {kind.doc} |")
    return "\n".join(lines) + "\n"


BEGIN, END = "<!-- protocol: generated by python -m schemas.kinds -->", "<!-- protocol end -->"


def with_description(text: str) -> str:
    """``text`` with the part between the BEGIN and END markers replaced by describe()."""
    return replace_section(text, BEGIN, END, describe())


if __name__ == "__main__":
    main(describe, with_description)
