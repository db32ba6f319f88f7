"""Lifecycle events (broker.core.kernel.lifecycle): one table says who hears what, and
no room outside the cluster writes the cluster's change list by hand."""

from __future__ import annotations

import re
from pathlib import Path

from broker.core.assembly import dispatch
from broker.core.kernel import lifecycle
from schemas.protocol import envelope
from tests.unit.harness import Bus

CORE = Path(dispatch.__file__).resolve().parents[1]


def test_every_event_type_has_listeners_from_the_rooms_that_own_them():
    assert set(dispatch.LIFECYCLE) == {lifecycle.SessionOpened, lifecycle.SessionLeft,
                                       lifecycle.ControlLeft, lifecycle.SessionChanged,
                                       lifecycle.RunChanged, lifecycle.RunClosed}
    for listeners in dispatch.LIFECYCLE.values():
        for listener in listeners:
            room = listener.__module__.split(".")[2]
            assert room != "kernel", listener       # each room handles its own


def test_only_the_cluster_records_which_sessions_other_brokers_must_hear_of():
    writers = [p.relative_to(CORE).as_posix() for p in CORE.rglob("*.py")
               if re.search(r"cluster\.changed\[", p.read_text())]
    assert writers == ["cluster/changes.py"]


def test_a_session_leaving_is_one_event_every_listener_hears_in_order():
    bus = Bus()
    bus.hello("alice")
    bus.hello("bob")
    heard = []
    state = bus.engine.state
    state.listeners = {**state.listeners, lifecycle.SessionLeft: tuple(
        (lambda s, e, f=f: (heard.append(f.__module__.rsplit(".", 1)[1]), f(s, e))[1])
        for f in state.listeners[lifecycle.SessionLeft])}
    bus.feed(b"bob", envelope("bye"))
    assert heard == ["presence", "last_seen", "ask_actions", "stage_binding", "closed_stages",
                     "conversations", "remote_conversations", "receipts", "guard", "changes"]
    assert [s.name for s in state.registry.by_id.values()] == ["alice"]
