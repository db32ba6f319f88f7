"""Where a request belongs (broker.core.cluster.placement): decided once, before any
handler runs, from the engines' own state; two engines linked in memory."""

from __future__ import annotations

from broker.core.cluster.placement import Forward, Park, place
from schemas import envelopes
from schemas.protocol import envelope
from tests.unit.harness import Bus
from tests.unit.brokers_in_memory import linked_pair
from tests.unit.test_run_ownership import PLAN, RUN, hosted
from broker.core.kernel import inputs


def session_named(node, name):
    return next(s for s in node.engine.state.registry.by_id.values() if s.name == name)


def call(action, **params):
    return envelope("call", id="c1", action=action, **params)


def test_with_no_other_broker_every_request_is_handled_here():
    bus = Bus()
    bus.hello("alice")
    alice = next(iter(bus.engine.state.registry.by_id.values()))
    for kind, env in [("call", call("send", to="bob", message="x")),
                      ("call", call("ask", to=PLAN, message="x")),
                      ("sends", envelope("sends", to="bob", ids=["a"], messages=["x"])),
                      ("workflow", envelope("workflow", id="w", op="end_run", runId=RUN))]:
        assert place(bus.engine.state, alice, kind, env) is None


def test_a_send_or_ask_to_a_session_of_the_other_broker_goes_to_that_broker():
    pair = linked_pair()
    pair.hello(pair.a, "alice")
    pair.hello(pair.b, "bob")
    state, alice = pair.a.engine.state, session_named(pair.a, "alice")
    bob = session_named(pair.a, "bob").id
    for env in (call("send", to="bob", message="x"), call("ask", to="bob", message="x")):
        assert place(state, alice, "call", env) == Forward("bb", "bob", target_id=bob)
    # A reply stays: its thread is in the replier's own tables.
    assert place(state, alice, "call", call("send", to="bob", message="x", replyTo="m0")) is None
    # A target that does not resolve is refused here, by this broker.
    assert place(state, alice, "call", call("send", to="nobody", message="x")) is None
    # The mirror of bob on broker A forwards nothing: bob's own broker placed it.
    assert place(state, session_named(pair.a, "bob"), "call", call("send", to="alice")) is None


def test_paths_and_host_operations_go_to_the_runs_owner():
    pair = linked_pair()
    hosted(pair)
    state, bob = pair.b.engine.state, session_named(pair.b, "bob")
    assert place(state, bob, "call", call("send", to=PLAN, message="x")) == \
        Forward("ba", PLAN, again=True)
    assert place(state, bob, "sends", envelope("sends", to=PLAN, ids=["a"], messages=["x"])) == \
        Forward("ba", PLAN, again=True)
    assert place(state, bob, "workflow", envelope("workflow", id="w", op="end_run", runId=RUN)) == \
        Forward("ba", f"workflow:{RUN}", again=True)
    # On the owner itself the run is here.
    alice = session_named(pair.a, "alice")
    assert place(pair.a.engine.state, alice, "call", call("send", to=PLAN, message="x")) is None


def test_requests_for_a_dead_brokers_run_are_parked_until_it_is_adopted():
    pair = linked_pair()
    grants = hosted(pair)
    pair.b.engine.handle(inputs.Frame(b"link-ba", [envelopes.link_bye()], pair.b.now))   # A stops
    state, bob = pair.b.engine.state, session_named(pair.b, "bob")
    assert place(state, bob, "call", call("send", to=PLAN, message="x")) == Park(RUN)
    assert place(state, bob, "workflow", envelope("workflow", id="w", op="end_run", runId=RUN)) == Park(RUN)
    hello = envelope("hello", id="h", name="plan", sessionKind="stage", stage=PLAN, grant=grants[PLAN])
    assert place(state, None, "hello", hello) == Park(RUN)
