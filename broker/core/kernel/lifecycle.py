"""Lifecycle events: what happened to a session or a run, told to every room that cares.

A room that changes something others depend on emits one named event
(:func:`emit`); each room handles it in its own module, and who hears which event is
one table, :data:`broker.core.assembly.dispatch.LIFECYCLE`, installed in
``State.listeners`` where the engine is assembled. So a session leaving is one
``SessionLeft``, not one function reaching into presence, asks, stages, closed stages,
conversations and the cluster in turn. Listeners run in the table's order. Where a
room needs an answer rather than to tell, it asks a hook (:mod:`broker.core.kernel.hooks`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    from broker.core.kernel.state import State


@dataclass(frozen=True, slots=True)
class SessionOpened:
    """``session`` was opened here and welcomed (at ``now``); its stage is bound and
    the runs it hosted are its again."""

    session: Any
    now: float


@dataclass(frozen=True, slots=True)
class SessionLeft:
    """``session`` is out of the registry; it was a member of ``groups``."""

    session: Any
    groups: frozenset[str]


@dataclass(frozen=True, slots=True)
class ControlLeft:
    """The control connection ``session`` is out of the registry (it was never listed:
    only its asks end, and the cluster forgets what it forwarded for it)."""

    session: Any


@dataclass(frozen=True, slots=True)
class SessionChanged:
    """Something other brokers list of ``session`` changed: its groups or status, the
    run it hosts, its conversation's activity or queued jobs."""

    session: Any


@dataclass(frozen=True, slots=True)
class RunChanged:
    """The run ``run_id`` is this broker's, and what other brokers know of it changed:
    it was registered here, or went dormant (sends to its subagents are held here), or
    its host came back (they are not)."""

    run_id: str


@dataclass(frozen=True, slots=True)
class RunClosed:
    """The run ``run_id`` this broker owned ended (its host said end_run)."""

    run_id: str


Event = SessionOpened | SessionLeft | ControlLeft | SessionChanged | RunChanged | RunClosed
Listener = Callable[["State", Any], None]


def emit(state: "State", event: Event) -> None:
    """Tell every listener of ``event``'s type, in the table's order."""
    for listener in state.listeners.get(event.__class__, ()):
        listener(state, event)
