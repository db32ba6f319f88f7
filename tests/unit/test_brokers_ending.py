"""A broker of the mesh ends: stopped cleanly it tells the others at once; killed it
falls silent: the others cannot reach its sessions from then on, and let them go, and
stop counting it, once its lease row runs out (the database's word, not the link's). Engines linked in memory on the fake clock
(:mod:`tests.unit.brokers_in_memory`); the same with real processes and kill -9 is in
tests/integration/test_multi_broker.py.
"""

from __future__ import annotations

from broker.core.kernel.commands import LinkClose
from tests.unit.brokers_in_memory import Mesh, Node, linked_mesh
from tests.unit.harness import result_for

GROUP = "team"


def status(mesh: Mesh, node: Node, identity: bytes) -> dict:
    msg_id = f"s{node.now}"
    return result_for(mesh.call(node, identity, "status", msg_id), identity, msg_id)


def listed(mesh: Mesh, node: Node, identity: bytes) -> list[str]:
    msg_id = f"l{node.now}"
    rows = result_for(mesh.call(node, identity, "list", msg_id), identity, msg_id)["sessions"]
    return sorted(row["name"] for row in rows)


def left(mesh: Mesh, node: Node, identity: bytes) -> list[str]:
    return [e["session"]["name"] for e in mesh.sent(node, identity, "event")
            if e["event"] == "session_left"]


def test_a_clean_stop_stops_counting_at_once():
    mesh = linked_mesh(2)
    mesh.hello(mesh[0], "alice", group=GROUP)
    mesh.hello(mesh[1], "bob", group=GROUP)
    assert status(mesh, mesh[0], b"alice")["broker"]["otherBrokersLive"] == 1
    mesh.seen = {node: [] for node in mesh.nodes}
    mesh.stop(mesh[1])                        # no time passes: told over the link
    assert left(mesh, mesh[0], b"alice") == ["bob"]
    broker = status(mesh, mesh[0], b"alice")["broker"]
    assert (broker["otherBrokersLive"], broker["routing"]) == (0, "single-node")


def test_a_silent_brokers_sessions_stay_unreachable_until_its_lease_ends_then_leave():
    mesh = linked_mesh(3, lease_s=9)
    for node, name in zip(mesh.nodes, ("alice", "bob", "carol")):
        mesh.hello(node, name, group=GROUP)
    a, b, c = mesh.nodes
    liveness = a.engine.state.limits.liveness_s
    mesh.advance(1.0)                         # links heartbeat; all three live
    mesh.seen = {node: [] for node in mesh.nodes}
    mesh.kill(b)
    mesh.advance(liveness + 1.0)              # silent, but its lease row is live
    assert left(mesh, a, b"alice") == left(mesh, c, b"carol") == []
    assert listed(mesh, a, b"alice") == ["bob", "carol"]
    answer = result_for(mesh.call(a, b"alice", "send", "m1", to="bob", message="hi"),
                        b"alice", "m1")
    assert (answer["ok"], answer["code"]) == (False, "broker_unreachable")
    mesh.advance(9.0)                         # its lease ends by the store's clock
    assert left(mesh, a, b"alice") == left(mesh, c, b"carol") == ["bob"]
    assert listed(mesh, a, b"alice") == ["carol"]
    assert listed(mesh, c, b"carol") == ["alice"]


def test_a_killed_brokers_lease_stops_counting_once_it_ends_and_the_link_closes():
    mesh = linked_mesh(2, lease_s=3)
    mesh.hello(mesh[0], "alice", group=GROUP)
    a, b = mesh.nodes
    mesh.advance(1.0)                         # each renewed its row: 3 s from now
    assert status(mesh, a, b"alice")["broker"]["otherBrokersLive"] == 1
    mesh.seen = {node: [] for node in mesh.nodes}
    mesh.kill(b)
    mesh.advance(a.engine.state.limits.liveness_s + 3)
    assert LinkClose(b.broker_id) in mesh.seen[a]
    assert b.broker_id not in a.engine.cluster.peers
    broker = status(mesh, a, b"alice")["broker"]
    assert (broker["otherBrokersLive"], broker["routing"]) == (0, "single-node")
