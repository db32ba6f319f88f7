"""Links between brokers when some use CURVE: which links open, with which keys, and
what a broker says about a broker it cannot link to (engines wired in memory)."""

from __future__ import annotations

from broker.core.kernel.commands import LinkOpen, LinkSend, ReadBrokers
from broker.core.kernel.records import LeaseRenewed
from schemas.protocol import envelope
from tests.unit.harness import result_for
from tests.unit.brokers_in_memory import Node, Pair
from broker.core.kernel import inputs


def row(node: Node, curve_public: str = "") -> LeaseRenewed:
    """``node``'s lease row as the other broker reads it."""
    return LeaseRenewed(node.broker_id, 1, f"ipc:///tmp/{node.broker_id}.sock", 0.0,
                        node.now + 100, curve_public)


def status_of(pair: Pair, node: Node) -> dict:
    pair.hello(node, "watcher")
    return result_for(pair.call(node, b"watcher", "status", "s1"), b"watcher", "s1")["broker"]


def test_a_curve_broker_links_with_the_key_the_other_brokers_row_names():
    pair = Pair()
    pair.a.engine.cluster.curve_public = "key-a"
    out = pair.a.engine.handle(inputs.BrokersRead([row(pair.b, "key-b")], pair.a.now))
    assert [c for c in out if isinstance(c, LinkOpen)] == [LinkOpen("bb", "ipc:///tmp/bb.sock", "key-b")]
    assert [env["k"] for c in out if isinstance(c, LinkSend) for env in c.envs] == ["link"]


def test_a_curve_broker_and_a_plain_one_do_not_link_and_each_says_why_in_status():
    pair = Pair()
    pair.a.engine.cluster.curve_public = "key-a"
    for node, other, key in ((pair.a, pair.b, ""), (pair.b, pair.a, "key-a")):
        for _ in range(3):                     # read every second; noted once
            out = node.engine.handle(inputs.BrokersRead([row(other, key)], node.now))
            assert not [c for c in out if isinstance(c, (LinkOpen, LinkSend))]
        assert node.engine.stats["brokers.unlinked.curve_mismatch"] == 1
        broker = status_of(pair, node)
        assert (broker["routing"], broker["otherBrokersLive"]) == ("single-node", 0)
        (warning,) = broker["warnings"]
        assert other.broker_id in warning and "--curve" in warning


def test_the_warning_goes_once_the_unlinkable_brokers_row_is_gone():
    pair = Pair()
    pair.a.engine.cluster.curve_public = "key-a"
    pair.a.engine.handle(inputs.BrokersRead([row(pair.b)], pair.a.now))
    pair.a.engine.handle(inputs.BrokersRead([], pair.a.now))
    assert "warnings" not in status_of(pair, pair.a)


def test_a_hello_from_a_broker_whose_row_is_not_read_yet_is_kept_and_taken_once_it_is():
    pair = Pair()
    pair.a.engine.cluster.curve_public = "key-a"
    pair.b.engine.cluster.curve_public = "key-b"
    out = pair.b.engine.handle(inputs.BrokersRead([row(pair.a, "key-a")], pair.b.now))
    (hello,) = [env for c in out if isinstance(c, LinkSend) for env in c.envs]
    out = pair.a.engine.handle(inputs.Frame(b"link-bb", [hello], pair.a.now))
    assert pair.a.engine.cluster.peers == {}            # no CURVE link without its row's key
    assert ReadBrokers() in out                         # ... which is read now, not in a second
    out = pair.a.engine.handle(inputs.BrokersRead([row(pair.b, "key-b")], pair.a.now))
    peer = pair.a.engine.cluster.peers["bb"]
    assert (peer.identity, peer.curve_public) == (b"link-bb", "key-b")
    assert LinkOpen("bb", "ipc:///tmp/bb.sock", "key-b") in out


def test_a_refused_handshake_opens_the_link_again_and_fails_what_waited_on_it():
    pair = Pair()
    for node, key in ((pair.a, "key-a"), (pair.b, "key-b")):
        node.engine.cluster.curve_public = key
    pair.deliver(pair.a, pair.a.engine.handle(inputs.BrokersRead([row(pair.b, "key-b")], pair.a.now)))
    pair.deliver(pair.b, pair.b.engine.handle(inputs.BrokersRead([row(pair.a, "key-a")], pair.b.now)))
    pair.settle()
    pair.hello(pair.a, "alice")
    pair.hello(pair.b, "bob")
    pair.a.engine.handle(inputs.Frame(b"alice", [envelope("call", id="q1", action="ask", to="bob",
                                            message="there?")], pair.a.now))
    out = pair.a.engine.handle(inputs.LinkRefused("bb", pair.a.now))
    assert [c for c in out if isinstance(c, LinkOpen)] == [LinkOpen("bb", "ipc:///tmp/bb.sock", "key-b")]
    hello = [env for c in out if isinstance(c, LinkSend) for env in c.envs]
    assert [env["k"] for env in hello] == ["link"]
    assert [s["name"] for s in hello[0]["sessions"]] == ["alice"]
    error = result_for(out, b"alice", "q1")
    assert (error["ok"], error["code"]) == (False, "peer_disconnected")
