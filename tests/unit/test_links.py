"""Two engines on one store, their links wired in memory (see
:mod:`tests.unit.brokers_in_memory`): brokers as one bus."""

from __future__ import annotations

from broker.core.kernel.commands import LinkSend
from broker.core.kernel.records import LeaseRenewed
from schemas.protocol import envelope
from tests.unit.brokers_in_memory import Node, Pair, hosted_pair, linked_pair
from broker.core import Send
from tests.unit.harness import result_for, uuid_from
from broker.core.kernel import inputs


def test_the_other_brokers_sessions_are_listed_and_announced_in_band():
    pair = linked_pair()
    pair.hello(pair.a, "alice")
    pair.hello(pair.b, "bob")
    assert [e["session"]["name"] for e in pair.sent(pair.a, b"alice", "event")] == ["bob"]
    rows = result_for(pair.call(pair.a, b"alice", "list", "l1"), b"alice", "l1")["sessions"]
    assert [(r["name"], r["id"]) for r in rows] == [("bob", uuid_from(0xB0000001))]
    status = result_for(pair.call(pair.a, b"alice", "status", "s1"), b"alice", "s1")
    assert (status["broker"]["otherBrokersLive"], status["visibleSessions"]) == (1, 1)


def test_a_send_to_a_session_on_the_other_broker_is_answered_by_that_broker():
    pair = linked_pair()
    pair.hello(pair.a, "alice")
    pair.hello(pair.b, "bob")
    out = pair.call(pair.a, b"alice", "send", "m1", to="bob", message="hi")
    forwarded = [c for c in out if isinstance(c, LinkSend)]
    assert [env["k"] for c in forwarded for env in c.envs] == ["forward"]
    (delivered,) = pair.sent(pair.b, b"bob", "msg")
    assert (delivered["id"], delivered["message"], delivered["from"]) == ("m1", "hi", uuid_from(0xA0000001))
    assert result_for(pair.seen[pair.a], b"alice", "m1")["delivered"] is True
    assert pair.a.engine.cluster.forwarded == {}


def test_presence_for_the_other_brokers_sessions_is_told_once_by_each_broker():
    pair = linked_pair()
    pair.hello(pair.a, "alice")
    pair.hello(pair.b, "bob")
    pair.call(pair.a, b"alice", "join", "j1", group="extra")
    pair.call(pair.b, b"bob", "join", "j2", group="extra")
    updates = [e["event"] for e in pair.sent(pair.a, b"alice", "event")]
    assert updates == ["presence_update"]     # from broker A, none relayed from B


def test_an_ask_waiting_on_a_broker_that_goes_silent_fails_unreachable_and_its_sessions_stay():
    pair = linked_pair()
    pair.hello(pair.a, "alice")
    pair.hello(pair.b, "bob")
    pair.call(pair.a, b"alice", "ask", "q1", to="bob", message="there?")
    assert pair.sent(pair.b, b"bob", "msg")[0]["expectsReply"] is True
    half = pair.a.engine.state.limits.liveness_s * 0.6
    pair.a.advance(half)
    pair.a.feed(b"alice", envelope("hb"))          # alice lives on; B says nothing more
    out = pair.a.advance(half)
    pair.seen[pair.a] = out
    error = result_for(out, b"alice", "q1")
    assert (error["ok"], error["code"]) == (False, "broker_unreachable")
    # Its lease, not its link, says whether it lives: nothing of it is forgotten.
    assert pair.sent(pair.a, b"alice", "event") == []
    assert pair.a.engine.cluster.peers["bb"].silent
    answer = result_for(pair.call(pair.a, b"alice", "ask", "q2", to="bob", message="?"),
                        b"alice", "q2")
    assert (answer["ok"], answer["code"]) == (False, "broker_unreachable")    # at once


def test_the_other_brokers_sessions_stay_while_its_link_lives_past_the_liveness_window():
    pair = linked_pair()
    pair.hello(pair.a, "alice")
    pair.hello(pair.b, "bob")
    for _ in range(5):                           # 5 liveness windows of heartbeats
        for node, name in ((pair.a, b"alice"), (pair.b, b"bob")):
            node.now += node.engine.state.limits.liveness_s / 2
            pair.deliver(node, node.engine.handle(inputs.Tick(node.now)))
            pair.deliver(node, node.engine.handle(inputs.Frame(name, [envelope("hb")], node.now)))
    rows = result_for(pair.call(pair.a, b"alice", "list", "l1"), b"alice", "l1")["sessions"]
    assert [r["name"] for r in rows] == ["bob"]


def beat(pair: Pair, step: float, times: int, nodes: tuple | None = None) -> None:
    """``times`` steps of ``step`` seconds on the fake clock: each node in ``nodes``
    (default both) runs its timers, and its one session, named after it, heartbeats."""
    for _ in range(times):
        for node in nodes or (pair.a, pair.b):
            node.now += step
            pair.deliver(node, node.engine.handle(inputs.Tick(node.now)))
            name = b"alice" if node is pair.a else b"bob"
            pair.deliver(node, node.engine.handle(inputs.Frame(name, [envelope("hb")], node.now)))


