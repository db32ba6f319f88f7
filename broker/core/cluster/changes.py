"""What the other brokers must hear when a session or a run of this broker changes:
the cluster's listeners of the lifecycle events (broker.core.kernel.lifecycle)."""

from __future__ import annotations

from broker.core.cluster import ownership
from broker.core.kernel.lifecycle import (RunChanged, RunClosed, SessionChanged, SessionLeft,
                                          SessionOpened)
from broker.core.kernel.state import State


def session_opened(state: State, event: SessionOpened) -> None:
    """Lifecycle listener: a session that hosted a dead broker's run has its runs
    adopted now, so runs follow their host (broker.core.cluster.ownership.arrived)."""
    if state.cluster.orphans:
        ownership.arrived(state, event.session.id, event.now)


def session_left(state: State, event: SessionLeft) -> None:
    """Lifecycle listener: a mirror is forgotten, a local session's forwarded requests
    dropped."""
    state.cluster.session_left(event.session)


def session_changed(state: State, event: SessionChanged) -> None:
    """Lifecycle listener: a local session's row goes to the other brokers at the next
    :func:`broker.core.cluster.links.flush` (a mirror's row is its own broker's to tell)."""
    if event.session.broker is None and state.cluster.peers:
        state.cluster.changed[event.session.id] = event.session


def run_changed(state: State, event: RunChanged) -> None:
    """Lifecycle listener: the other brokers hear this broker owns the run, with its
    dormant subagents."""
    ownership.registered(state, event.run_id)


def run_closed(state: State, event: RunClosed) -> None:
    """Lifecycle listener: the other brokers hear the run is no longer owned here."""
    ownership.ended(state, event.run_id)
