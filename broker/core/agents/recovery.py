"""recovery: the latest rejected-output turn of a persistent conversation.

The client reports a turn whose drafts were not all delivered (outcome ``pending``)
and again when it ends (``recovered`` or ``failed``); each report replaces the row of
that (agent, channel) in the store's ``response_recovery`` table. The rows are never
read back through any session-facing call: they hold the agent's exact undelivered
output, for operators only.

Invariants: an ephemeral conversation keeps no row (its report is answered ok and
dropped); a persistent one is answered only once its row is committed.
"""

from __future__ import annotations

from schemas.errors import BusError
from schemas.limits import MAX_MESSAGE_CHARS, MAX_RECOVERY_DRAFTS
from schemas.names import DRAFT_COMPLETIONS, DRAFT_OUTCOMES, RECOVERY_OUTCOMES

from broker.core.agents.invoke_actions import caller_conversation, tell
from broker.core.kernel.records import RecoverySaved
from broker.core.sessions.registry import Session
from broker.core.kernel.state import State

_DRAFT_KEYS = {"id": None, "text": None, "completion": DRAFT_COMPLETIONS, "outcome": DRAFT_OUTCOMES}


def recovery(state: State, session: Session, env: dict, re: str, now: float) -> None:
    """Raises BusError(no_agent | invalid_params)."""
    conversation = caller_conversation(state, session, "recovery")
    outcome = env["outcome"]
    if outcome not in RECOVERY_OUTCOMES:
        raise BusError("invalid_params", detail=f"outcome must be one of {', '.join(RECOVERY_OUTCOMES)}")
    if len(env["drafts"]) > MAX_RECOVERY_DRAFTS:
        raise BusError("invalid_params", detail=f"at most {MAX_RECOVERY_DRAFTS} drafts")
    drafts = [_draft(i, d) for i, d in enumerate(env["drafts"])]
    if not conversation.persistent:
        state.answer(session, re, {})
        return
    state.persist(RecoverySaved(conversation.agent, conversation.channel, env["turn"], drafts,
                                outcome, state.wall),
                  lambda at: tell(state, session, re, {}),
                  lambda at, error: tell(state, session, re, error))


def _draft(index: int, draft: object) -> dict[str, str]:
    """One draft as kept. Raises BusError(invalid_params)."""
    if not isinstance(draft, dict) or set(draft) != set(_DRAFT_KEYS):
        raise BusError("invalid_params", detail=f"draft {index} must have exactly "
                       f"{', '.join(_DRAFT_KEYS)}")
    for key, allowed in _DRAFT_KEYS.items():
        value = draft[key]
        if not isinstance(value, str) or (allowed is not None and value not in allowed) or \
                len(value) > MAX_MESSAGE_CHARS:
            expects = "one of " + ", ".join(allowed) if allowed else "a string"
            raise BusError("invalid_params", detail=f"draft {index} {key} must be {expects}")
    return dict(draft)
