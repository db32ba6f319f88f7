"""Names both sides use: session kinds, workflow vocabulary, event names.

Defined once here so no module retypes a string another one matches against.
"""

from __future__ import annotations

from .groups import DEFAULT_GROUP, WORKFLOW_PREFIX

# ``control``: a look at the bus and one-shot sends (a CLI call), never listed, never a
# target, never a conversation; see broker.core.sessions.control.
SESSION_KINDS = ("interactive", "noninteractive", "stage", "control")
INTERACTIVE, NONINTERACTIVE, STAGE, CONTROL = SESSION_KINDS
CONTROL_ACTIONS = ("list", "groups", "status", "send", "ask")   # a control connection's own calls
# ... and the calls it makes for the live session it acts for (hello ``actFor``).
ACTING_ACTIONS = ("reply", "pending", "join", "leave")

LIVE, TERMINAL = "live", "terminal"                 # reply capability
REPLY_CAPABILITIES = (LIVE, TERMINAL)
IDLE, THINKING, TOOL_PREFIX = "idle", "thinking", "tool:"
TERMINAL_CHILD_STATUSES = frozenset({"completed", "failed", "interrupted", "cancelled"})

SESSION_JOINED, SESSION_LEFT, PRESENCE_UPDATE = "session_joined", "session_left", "presence_update"
PRESENCE_EVENTS = (SESSION_JOINED, SESSION_LEFT, PRESENCE_UPDATE)
UNDELIVERABLE = "undeliverable"
# To a session whose memberships a control connection acting for it changed.
MEMBERSHIPS_CHANGED = "memberships_changed"

# Workflow stage nodes and their lifecycle.
AGENT = "agent"
NON_AGENT_KINDS = frozenset({"prompt", "tool", "ui"})
PENDING, RUNNING = "PENDING", "RUNNING"
TERMINAL_STATES = frozenset({"completed", "failed", "skipped"})
STAGE_STATES = frozenset({PENDING, RUNNING}) | TERMINAL_STATES
AUTO_GROUPS = ("true", "auto")                      # a stage's own namespaced subgroup

# One hand-over of a sticky entry to a stage transcript, and what list reports.
SENT, ACKED = "sent", "acked"

WORKFLOW_OPS = ("register_run", "add_stages", "stage_state", "end_run", "revoke_stage",
                "take_over")

# respond / invoke: channel ids are ``<platform>:<rest>``; aliases a caller may name.
CHANNEL_PLATFORMS = ("discord", "remote", "internal")
DISCORD, REMOTE, INTERNAL = CHANNEL_PLATFORMS
ATTACHMENT_PLATFORMS = frozenset({DISCORD})         # platforms that carry attachments
CURRENT, LAST, OWNER = "current", "last", "owner"
CHANNEL_ALIASES = (CURRENT, LAST, OWNER)
OUTPUT, INVOCATION = "output", "invocation"         # event names
# An invoke job's life (broker.core.agents.invocation_table) and a recovery row's outcomes.
QUEUED, STARTED, DONE, FAILED = "queued", "started", "done", "failed"
INVOCATION_STATES = (QUEUED, STARTED, DONE, FAILED)
DRAFT_COMPLETIONS = ("complete", "incomplete", "unknown")
DRAFT_OUTCOMES = ("pending", "delivered", "replaced", "declined")
RECOVERY_OUTCOMES = ("pending", "recovered", "failed")
CHANNEL_TOPIC_PREFIX = "channel:"


def channel_topic(channel: str) -> str:
    """The PUB topic outputs to ``channel`` are published under."""
    return CHANNEL_TOPIC_PREFIX + channel


def run_group(run_id: str) -> str:
    """The invocation group of a run."""
    return WORKFLOW_PREFIX + run_id


def run_of_group(group: str) -> tuple[str, bool] | None:
    """For ``workflow:R`` → (R, False); for a subgroup ``workflow:R/x`` → (R, True);
    anything else → None."""
    if not group.startswith(WORKFLOW_PREFIX):
        return None
    if "/" not in group:
        return group[len(WORKFLOW_PREFIX):], False
    run_id, slash, _ = group[len(WORKFLOW_PREFIX):].partition("/")
    return run_id, bool(slash)


__all__ = [name for name in dir() if not name.startswith("_")] + ["DEFAULT_GROUP", "WORKFLOW_PREFIX"]
