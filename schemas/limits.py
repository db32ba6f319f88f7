"""Numbers the bus promises. Durations are seconds (``*_s``)."""

PROTOCOL_VERSION = 1

MAX_FRAME_BYTES = 1 << 20          # one ZeroMQ frame to the broker, before decoding
MAX_INBOUND_FRAME_BYTES = 4 << 20  # one frame from the broker (a delivery adds a header)
MAX_BATCH = 512                    # envelopes in one frame
MAX_SEND_ITEMS = 1024              # messages in one ``sends`` envelope
MAX_MESSAGE_CHARS = 256 * 1024     # message text
MAX_ATTACHMENTS = 32
MAX_ATTACHMENT_CHARS = 256 * 1024  # one attachment's content
MAX_NAME_CHARS = 128               # session names, agent ids
MAX_GROUP_CHARS = 128
MAX_TARGET_CHARS = 512
MAX_PREVIEW_CHARS = 80             # pending-ask preview
MAX_CWD_CHARS = 4096               # a session's working directory (PATH_MAX on Linux)
STATS_TOP_DEFAULT = 10             # rows of each largest-first list in a ``stats`` answer
STATS_TOP_MAX = 100                # ... and the most a caller may ask for

PREFIX_LEN = 8                     # unique hex prefix of a UUID session id

QUEUED_PER_TARGET = 50
MAX_PENDING_ASKS = 6
MAX_WAITED_BY = 64                 # an ask's asker's waiters told to another broker (ask_cycle)
ASK_TIMEOUT_S = 600.0
MAX_ASK_TIMEOUT_S = 86_400.0       # per-call or configured ask timeouts are capped here
LEASE_S = 120.0
LEASE_RENEW_S = 30.0
CHILD_GRANT_S = 120.0              # a child grant admits its one child this long after issue
USED_GRANTS_KEPT = 65_536          # used child grants a broker remembers (see core.grants)
INVOKE_RECHECK_S = 1.0             # a busy invoke destination is checked again this often
ALT_TEXT_CHARS = 1024              # an image attachment's altText (respond)
MAX_CHANNEL_CHARS = 512            # a channel id: <platform>:<rest>
MAX_AGENT_CHARS = 128              # an agent name (it becomes a directory name)
MAX_REASON_CHARS = 4096            # an invoke reason
MAX_QUEUED_INVOCATIONS = 100       # unstarted invoke jobs per destination conversation
MAX_RECOVERY_DRAFTS = 64           # drafts one response_recovery row keeps

# Resends (PROTOCOL.md): a broker remembers the newest message ids, each with its sender,
# a fingerprint of the message and its answer, so a resend is answered once; between
# half and all of this many are remembered. A client drops a message it already handed
# out, remembering between half and all of the last RECEIVED_IDS_KEPT.
REMEMBERED_MESSAGE_IDS = 200_000
RECEIVED_IDS_KEPT = 4096

HEARTBEAT_S = 1.0                  # client sends a heartbeat this often when idle
LIVENESS_S = 3.0                   # a session silent this long is gone (--liveness-s)
MIN_LIVENESS_S = 0.5               # the shortest liveness window a broker takes or a client keeps
# How long a dead broker's runs wait for their host (or a stage) to fail over to some
# broker, which then adopts them, before any broker does (--adopt-grace-s): a client
# moves within a few seconds of its broker's death (its liveness window and one
# failover step).
ADOPT_GRACE_S = 10.0
ADOPT_RETRY_S = 5.0                # an adoption not answered this long is asked again
# Receipts (PROTOCOL.md "Receipts"): a live message is kept until its receiver's client
# has it (``seen`` for a session that asks so); a session that ends keeps its unacknowledged
# messages this long for a client that takes its id back (--reclaim-window-s), and only
# then are they reported undelivered. A broker answers receipts for between half and all
# of the last RECEIPTS_KEPT messages it delivered, none older than RECEIPT_KEEP_S.
RECLAIM_WINDOW_S = 60.0
RECEIPTS_KEPT = 65_536
RECEIPT_KEEP_S = 3_600.0
MAX_KEPT_BYTES = 64 << 20          # kept messages of sessions that ended, broker-wide
READ_TRACKED = 1024                # read, not yet seen deliveries followed per session
ACK_DELAY_S = 0.25                 # a client reports what it read or showed this soon
CALL_TIMEOUT_S = 10.0              # client waits this long for a non-ask answer
WAIT_TIMEOUT_S = 60.0              # the MCP server's wait tool: default timeout_s
MAX_WAIT_TIMEOUT_S = 300.0         # ... and its largest

# What one client may make the broker hold (each is a flag and a config field; the
# limits table of docs/operations.md is generated from schemas.bounds).
MAX_SESSIONS = 4096                # live sessions, broker-wide
MAX_SESSIONS_PER_CONNECTION = 1024 # live sessions from one peer (process, key; connection on TCP)
MAX_NEW_SESSIONS_PER_SECOND = 100  # sessions one peer (or connection) opens a second, past a burst
NEW_SESSION_BURST = 1024           # ... opened at once by one peer before that rate applies
CONNECTION_NEW_SESSION_BURST = 8   # ... by one connection (it holds one session at a time)
MAX_IDENTITIES = 200_000           # ids whose last holder a broker remembers in memory
MAX_BACKLOG_BYTES = 8 << 20        # bytes sent to one session and not yet read by it
MAX_RUNS_PER_SESSION = 64          # workflow runs one session hosts
MAX_RUN_ENTRIES = 10_000            # sticky entries kept for one run
MAX_RUN_BYTES = 32 << 20           # sticky bytes kept for one run
MAX_STICKY_BYTES = 256 << 20       # sticky bytes kept, broker-wide
MAX_GROUPS = 256                   # memberships of one session
MAX_CONVERSATIONS = 10_000         # conversations (live or remembered) of one agent


def heartbeat_s(liveness_s: float) -> float:
    """How often a peer says it is alive when it has nothing else to say, given the
    liveness window it is judged by: three times within the window, at least every
    :data:`HEARTBEAT_S`. Clients learn the window from the welcome (``livenessS``),
    brokers from their own setting."""
    return min(HEARTBEAT_S, liveness_s / 3)
