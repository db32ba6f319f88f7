"""Sessions on different brokers of one database talking as on one broker: listing,
targeting, sends, replies, asks and supervisors across brokers, with two or three
engines linked in memory on the fake clock (:mod:`tests.unit.brokers_in_memory`).

What only real processes show (a kill -9, a client failing over, PUB sockets, CURVE,
lease rows in SQLite or PostgreSQL) stays in tests/integration/test_multi_broker.py.
"""

from __future__ import annotations

from broker.core.kernel.commands import LinkSend
from schemas.protocol import envelope
from tests.unit.brokers_in_memory import Mesh, Node, linked_mesh
from tests.unit.harness import result_for
from broker.core.kernel import inputs

GROUP = "team"


def answer(mesh: Mesh, node: Node, identity: bytes, action: str, msg_id: str, **params) -> dict:
    """``action`` called by ``identity`` on ``node``, answered once every store committed."""
    mesh.call(node, identity, action, msg_id, **params)
    mesh.settle()
    return result_for(mesh.seen[node], identity, msg_id)


def names(rows: list[dict]) -> list[str]:
    return sorted(row["name"] for row in rows)


def test_list_groups_and_status_count_sessions_on_every_broker():
    mesh = linked_mesh(3)
    for node, name in zip(mesh.nodes, ("alice", "bob", "carol")):
        mesh.hello(node, name, group=GROUP)
    mesh.hello(mesh[2], "dave", group=f"{GROUP}-x")
    for node, name in zip(mesh.nodes, (b"alice", b"bob", b"carol")):
        status = answer(mesh, node, name, "status", "s")
        assert status["broker"]["otherBrokersLive"] == 2
    assert names(answer(mesh, mesh[1], b"bob", "list", "l1")["sessions"]) == ["alice", "carol"]
    assert answer(mesh, mesh[0], b"alice", "status", "s1")["visibleSessions"] == 2
    listed = answer(mesh, mesh[0], b"alice", "groups", "g1")["groups"]
    groups = {g["name"]: g["sessions"] for g in listed}
    assert (groups[GROUP], groups[f"{GROUP}-x"]) == (3, 1)


def test_targeting_across_brokers_by_name_prefix_and_atomic_id_with_visibility():
    mesh = linked_mesh(2)
    mesh.hello(mesh[0], "alice", group=GROUP)
    bob = mesh.hello(mesh[1], "bob", group=GROUP, atomicSessionId="atomic-bob")["sessionId"]
    hidden = mesh.hello(mesh[1], "hidden", group=f"{GROUP}-x")["sessionId"]
    groups = answer(mesh, mesh[0], b"alice", "groups", "g0")["groups"]
    assert f"{GROUP}-x" in [g["name"] for g in groups]          # hidden is mirrored here
    for i, to in enumerate(("bob", "BOB", bob[:8], bob, "atomic-bob")):
        sent = answer(mesh, mesh[0], b"alice", "send", f"m{i}", to=to, message=f"via {to}")
        assert (sent["ok"], sent.get("to")) == (True, bob), sent
        assert [m["message"] for m in mesh.sent(mesh[1], b"bob", "msg")] == [f"via {to}"]
    refused = answer(mesh, mesh[0], b"alice", "send", "no", to=hidden, message="no")
    assert (refused["ok"], refused["code"]) == (False, "different_group")


def test_an_ambiguous_name_across_brokers_is_refused_naming_both():
    mesh = linked_mesh(3)
    mesh.hello(mesh[0], "alice", group=GROUP)
    twins = [mesh.hello(node, "twin", group=GROUP)["sessionId"] for node in mesh.nodes[1:]]
    rows = answer(mesh, mesh[0], b"alice", "list", "l1")["sessions"]
    assert names(rows) == ["twin", "twin"]
    refused = answer(mesh, mesh[0], b"alice", "send", "m1", to="twin", message="which?")
    assert refused["code"] == "ambiguous_target"
    assert twins[0] in refused["error"] and twins[1] in refused["error"]


def test_pipelined_sends_across_brokers_arrive_in_order():
    mesh = linked_mesh(2)
    mesh.hello(mesh[0], "alice", group=GROUP)
    mesh.hello(mesh[1], "bob", group=GROUP)
    a, b = mesh.nodes
    mesh.seen = {node: [] for node in mesh.nodes}
    # All 200 are in before any crosses the link, as a pipelining client's are.
    out = []
    for i in range(200):
        out += a._track(a.engine.handle(inputs.Frame(b"alice", [envelope("call", id=f"m{i}", action="send",
                                                             to="bob", message=f"m{i}")], a.now)))
    assert sum(len(c.envs) for c in out if isinstance(c, LinkSend)) == 200
    mesh.seen[a] += out
    mesh.pump(a, out)
    mesh.settle()
    answers = [result_for(mesh.seen[a], b"alice", f"m{i}") for i in range(200)]
    assert all(r["ok"] for r in answers)
    assert [m["message"] for m in mesh.sent(b, b"bob", "msg")] == [f"m{i}" for i in range(200)]


