"""A run another broker owns, in a ``list`` here (broker.core.cluster.remote_listing): two
engines on one store, their links wired in memory (the Pair of tests/unit/brokers_in_memory.py)."""

from __future__ import annotations

from broker.core.kernel.commands import LinkSend
from broker.core.cluster.remote_listing import LIST_WAIT_S, MAX_LISTS_WAITING
from schemas import envelopes
from schemas.protocol import envelope
from tests.unit.harness import result_for
from tests.unit.brokers_in_memory import linked_pair

from .test_run_ownership import PLAN, RUN, bob_sends, hosted
from broker.core.kernel import inputs


def listed(pair, node, identity: bytes, msg_id: str) -> dict:
    """A list, answered once the other broker's rows came back over the link."""
    seen = pair.call(node, identity, "list", msg_id)
    return result_for(seen, identity, msg_id)


def member_on_a(pair) -> None:
    pair.hello(pair.a, "carol", group=f"workflow:{RUN}")


def test_a_member_on_another_broker_lists_the_run_as_on_its_own_broker():
    pair = linked_pair()
    hosted(pair)
    member_on_a(pair)
    assert bob_sends(pair, "m1", "sticky")["queued"] is True
    here = listed(pair, pair.b, b"bob", "l-b")["workflows"]
    there = listed(pair, pair.a, b"carol", "l-a")["workflows"]
    assert here == there
    (run,) = here
    plan = next(s for s in run["stages"] if s["name"] == "plan")
    assert (run["runId"], plan["queued"], plan["label"]) == (RUN, 1, "PENDING")
    assert [(s["messageId"], s["state"]) for s in plan["deliveryStates"]] == [("m1", "queued")]
    assert pair.b.engine.cluster.listing == {}


def test_a_list_with_no_other_brokers_run_asks_nobody():
    pair = linked_pair()
    hosted(pair)
    pair.hello(pair.b, "dave")
    seen = pair.call(pair.b, b"dave", "list", "l1")
    assert not [c for c in seen if isinstance(c, LinkSend) and
                any(env["k"] == "link_list" for env in c.envs)]
    assert "workflows" not in result_for(seen, b"dave", "l1")


def test_a_list_whose_owner_does_not_answer_is_answered_after_the_bound_with_a_marker():
    pair = linked_pair()
    hosted(pair)
    # The question leaves, but broker A never answers it.
    out = pair.b.engine.handle(inputs.Frame(b"bob", [envelope("call", id="l1", action="list")], pair.b.now))
    assert [env["k"] for c in out if isinstance(c, LinkSend) for env in c.envs] == ["link_list"]
    assert not [c for c in out if getattr(c, "env", {}).get("k") == "result"]
    assert pair.b.engine.next_deadline() <= pair.b.now + LIST_WAIT_S
    answer = result_for(pair.b.advance(LIST_WAIT_S), b"bob", "l1")
    (row,) = answer["workflows"]
    assert (row["runId"], row["state"], row["owner"]) == (RUN, "root-unresolved", "ba")
    assert row["diagnostic"] == f"run {RUN}: broker ba that owns it did not answer within 1 s"
    assert pair.b.engine.cluster.listing == {}


def test_a_late_answer_after_the_bound_changes_nothing():
    pair = linked_pair()
    hosted(pair)
    out = pair.b.engine.handle(inputs.Frame(b"bob", [envelope("call", id="l1", action="list")], pair.b.now))
    (question,) = [env for c in out if isinstance(c, LinkSend) for env in c.envs]
    pair.b.advance(LIST_WAIT_S)
    late = pair.b.engine.handle(inputs.Frame(b"link-ba", [envelopes.link_listed(
        question["from"], question["token"], [{"runId": RUN}])], pair.b.now))
    assert not [c for c in late if getattr(c, "env", {}).get("k") == "result"]
    assert pair.b.engine.stats["list.late_rows"] == 1


def test_a_list_waiting_on_a_broker_that_goes_is_answered_at_once_with_a_marker():
    pair = linked_pair()
    hosted(pair)
    pair.b.engine.handle(inputs.Frame(b"bob", [envelope("call", id="l1", action="list")], pair.b.now))
    gone = pair.b.engine.handle(inputs.Frame(b"link-ba", [envelopes.link_bye()], pair.b.now))
    (row,) = result_for(gone, b"bob", "l1")["workflows"]
    assert row["state"] == "root-unresolved"
    assert "broker ba that owns it went away before answering" in row["diagnostic"]


def test_a_run_of_a_dead_broker_not_adopted_yet_is_listed_at_once_as_unresolved():
    pair = linked_pair()
    hosted(pair)
    pair.b.engine.handle(inputs.Frame(b"link-ba", [envelopes.link_bye()], pair.b.now))
    seen = pair.call(pair.b, b"bob", "list", "l1")
    (row,) = result_for(seen, b"bob", "l1")["workflows"]
    assert (row["runId"], row["state"]) == (RUN, "root-unresolved")
    assert row["diagnostic"] == (f"run {RUN}: broker ba that owned it is gone and no broker "
                                 "has taken it over yet")


def test_lists_past_the_waiting_bound_are_answered_at_once_without_asking():
    pair = linked_pair()
    hosted(pair)
    for n in range(MAX_LISTS_WAITING):
        pair.b.engine.handle(inputs.Frame(b"bob", [envelope("call", id=f"l{n}", action="list")], pair.b.now))
    out = pair.b.engine.handle(inputs.Frame(b"bob", [envelope("call", id="extra", action="list")], pair.b.now))
    assert not [c for c in out if isinstance(c, LinkSend)]
    (row,) = result_for(out, b"bob", "extra")["workflows"]
    assert row["state"] == "root-unresolved" and "not asked" in row["diagnostic"]


def test_the_runs_of_both_brokers_are_listed_in_membership_order():
    pair = linked_pair()
    hosted(pair)
    pair.feed(pair.b, b"bob", envelope("workflow", id="reg", op="register_run", runId="r-b",
                                       stages=[{"name": "solo"}]))
    pair.settle()
    rows = listed(pair, pair.b, b"bob", "l1")["workflows"]
    assert [r["runId"] for r in rows] == [RUN, "r-b"]       # bob joined RUN's group first


def test_a_stage_on_another_broker_neither_lists_nor_steers_a_run_it_joined():
    pair = linked_pair()
    hosted(pair)
    pair.hello(pair.b, "boss")
    pair.feed(pair.b, b"boss", envelope("workflow", id="reg", op="register_run", runId="r-b",
                                        stages=[{"name": "solo"}]))
    pair.settle()
    grant = result_for(pair.seen[pair.b], b"boss", "reg")["grants"]["workflow:r-b/solo"]
    welcome = pair.hello(pair.b, "solo", sessionKind="stage", stage="workflow:r-b/solo", grant=grant)
    assert welcome["ok"] is True, welcome
    pair.call(pair.b, b"solo", "join", "j1", group=f"workflow:{RUN}")
    # Its own run only, as on one broker: the run's broker sees a stage in its mirror.
    assert [r["runId"] for r in listed(pair, pair.b, b"solo", "l1").get("workflows", [])] == ["r-b"]
    refused = result_for(pair.call(pair.b, b"solo", "send", "s1", to=PLAN, message="steer"),
                         b"solo", "s1")
    assert refused["code"] == "workflow_different_group"
