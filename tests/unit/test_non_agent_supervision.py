"""Non-agent nodes supervise nobody: no child grant, and no supervisor ask reaches them.

A workflow's prompt, tool and ui nodes never receive messages; the supervisor path is
one more way a message could reach a session, so it obeys the same rule.
"""

import pytest

from schemas.protocol import envelope

from .harness import Bus, result_for

STAGES = [
    {"name": "plan"},
    {"name": "lint", "kind": "tool"},
    {"name": "ask-user", "kind": "prompt"},
    {"name": "confirm", "kind": "ui"},
]


def hosted():
    bus = Bus(liveness_s=1e9)
    bus.hello("host")
    assert bus.workflow(b"host", "register_run", runId="r1", stages=STAGES)["ok"]
    return bus


def grant(bus, identity):
    return result_for(bus.feed(identity, envelope("grant", id="g1")), identity, "g1")


@pytest.mark.parametrize("node", ["lint", "ask-user", "confirm"])
def test_a_non_agent_node_connection_gets_no_child_grant(node):
    bus = hosted()
    assert bus.hello(node, sessionKind="stage", stage=f"workflow:r1/{node}")["ok"]

    answer = grant(bus, node.encode())

    assert answer["ok"] is False and answer["code"] == "non_agent_launcher", answer
    assert f"workflow:r1/{node}" in answer["error"]


def test_an_agent_stage_still_gets_a_child_grant():
    bus = hosted()
    bus.hello("plan", sessionKind="stage", stage="workflow:r1/plan")
    assert grant(bus, b"plan")["grant"]


def test_a_child_of_a_session_now_bound_to_a_tool_node_cannot_reach_it_as_supervisor():
    # The one way a non-agent connection could be a parent: it took a child grant as a
    # plain session, then took its id back bound to a tool node.
    bus = hosted()
    plain = bus.hello("launcher")
    child_grant = grant(bus, b"launcher")["grant"]
    bus.feed(b"launcher", envelope("bye"))
    tool = bus.hello("lint", identity=b"lint", sessionKind="stage", stage="workflow:r1/lint",
                     sessionId=plain["sessionId"], token=plain["token"])
    assert tool["reclaimed"] is True and tool["sessionId"] == plain["sessionId"]
    child = bus.hello("child", parent=plain["sessionId"], grant=child_grant)
    assert child["ok"] and child["parent"] == plain["sessionId"]

    out = bus.feed(b"child", envelope("supervisor", id="s1", message="which way?"))

    answer = result_for(out, b"child", "s1")
    assert answer["code"] == "non_agent_target", answer
    assert bus.sends(b"lint", "msg") == []
    assert bus.call(b"child", "pending")["pending"] == []