def test_a_plain_reply_goes_back_across_brokers_and_can_be_answered_again():
    mesh = linked_mesh(2)
    alice = mesh.hello(mesh[0], "alice", group=GROUP)["sessionId"]
    bob = mesh.hello(mesh[1], "bob", group=GROUP)["sessionId"]
    answer(mesh, mesh[0], b"alice", "send", "m1", to="bob", message="ping")
    (ping,) = mesh.sent(mesh[1], b"bob", "msg")
    assert ping["message"] == "ping"
    # A client's reply names the message it is on (currentTurn), as client.session does.
    pong = answer(mesh, mesh[1], b"bob", "reply", "r1", message="pong", currentTurn=ping["id"])
    assert pong["ok"]
    (back,) = mesh.sent(mesh[0], b"alice", "msg")
    assert (back["message"], back["from"]) == ("pong", bob)
    again = answer(mesh, mesh[0], b"alice", "reply", "r2", message="pong2", currentTurn=back["id"])
    assert again["ok"]                                  # the thread is alice's now
    (pong2,) = mesh.sent(mesh[1], b"bob", "msg")
    assert (pong2["message"], pong2["from"]) == ("pong2", alice)


def test_ask_and_reply_across_brokers_with_pending_on_the_targets_side():
    mesh = linked_mesh(2)
    mesh.hello(mesh[0], "alice", group=GROUP)
    mesh.hello(mesh[1], "bob", group=GROUP)
    mesh.call(mesh[0], b"alice", "ask", "q1", to="bob", message="what time?")
    (ask,) = mesh.sent(mesh[1], b"bob", "msg")
    assert ask["expectsReply"] is True
    assert not [r for r in mesh.sent(mesh[0], b"alice", "result") if r["re"] == "q1"]   # waits
    pending = answer(mesh, mesh[1], b"bob", "pending", "p1")["pending"]
    assert [(p["messageId"], p["fromName"]) for p in pending] == [(ask["id"], "alice")]
    assert answer(mesh, mesh[1], b"bob", "reply", "r1", message="noon", currentTurn=ask["id"])["ok"]
    result = result_for(mesh.seen[mesh[0]], b"alice", "q1")
    assert (result["ok"], result["message"], result["messageId"]) == (True, "noon", ask["id"])


def test_a_child_on_another_broker_inherits_the_group_and_reaches_its_supervisor():
    mesh = linked_mesh(2)
    lead = mesh.hello(mesh[0], "lead", group=GROUP)["sessionId"]
    mesh.feed(mesh[0], b"lead", envelope("grant", id="g1"))
    grant = result_for(mesh.seen[mesh[0]], b"lead", "g1")["grant"]
    mesh.hello(mesh[1], "watcher", group=GROUP)
    assert "lead" in names(answer(mesh, mesh[1], b"watcher", "list", "l1")["sessions"])
    child = mesh.hello(mesh[1], "child", parent=lead, grant=grant, sessionKind="noninteractive")
    assert child["ok"], child
    assert answer(mesh, mesh[1], b"child", "status", "s1")["homeGroup"] == GROUP
    mesh.feed(mesh[1], b"child", envelope("supervisor", id="sv1", message="stuck", timeout=30))
    (got,) = mesh.sent(mesh[0], b"lead", "msg")
    assert (got["message"], got.get("supervisor"), got["from"]) == \
        ("stuck", True, child["sessionId"])
    told = answer(mesh, mesh[0], b"lead", "reply", "r1", message="try again", currentTurn=got["id"])
    assert told["ok"]
    result = result_for(mesh.seen[mesh[1]], b"child", "sv1")
    assert (result.get("ok"), result.get("message")) == (True, "try again")


def test_an_ask_fails_at_once_when_its_target_closes_on_the_other_broker():
    mesh = linked_mesh(2)
    mesh.hello(mesh[0], "alice", group=GROUP)
    mesh.hello(mesh[1], "bob", group=GROUP)
    mesh.call(mesh[0], b"alice", "ask", "q1", to="bob", message="bye?")
    assert mesh.sent(mesh[1], b"bob", "msg")[0]["expectsReply"] is True
    mesh.feed(mesh[1], b"bob", envelope("bye", id="bye"))     # no time passes
    mesh.settle()
    result = result_for(mesh.seen[mesh[0]], b"alice", "q1")
    assert (result.get("ok"), result.get("code")) == (False, "peer_disconnected")
