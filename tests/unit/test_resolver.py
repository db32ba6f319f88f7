"""What a ``to`` names (broker.core.routing.resolver): one precedence for every verb,
typed targets, and one resolution per request when another broker is live."""

from __future__ import annotations

import pytest

from broker.core.routing import resolver
from broker.core.routing.resolver import (ClosedStageHost, HeldSubagent, Mirror,
                                            OrphanRun, RemoteHeld, RemoteRun, RunPath, resolve)
from schemas import envelopes
from schemas.errors import BusError
from schemas.protocol import envelope
from tests.unit.harness import Bus, result_for
from tests.unit.test_closed_stages import ended
from tests.unit.test_held_sends import dormant_run_with_subagent
from tests.unit.brokers_in_memory import linked_pair
from tests.unit.test_run_ownership import PLAN, RUN, hosted
from tests.unit.test_workflow import stage
from broker.core.kernel import inputs


def named(state, name):
    return next(s for s in state.registry.by_id.values() if s.name == name)


def refusal(state, caller, to, verb, **kw) -> str:
    with pytest.raises(BusError) as caught:
        resolve(state, caller, to, verb, **kw)
    return caught.value.code


def test_a_session_is_found_by_id_name_or_prefix_before_anything_else():
    bus = Bus()
    bus.hello("alice")
    bob_id = bus.hello("bob")["sessionId"]
    state = bus.engine.state
    alice, bob = named(state, "alice"), named(state, "bob")
    for to in (bob_id, "bob", "BOB", bob_id[:8]):
        for verb in ("send", "ask"):
            assert resolve(state, alice, to, verb) is bob
    assert refusal(state, alice, "alice", "send") == "self_target"
    assert refusal(state, alice, "nobody", "send") == "target_not_found"
    assert refusal(state, alice, "abc-12", "ask") == "invalid_target"


def test_a_closed_stage_is_reached_through_its_host_and_an_ask_needs_a_late_router():
    for late_router in (True, None):
        bus, planner = ended(late_router)
        state = bus.engine.state
        peer, host = named(state, "peer"), named(state, "host")
        for to in ("workflow:r1/plan", planner):
            found = resolve(state, peer, to, "send")
            assert found.__class__ is ClosedStageHost and found.session is host
            assert found.stage.target == "workflow:r1/plan"
            if late_router:
                assert resolve(state, peer, to, "ask") == found
            else:
                assert refusal(state, peer, to, "ask") == "stage_closed"


def test_a_live_session_wins_over_a_closed_stage_that_names_the_same_id():
    bus = Bus(liveness_s=1e9)
    bus.hello("host")
    bus.workflow(b"host", "register_run", runId="r1", stages=[{"name": "plan"}],
                 lateRouter=True)
    planner = stage(bus, "plan", "workflow:r1/plan")["sessionId"]
    bus.hello("peer")
    bus.call(b"peer", "join", group="workflow:r1")
    assert bus.workflow(b"host", "end_run", runId="r1")["ok"]
    state = bus.engine.state
    peer = named(state, "peer")
    # The stage's last session is still connected: its id names it, not the closed stage.
    assert resolve(state, peer, planner, "send") is state.registry.by_id[planner]
    found = resolve(state, peer, "workflow:r1/plan", "send")
    assert found.__class__ is ClosedStageHost and found.session is named(state, "host")


def test_a_dormant_runs_subagent_is_held_for_a_send_and_refused_to_an_ask():
    bus, _, _, helper, _ = dormant_run_with_subagent()
    state = bus.engine.state
    peer = named(state, "peer")
    for to in ("helper", "atomic-helper", helper["sessionId"]):
        found = resolve(state, peer, to, "send")
        assert found.__class__ is HeldSubagent and found.run.run_id == "r1"
        assert found.sub.session_id == helper["sessionId"]
        assert refusal(state, peer, to, "ask") == "run_dormant"


def test_a_path_is_a_run_here_for_a_send_and_its_live_stage_for_an_ask():
    bus = Bus()
    bus.hello("host")
    bus.workflow(b"host", "register_run", runId="r1", stages=[{"name": "plan"}, {"name": "review"}])
    stage(bus, "plan", "workflow:r1/plan")
    state = bus.engine.state
    host, plan = named(state, "host"), named(state, "plan")
    found = resolve(state, host, "workflow:r1/plan", "send")
    assert found.__class__ is RunPath and found.run is state.runs["r1"]
    assert str(found.path) == "workflow:r1/plan"
    assert resolve(state, host, "workflow:r1/plan", "ask") is plan
    assert refusal(state, host, "workflow:r1/review", "ask") == "pending_stage_ask_unsupported"
    assert refusal(state, host, "workflow:r1/*", "ask") == "pending_stage_ask_unsupported"
    assert refusal(state, host, "workflow:r1//x", "send") == "invalid_path"
    assert refusal(state, host, "workflow:r2/plan", "send") == "workflow_different_group"


