"""The protocol is declared once: handlers and builders follow the declaration (and the
documents generated from it, tests/unit/test_docs.py)."""

from __future__ import annotations

import pytest

from broker.core.assembly.dispatch import ACTIONS, KINDS as HANDLED, WORKFLOW_OPS
from schemas import envelopes, kinds
from schemas.errors import BusError
from schemas.names import WORKFLOW_OPS as WORKFLOW_OP_NAMES
from schemas.tools import INTERCOM_ACTIONS


def _check_broker(env: dict) -> None:
    kinds.check(env, env["k"], kinds.BROKER)


def test_every_client_kind_is_handled_and_every_handled_kind_is_declared():
    assert {"hello", *HANDLED} == kinds.CLIENT_KIND_NAMES


def test_every_intercom_action_and_workflow_op_has_one_handler():
    assert set(ACTIONS) == set(INTERCOM_ACTIONS)
    assert set(WORKFLOW_OPS) == set(WORKFLOW_OP_NAMES)


@pytest.mark.parametrize("env", [
    envelopes.result("r1", {"delivered": True}),
    envelopes.error_result("r1", BusError("self_target")),
    envelopes.error_result(None, BusError("malformed_frame")),
    envelopes.msg("m1", "s1", "alice", "hi", [], 1.5),
    envelopes.msg("m1", "s1", "alice", "hi", [], 1.5, True, {"timeoutS": 600.0, "supervisor": True}),
    envelopes.msg("m1", "s1", "alice", "hi", [], 1.5, extra={"replyTo": "m0", "target": "workflow:r/a",
                                                             "ackRequired": True,
                                                             "receivedBeforeStart": True}),
    envelopes.msgs("s1", "alice", 1.5, ["m1", "m2"], ["a", "b"]),
    envelopes.acks(["m1"]),
    envelopes.presence("session_joined", {"id": "s1"}),
    envelopes.presence("presence_update", {"id": "s1"}, "default"),
    envelopes.event("undeliverable", messageId="m1", runId="r", target="workflow:r/a", reason="x"),
    envelopes.heartbeat(),
])
def test_every_builder_makes_an_envelope_its_declaration_accepts(env):
    assert env["v"] == 1 and env["k"] in kinds.BROKER_KIND_NAMES
    _check_broker(env)


def test_an_optional_msg_field_outside_the_declaration_is_caught():
    env = envelopes.msg("m1", "s1", "alice", "hi", [], 1.5, extra={"replyTo": 5})
    with pytest.raises(BusError):
        _check_broker(env)


def test_a_missing_required_field_is_a_bad_envelope():
    with pytest.raises(BusError) as caught:
        kinds.check({"v": 1, "k": "received"}, "received")
    assert caught.value.code == "bad_envelope"