def test_with_a_short_liveness_window_links_heartbeat_every_third_of_it_and_stay():
    pair = linked_pair(liveness_s=0.6)
    pair.hello(pair.a, "alice")
    pair.hello(pair.b, "bob")
    beat(pair, 0.1, 30)                          # 5 windows; a 1 s heartbeat would miss them
    beats = [c for c in pair.seen[pair.b] if isinstance(c, LinkSend)
             and any(env["k"] == "link_hb" for env in c.envs)]
    assert beats
    rows = result_for(pair.call(pair.a, b"alice", "list", "l1"), b"alice", "l1")["sessions"]
    assert [r["name"] for r in rows] == ["bob"]
    pair.seen[pair.a] = []
    pair.kill(pair.b)
    beat(pair, 0.1, 7, nodes=(pair.a,))          # B falls silent past the window
    assert pair.a.engine.cluster.peers["bb"].silent
    assert pair.sent(pair.a, b"alice", "event") == []    # unreachable, not gone


def test_a_link_hello_without_the_databases_proof_is_ignored():
    pair = Pair()
    pair.hello(pair.a, "alice")
    forged = envelope("link", broker="evil", proof="l1.0000", endpoint="ipc:///x", until=1e12,
                      sessions=[{"id": uuid_from(0xE0000001), "name": "mallory", "groups": ["default"]}])
    pair.a.engine.handle(inputs.Frame(b"intruder", [forged], pair.a.now))
    assert pair.a.engine.cluster.peers == {}
    assert result_for(pair.call(pair.a, b"alice", "list", "l1"), b"alice", "l1")["sessions"] == []


def test_a_link_frame_whose_next_envelope_has_a_list_or_map_kind_is_a_bad_envelope():
    pair = Pair()
    forged = envelope("link", broker="evil", proof="l1.0000", endpoint="ipc:///x", until=1e12,
                      sessions=[])
    engine = pair.a.engine
    for kind in (["link_hb"], {"link_hb": 1}, 5):
        engine.handle(inputs.Frame(b"intruder", [forged, {"v": 1, "k": kind, "until": 1e12}], pair.a.now))
    assert engine.stats["internal_error"] == 0 and engine.internal_errors == []
    assert engine.stats["link.refused.bad_envelope"] == 3


def test_reclaiming_an_id_that_a_session_on_the_other_broker_holds_opens_a_fresh_one():
    pair = linked_pair()
    first = pair.hello(pair.a, "twin")
    welcome = pair.hello(pair.b, "copy", sessionId=first["sessionId"], token=first["token"])
    assert (welcome["reclaimed"], welcome["sessionId"] != first["sessionId"]) == (False, True)
    assert "another broker" in welcome["reason"]
    assert pair.store.claims()[first["sessionId"]] == "ba"


def test_the_first_of_two_claims_committed_wins_and_the_other_opens_a_fresh_id():
    pair = linked_pair()
    first = pair.hello(pair.a, "twin")
    pair.feed(pair.a, b"twin", envelope("bye", id="bye"))
    pair.settle()
    hello = dict(name="twin", sessionId=first["sessionId"], token=first["token"])
    # Both hellos are in before either claim commits: each waits for its own.
    pair.a.last = pair.a._track(pair.a.engine.handle(inputs.Frame(b"t1", [envelope("hello", id="h1", **hello)], pair.a.now)))
    pair.b.last = pair.b._track(pair.b.engine.handle(inputs.Frame(b"t2", [envelope("hello", id="h2", **hello)], pair.b.now)))
    assert not [c for c in pair.a.last + pair.b.last if isinstance(c, Send) and c.env["k"] == "result"]
    pair.seen[pair.a], pair.seen[pair.b] = [], []
    pair.settle()
    on_a, on_b = result_for(pair.seen[pair.a], b"t1", "h1"), result_for(pair.seen[pair.b], b"t2", "h2")
    assert (on_a["reclaimed"], on_b["reclaimed"]) == (True, False)
    assert on_a["sessionId"] == first["sessionId"] != on_b["sessionId"]


def test_a_client_moving_from_a_broker_whose_link_fell_silent_keeps_its_id():
    pair = linked_pair()
    first = pair.hello(pair.a, "alice")
    pair.b.now += 2.5            # A went quiet (killed): not yet given up on, but suspect
    welcome = pair.hello(pair.b, "alice", sessionId=first["sessionId"], token=first["token"])
    assert (welcome["reclaimed"], welcome["sessionId"]) == (True, first["sessionId"])
    assert pair.store.claims()[first["sessionId"]] == "bb"
    assert pair.b.engine.registry.by_id[first["sessionId"]].broker is None


