"""Which session ids carry something, so the identity table never forgets them.

An id is more than a name: a run's host takes its runs back with it (and with them
every stage grant), a subagent gets the messages held for it, a launcher supervises
the children that name it, an agent's conversation and an invoke job's answer are
found by it, a sticky entry's sender gets its undeliverable notices. Forgetting who
held such an id would let the next claimant of it (with no secret at all, were an
unremembered id granted) take all of that; so while an id holds anything its record
stays in :class:`~broker.core.sessions.identity_table.IdentityTable`, however many other ids
come and go (see :func:`holders`).

Invariant: :func:`holders` names every id the core keeps anything under, from the
indexes of :class:`~broker.core.kernel.state.State`; a new per-id table in the state
belongs in it.
"""

from __future__ import annotations

from broker.core.sessions.identity_table import IdentityRecord
from broker.core.kernel.state import State


def remember(state: State, session_id: str, record: IdentityRecord) -> None:
    """``record`` is who holds ``session_id`` now; the oldest records that hold nothing
    are forgotten past ``Limits.max_identities``."""
    forgotten = state.identities.remember(session_id, record, state.limits.max_identities,
                                          lambda: holders(state))
    if forgotten:
        state.stats["identities.forgotten"] += len(forgotten)


def holders(state: State) -> set[str]:
    """Every id that holds anything: a live session (here or mirrored), the parent of
    a live child, a run's host (now, last, or of ended runs' stages), a subagent
    (with or without held sends), a conversation's session (live or remembered), an
    unfinished invoke job's caller, a queued entry's sender."""
    keep = set(state.registry.by_id)
    keep.update(s.parent_id for s in state.registry.by_id.values() if s.parent_id)
    keep.update(state.hosted)
    keep.update(state.hosted_before)
    keep.update(state.closed)
    for run in state.runs.values():
        keep.update(i for i in (run.host_id, run.last_host_id) if i)
        keep.update(run.subagents)
        keep.update(run.held)
    for channels in state.conversations.by_agent.values():
        keep.update(c.session_id for c in channels.values() if c.session_id)
    keep.update(job.request.partition("/")[0] for job in state.invocations.by_id.values())
    for run_id in list(state.sticky.by_run):
        keep.update(entry.sender_id for entry in state.sticky.entries(run_id))
    return keep