def test_placement_alone_weighs_targets_on_other_brokers():
    pair = linked_pair()
    hosted(pair)
    state = pair.b.engine.state
    bob = named(state, "bob")
    alice_mirror = named(state, "alice")
    assert resolve(state, bob, "alice", "send") == Mirror(alice_mirror)
    for verb in ("send", "ask"):
        assert resolve(state, bob, PLAN, verb, placing=True) == RemoteRun("ba")
    # A handler's own resolution: a request that reached it belongs here.
    assert refusal(state, bob, PLAN, "send") == "unknown_run"
    pair.b.engine.handle(inputs.Frame(b"link-ba", [envelopes.link_bye()], pair.b.now))   # A stops
    assert resolve(state, bob, PLAN, "send", placing=True) == OrphanRun(RUN)
    # A malformed path is refused before another broker is asked about it.
    assert refusal(state, bob, "workflow:r-own//", "send", placing=True) == "invalid_path"


def test_a_subagent_another_broker_holds_is_that_brokers_before_one_held_here():
    pair = linked_pair(liveness_s=1e9, host_lease_s=10.0)
    a = pair.a
    pair.hello(a, "host")
    pair.feed(a, b"host", envelope("workflow", id="reg", op="register_run", runId="r1",
                                   stages=[{"name": "plan"}]))
    pair.settle()
    grants = result_for(pair.seen[a], b"host", "reg")["grants"]
    planner = pair.hello(a, "plan", sessionKind="stage", stage="workflow:r1/plan",
                         grant=grants["workflow:r1/plan"])
    pair.feed(a, b"plan", envelope("grant", id="g1"))
    child = result_for(pair.seen[a], b"plan", "g1")["grant"]
    pair.settle()
    pair.hello(a, "helper", parent=planner["sessionId"], grant=child)
    pair.hello(pair.b, "peer", group="workflow:r1")
    for who in (b"helper", b"plan", b"host"):
        pair.feed(a, who, envelope("bye"))
    pair.settle()
    a.now += 11
    pair.deliver(a, a.engine.handle(inputs.Tick(a.now)))        # the host's lease ends: the run is dormant
    pair.settle()
    state = pair.b.engine.state
    peer = named(state, "peer")
    assert resolve(state, peer, "helper", "send", placing=True) == RemoteHeld("ba")
    assert resolve(state, peer, "helper", "ask", placing=True) == RemoteHeld("ba")
    assert refusal(state, peer, "helper", "send") == "target_not_found"    # not placing
    # On the run's own broker the same name is a held subagent.
    assert resolve(a.engine.state, named(a.engine.state, "peer"), "helper", "send").__class__ \
        is HeldSubagent


def counted(monkeypatch) -> list:
    """Every resolution of a name or path from now on: (caller, to, ask, placing)."""
    calls: list = []
    for step in ("_named", "_path"):
        real = getattr(resolver, step)

        def counting(state, caller, to, ask, elsewhere, real=real):
            calls.append((caller.name, to, ask, elsewhere is not None))
            return real(state, caller, to, ask, elsewhere)

        monkeypatch.setattr(resolver, step, counting)
    return calls


def test_with_another_broker_live_a_target_is_resolved_once_per_request(monkeypatch):
    pair = linked_pair()
    pair.hello(pair.a, "alice")
    pair.hello(pair.a, "carol")
    pair.hello(pair.b, "bob")
    calls = counted(monkeypatch)
    a = pair.a
    sent = pair.call(a, b"alice", "send", "m1", to="carol", message="hi")
    assert result_for(sent, b"alice", "m1")["delivered"] is True
    assert calls == [("alice", "carol", False, True)]        # placement's, reused
    calls.clear()
    pair.feed(a, b"alice", envelope("sends", to="carol", ids=["p1", "p2", "p3"],
                                    messages=["a", "b", "c"]))
    assert pair.sent(a, b"carol", "msgs")            # all three, in one delivery
    assert calls == [("alice", "carol", False, True)]
    calls.clear()
    refused = pair.call(a, b"alice", "ask", "q1", to="nobody", message="?")
    assert result_for(refused, b"alice", "q1")["code"] == "target_not_found"
    assert calls == [("alice", "nobody", True, True)]        # the refusal is reused too
    calls.clear()
    forwarded = pair.call(a, b"alice", "send", "m2", to="bob", message="over there")
    assert result_for(forwarded, b"alice", "m2")["delivered"] is True
    # Once on A (placement forwarded it) and once on B, where bob is.
    assert calls == [("alice", "bob", False, True), ("alice", "bob", False, False)]
    assert pair.a.engine.state.resolved is None and pair.b.engine.state.resolved is None


def test_with_no_other_broker_placement_resolves_nothing(monkeypatch):
    bus = Bus()
    bus.hello("alice")
    bus.hello("carol")
    calls = counted(monkeypatch)
    assert bus.call(b"alice", "send", to="carol", message="hi")["delivered"] is True
    assert calls == [("alice", "carol", False, False)]
