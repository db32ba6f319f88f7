"""The engine's one entry point (Engine.handle) takes every input type the shell has."""

from __future__ import annotations

import typing

from broker.core import Engine, Limits, Send
from broker.core.assembly import engine as engine_module
from broker.core.kernel import inputs
from schemas.errors import BusError
from schemas.protocol import envelope


def test_every_input_type_has_a_handler_and_nothing_else_does():
    assert set(engine_module._INPUTS) == set(typing.get_args(inputs.Input))


def test_a_frame_a_bad_frame_and_a_tick_through_the_one_entry_point():
    engine = Engine(broker_id="b1")
    out = engine.handle(inputs.Frame(b"alice", [envelope("hello", id="h1", name="alice")], 1.0))
    (welcome,) = [c.env for c in out if isinstance(c, Send)]
    assert welcome["ok"] is True and welcome["re"] == "h1"
    out = engine.handle(inputs.BadFrame(b"alice", BusError("bad_envelope", detail="x")))
    assert [c.env["code"] for c in out if isinstance(c, Send)] == ["bad_envelope"]
    # Past the liveness window with no heartbeat, a tick drops the session.
    engine.handle(inputs.Tick(1.0 + Limits().liveness_s + 60))
    assert len(engine.registry) == 0
    assert engine.stats["sessions.expired"] == 1


def test_silence_is_measured_up_to_what_the_shell_has_read():
    """A heartbeat still queued in the socket counts as heard: a tick whose shell has not
    read past ``heard_until`` expires only sessions silent a liveness window before it,
    and a backlog that never drains holds expiry back by one window at most."""
    liveness = Limits().liveness_s
    engine = Engine(broker_id="b1")
    engine.handle(inputs.Frame(b"alice", [envelope("hello", id="h1", name="alice")], 0.0))
    # Silent for 1.5 windows by the clock, but the shell read nothing after 0.5 s.
    engine.handle(inputs.Tick(1.5 * liveness, heard_until=0.5))
    assert len(engine.registry) == 1 and engine.stats["sessions.expired"] == 0
    # The input drained and nothing of alice's was in it: she is silent.
    engine.handle(inputs.Tick(1.5 * liveness + 0.6, heard_until=1.5 * liveness + 0.6))
    assert len(engine.registry) == 0 and engine.stats["sessions.expired"] == 1
    # Never drained: expiry waits one window more, not for ever.
    engine.handle(inputs.Frame(b"bob", [envelope("hello", id="h2", name="bob")], 10.0))
    engine.handle(inputs.Tick(10.0 + 1.5 * liveness, heard_until=10.0))
    assert len(engine.registry) == 1
    engine.handle(inputs.Tick(10.0 + 2 * liveness + 1, heard_until=10.0))
    assert len(engine.registry) == 0
