"""No ask cycles: an ask that would close a wait cycle is refused at once, naming the
session it would wait on (broker.core.messaging.ask_cycles), on one broker and across
brokers linked in memory (broker.core.cluster.waiters), all on the fake clock."""

import pytest

from broker.core.messaging.ask_cycles import from_wire
from schemas.protocol import envelope

from .brokers_in_memory import linked_mesh
from .harness import Bus, result_for, uuid_from

pytestmark = pytest.mark.timeout(30)

ALICE, BOB, CAROL, DAVE = (uuid_from(0xA0000001 + n) for n in range(4))
GROUP = "team"


def four() -> Bus:
    bus = Bus(liveness_s=10_000)
    for name in ("alice", "bob", "carol", "dave"):
        bus.hello(name)
    return bus


def ask(bus: Bus, identity: bytes, msg_id: str, to: str, **params) -> list:
    return bus.feed(identity, envelope("call", id=msg_id, action="ask", to=to, message="q?",
                                       **params))


def answered(bus: Bus, identity: bytes, msg_id: str) -> list[dict]:
    return [c.env for c in bus.last if getattr(c, "identity", None) == identity
            and c.env.get("k") == "result" and c.env.get("re") == msg_id]


def delivered(bus: Bus, identity: bytes) -> list[str]:
    return [m["id"] for m in bus.sends(identity, "msg")]


# -- one broker -------------------------------------------------------------------------

def test_an_ask_back_to_a_session_waiting_on_the_asker_is_refused_naming_it():
    bus = four()
    ask(bus, b"alice", "a1", "bob")
    ask(bus, b"bob", "b1", "alice")
    assert answered(bus, b"bob", "b1") == [{
        "v": 1, "k": "result", "re": "b1", "ok": False, "code": "ask_cycle",
        "error": f"alice ({ALICE}) already waits on you (alice → you): this ask would close "
                 "a wait cycle, each waiting on the other until the timeout; reply first, or "
                 "send instead",
        "waitsOn": ALICE, "waitsOnName": "alice", "cycle": [ALICE, BOB]}]
    assert delivered(bus, b"alice") == []


def test_a_longer_cycle_is_refused_naming_the_session_and_the_chain():
    bus = four()
    ask(bus, b"alice", "a1", "bob")
    ask(bus, b"bob", "b1", "carol")
    ask(bus, b"carol", "c1", "alice")
    (refused,) = answered(bus, b"carol", "c1")
    assert (refused["code"], refused["waitsOn"], refused["cycle"]) == \
        ("ask_cycle", ALICE, [ALICE, BOB, CAROL])
    assert "(alice → bob → you)" in refused["error"]
    assert delivered(bus, b"alice") == []


def test_an_ask_to_a_session_waiting_on_someone_else_is_admitted():
    bus = four()
    ask(bus, b"alice", "a1", "bob")
    ask(bus, b"carol", "c1", "alice")       # carol waits on alice, who waits on bob
    assert answered(bus, b"carol", "c1") == [] and delivered(bus, b"alice") == ["c1"]
    ask(bus, b"bob", "b1", "dave")          # nobody waits on dave
    assert answered(bus, b"bob", "b1") == [] and delivered(bus, b"dave") == ["b1"]


def test_an_ask_back_after_the_first_was_answered_is_admitted():
    bus = four()
    ask(bus, b"alice", "a1", "bob")
    assert bus.call(b"bob", "reply", message="done", currentTurn="a1")["ok"]
    ask(bus, b"bob", "b1", "alice")
    assert answered(bus, b"bob", "b1") == [] and delivered(bus, b"alice") == ["b1"]


def test_an_ask_back_after_the_first_timed_out_is_admitted():
    bus = four()
    ask(bus, b"alice", "a1", "bob", timeout=5)
    bus.advance(5.0)
    assert answered(bus, b"alice", "a1")[0]["code"] == "ask_timeout"
    ask(bus, b"bob", "b1", "alice")
    assert delivered(bus, b"alice") == ["b1"]


def test_a_refused_ask_retried_with_its_id_gets_the_same_refusal_after_the_cycle_ended():
    bus = four()
    ask(bus, b"alice", "a1", "bob")
    ask(bus, b"bob", "b1", "alice")
    (first,) = answered(bus, b"bob", "b1")
    bus.call(b"bob", "reply", message="done", currentTurn="a1")
    ask(bus, b"bob", "b1", "alice")
    (again,) = answered(bus, b"bob", "b1")
    assert (again["code"], again["error"]) == ("ask_cycle", first["error"])
    assert delivered(bus, b"alice") == []


def test_a_pending_ask_retried_with_its_id_is_not_taken_for_a_cycle():
    bus = four()
    ask(bus, b"alice", "a1", "bob")
    ask(bus, b"alice", "a1", "bob")         # a resend after a reconnect: still waiting
    assert answered(bus, b"alice", "a1") == [] and delivered(bus, b"bob") == []