def test_a_client_moving_from_a_broker_that_died_before_it_linked_back_keeps_its_id():
    """A was killed before it heard of B: B met A (its lease row) and said hello, but
    never hears a word from it. Its silence since then counts as a silent link's."""
    pair = Pair()                                # not linked: A knows nothing of B
    first = pair.hello(pair.a, "alice")
    row = LeaseRenewed("ba", 1, "ipc:///tmp/ba.sock", 0.0, pair.b.now + 100)
    pair.b._track(pair.b.engine.handle(inputs.BrokersRead([row], pair.b.now)))   # lost with A: not pumped
    pair.b.now += 2.5                            # alice's client fails over
    hello = envelope("hello", id="h-again", name="alice", sessionId=first["sessionId"],
                     token=first["token"])
    out = pair.b._track(pair.b.engine.handle(inputs.Frame(b"alice", [hello], pair.b.now))) + pair.b.commit()
    welcome = result_for(out, b"alice", "h-again")
    assert (welcome["reclaimed"], welcome["sessionId"]) == (True, first["sessionId"]), welcome
    assert pair.store.claims()[first["sessionId"]] == "bb"


def test_a_broker_just_met_that_has_not_linked_back_yet_keeps_its_claims():
    pair = Pair()
    first = pair.hello(pair.a, "alice")
    row = LeaseRenewed("ba", 1, "ipc:///tmp/ba.sock", 0.0, pair.b.now + 100)
    pair.b._track(pair.b.engine.handle(inputs.BrokersRead([row], pair.b.now)))
    hello = envelope("hello", id="h-copy", name="alice", sessionId=first["sessionId"],
                     token=first["token"])
    out = pair.b._track(pair.b.engine.handle(inputs.Frame(b"copy", [hello], pair.b.now))) + pair.b.commit()
    welcome = result_for(out, b"copy", "h-copy")
    assert (welcome["reclaimed"], welcome["sessionId"] != first["sessionId"]) == (False, True)
    assert pair.store.claims()[first["sessionId"]] == "ba"


# -- workflow runs: owned by the broker of their host -----------------------------------

def queue_from(pair: Pair, node: Node, identity: bytes, msg_id: str, message: str) -> dict:
    pair.call(node, identity, "send", msg_id, to="workflow:r1/plan", message=message)
    pair.settle()                    # the owner commits; its answer crosses back
    return result_for(pair.seen[node], identity, msg_id)


def test_a_send_to_a_pending_stage_of_a_run_on_the_other_broker_is_queued_by_that_broker():
    pair, _ = hosted_pair()
    assert pair.b.engine.cluster.run_hosts == {"r1": uuid_from(0xA0000001)}
    answer = queue_from(pair, pair.b, b"bob", "m1", "first")
    assert (answer["queued"], answer["position"], answer["runId"]) == (True, 1, "r1")
    assert [e.message for e in pair.a.engine.state.sticky.entries("r1")] == ["first"]
    assert list(pair.b.engine.state.sticky.entries("r1")) == []      # held once, on A
    assert pair.b.engine.cluster.forwarded == {}


def test_the_per_stage_cap_counts_sends_from_both_brokers_once():
    pair, _ = hosted_pair()
    for i in range(25):
        assert queue_from(pair, pair.a, b"host", f"a{i}", f"a{i}")["position"] == 2 * i + 1
        assert queue_from(pair, pair.b, b"bob", f"b{i}", f"b{i}")["position"] == 2 * i + 2
    refused = queue_from(pair, pair.b, b"bob", "over", "over")
    assert (refused["ok"], refused["code"]) == (False, "queue_full")


def test_a_stage_on_the_owner_gets_entries_queued_from_the_other_broker_in_order_once():
    pair, grant = hosted_pair()
    positions = [queue_from(pair, pair.b, b"bob", "m1", "one")["position"],
                 queue_from(pair, pair.a, b"host", "m2", "two")["position"],
                 queue_from(pair, pair.b, b"bob", "m3", "three")["position"]]
    assert positions == [1, 2, 3]
    pair.hello(pair.a, "plan", sessionKind="stage", stage="workflow:r1/plan", grant=grant,
               transcript="t-plan")
    got = [(m["message"], m["from"], m.get("receivedBeforeStart")) for m in pair.sent(pair.a, b"plan", "msg")]
    bob, host = uuid_from(0xB0000001), uuid_from(0xA0000001)
    assert got == [("one", bob, True), ("two", host, True), ("three", bob, True)]
    pair.call(pair.b, b"bob", "send", "live", to="workflow:r1/plan", message="live")
    assert [(m["message"], m.get("receivedBeforeStart")) for m in pair.sent(pair.a, b"plan", "msg")] \
        == [("live", None)]                       # once, and not as queued before the start
    assert result_for(pair.seen[pair.b], b"bob", "live")["delivered"] is True


def test_an_ask_to_a_live_stage_on_the_owner_is_answered_across_the_link():
    pair, grant = hosted_pair()
    pair.hello(pair.a, "plan", sessionKind="stage", stage="workflow:r1/plan", grant=grant,
               transcript="t-plan")
    pair.call(pair.b, b"bob", "ask", "q1", to="workflow:r1/plan", message="ready?")
    (asked,) = pair.sent(pair.a, b"plan", "msg")
    assert asked["expectsReply"] is True
    pair.call(pair.a, b"plan", "reply", "r1", to=asked["from"], replyTo=asked["id"], message="yes")
    assert result_for(pair.seen[pair.b], b"bob", "q1")["message"] == "yes"
