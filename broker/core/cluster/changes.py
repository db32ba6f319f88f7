"""What the other brokers must hear when a session or a run of this broker changes:
the cluster's listeners of the lifecycle events (broker.core.kernel.lifecycle)."""

from __future__ import annotations

from broker.core.cluster import ownership
from broker.core.kernel.lifecycle import RunClosed, SessionChanged, SessionLeft
from broker.core.kernel.state import State



def session_left(state: State, event: SessionLeft) -> None:
    """Lifecycle listener: a mirror is forgotten, a local session's forwarded requests
    dropped."""
    state.cluster.session_left(event.session)


def session_changed(state: State, event: SessionChanged) -> None:
    """Lifecycle listener: a local session's row goes to the other brokers at the next
    :func:`broker.core.cluster.links.flush` (a mirror's row is its own broker's to tell)."""
    if event.session.broker is None and state.cluster.peers:
        state.cluster.changed[event.session.id] = event.session


def run_closed(state: State, event: RunClosed) -> None:
    """Lifecycle listener: the other brokers hear the run is no longer owned here."""
    ownership.ended(state, event.run_id)
