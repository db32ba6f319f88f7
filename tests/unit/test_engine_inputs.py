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