def test_a_child_contacting_its_supervisor_that_waits_on_it_is_refused():
    bus = Bus()
    parent = bus.hello("parent", group=GROUP)["sessionId"]
    child = bus.hello("child", parent=parent, group=GROUP)["sessionId"]
    ask(bus, b"parent", "p1", "child")
    out = bus.feed(b"child", envelope("supervisor", id="s1", message="which way?"))
    refused = result_for(out, b"child", "s1")
    assert (refused["code"], refused["cycle"]) == ("ask_cycle", [parent, child])
    assert delivered(bus, b"parent") == []


def test_an_ask_to_a_child_waiting_on_its_supervisor_is_refused():
    bus = Bus()
    parent = bus.hello("parent", group=GROUP)["sessionId"]
    bus.hello("child", parent=parent, group=GROUP)
    bus.feed(b"child", envelope("supervisor", id="s1", message="which way?"))
    ask(bus, b"parent", "p1", "child")
    assert answered(bus, b"parent", "p1")[0]["waitsOnName"] == "child"


# -- several brokers --------------------------------------------------------------------

def mesh_of(*names: str):
    """One session per broker, in one group: names[i] on broker i."""
    mesh = linked_mesh(len(names))
    ids = [mesh.hello(node, name, group=GROUP)["sessionId"] for node, name in zip(mesh.nodes, names)]
    return mesh, ids


def mesh_ask(mesh, index: int, identity: bytes, msg_id: str, to: str, **params) -> None:
    mesh.call(mesh[index], identity, "ask", msg_id, to=to, message="q?", **params)


def mesh_answers(mesh, index: int, identity: bytes, msg_id: str) -> list[dict]:
    return [c.env for c in mesh.seen[mesh[index]] if getattr(c, "identity", None) == identity
            and c.env.get("k") == "result" and c.env.get("re") == msg_id]


def test_an_ask_back_across_brokers_is_refused_at_once():
    mesh, (alice, bob) = mesh_of("alice", "bob")
    mesh_ask(mesh, 0, b"alice", "a1", "bob")
    mesh_ask(mesh, 1, b"bob", "b1", "alice")          # no time passes
    (refused,) = mesh_answers(mesh, 1, b"bob", "b1")
    assert (refused["code"], refused["waitsOn"], refused["waitsOnName"], refused["cycle"]) == \
        ("ask_cycle", alice, "alice", [alice, bob])
    assert mesh.sent(mesh[0], b"alice", "msg") == []


@pytest.mark.parametrize("order", ["waiting end first", "waited-on end first"])
def test_a_cycle_through_four_brokers_is_refused_whatever_order_its_asks_came_in(order):
    mesh, (alice, bob, carol, dave) = mesh_of("alice", "bob", "carol", "dave")
    chain = [("alice", 0, "bob"), ("bob", 1, "carol"), ("carol", 2, "dave")]
    for name, index, to in chain if order == "waiting end first" else chain[::-1]:
        mesh_ask(mesh, index, name.encode(), f"{name}-1", to)
    mesh_ask(mesh, 3, b"dave", "d1", "alice")
    (refused,) = mesh_answers(mesh, 3, b"dave", "d1")
    assert (refused["code"], refused["waitsOn"], refused["waitsOnName"], refused["cycle"]) == \
        ("ask_cycle", alice, "alice", [alice, bob, carol, dave])
    assert "(alice → bob → carol → you)" in refused["error"]
    assert mesh.sent(mesh[0], b"alice", "msg") == []


def test_a_wait_that_ended_on_another_broker_no_longer_counts():
    mesh, (alice, bob, carol) = mesh_of("alice", "bob", "carol")
    mesh_ask(mesh, 0, b"alice", "a1", "bob", timeout=5)
    mesh_ask(mesh, 1, b"bob", "b1", "carol")
    mesh.advance(5.0)                                   # alice's ask times out on bob's broker
    mesh_ask(mesh, 2, b"carol", "c1", "alice")
    assert mesh_answers(mesh, 2, b"carol", "c1") == []
    assert [m["id"] for m in mesh.sent(mesh[0], b"alice", "msg")] == ["c1"]


def test_waiters_another_broker_told_are_checked_before_they_count():
    told = {"waitedBy": ["w0", "w1", "w2"], "waitedVia": [-1, 0, 7]}
    assert from_wire(told) == (("w0", -1), ("w1", 0), ("w2", -1))   # 7 is no earlier one
    assert from_wire({"waitedBy": ["w0", 5]}) == ()
    assert from_wire({"waitedBy": ["w0", "w1"]}) == (("w0", -1), ("w1", -1))
    assert from_wire({"waitedBy": [f"w{i}" for i in range(100)]})[-1] == ("w63", -1)
    assert from_wire("not a map") == ()
