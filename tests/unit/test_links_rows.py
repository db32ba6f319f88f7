"""What a session on the other broker looks like here: the same ``list`` row as on
its own broker (two engines on one store, see tests/unit/brokers_in_memory.py)."""

from __future__ import annotations

from tests.unit.harness import result_for
from tests.unit.brokers_in_memory import hosted_pair, linked_pair


def rows_by_name(pair, node, identity: bytes, msg_id: str) -> dict[str, dict]:
    rows = result_for(pair.call(node, identity, "list", msg_id), identity, msg_id)["sessions"]
    return {row["name"]: row for row in rows}


def test_a_stage_session_on_the_other_broker_lists_with_its_stage_as_on_its_own_broker():
    pair, grant = hosted_pair()
    pair.hello(pair.a, "plan", sessionKind="stage", stage="workflow:r1/plan", grant=grant,
               transcript="t-plan")
    here = rows_by_name(pair, pair.a, b"host", "l1")["plan"]
    there = rows_by_name(pair, pair.b, b"bob", "l2")["plan"]
    assert here["stage"] == "workflow:r1/plan"
    assert there == here


def test_a_plain_session_on_the_other_broker_lists_as_on_its_own_broker():
    pair = linked_pair()
    pair.hello(pair.a, "alice")
    pair.hello(pair.a, "carol")
    pair.hello(pair.b, "bob")
    pair.call(pair.a, b"alice", "join", "j1", group="review")
    here = rows_by_name(pair, pair.a, b"carol", "l1")["alice"]
    there = rows_by_name(pair, pair.b, b"bob", "l2")["alice"]
    assert "stage" not in there and there == here
