"""Several engines on one store, their links wired in memory: brokers as one bus.

Each :class:`Node` is a :class:`~tests.unit.harness.Bus` with its own broker id; the
nodes of a :class:`Mesh` share the store (and so the grant key) as brokers on one
database do, and :meth:`Mesh.pump` carries every ``LinkSend`` to the broker it names,
as the shell and the sockets would, until nothing is in flight. Everything runs on
the fake clock: a broker that is killed (:meth:`Mesh.kill`) simply stops speaking, and
the others find it gone as real ones do, by its silent link or its ended lease row.
:class:`Pair` is a mesh of two, brokers ``a`` and ``b``.
"""

from __future__ import annotations

import itertools

from broker.core import Engine, Send
from broker.core.kernel import inputs
from broker.core.kernel.commands import AdoptRuns, LinkSend, ReadBrokers, RenewLease
from broker.core.kernel.records import LeaseReleased, LeaseRenewed
from broker.store.memory import MemoryStore
from schemas.protocol import envelope
from tests.unit.harness import Bus, result_for, uuid_from

LETTERS = "abcdef"        # node i is broker "b<letter>", its ids 0x<LETTER>0000001...


def endpoint_of(broker_id: str) -> str:
    return f"ipc:///tmp/{broker_id}.sock"


class Node(Bus):
    """One broker of the mesh: its own id, ids and tokens; the shared store."""

    def __init__(self, broker_id: str, store: MemoryStore, first_id: int,
                 lease_s: float = 100, **limits) -> None:
        self.broker_id = broker_id
        self.lease_s = lease_s
        super().__init__(**limits)
        self._new_ids = itertools.count(first_id)
        self.store = store
        self.engine = self._engine()
        self.engine.restore(store.load())

    def _engine(self) -> Engine:
        return Engine(broker_id=self.broker_id, limits=self._limits, lease_s=self.lease_s,
                      endpoint=endpoint_of(self.broker_id),
                      new_id=lambda: uuid_from(next(self._new_ids)),
                      new_token=lambda: f"{self.broker_id}-token-{next(self._tokens)}")

    def own_identities(self) -> list[bytes]:
        """The identities of the sessions connected to this broker itself."""
        return [s.identity for s in self.engine.registry.by_id.values() if s.broker is None]


class Mesh:
    """``count`` brokers (``ba``, ``bb``, ...) on one store; ``limits`` (a ``Limits``
    field each) for all; ``lease_s``: each broker's lease length. ``mesh[i]`` is the
    i-th; ``seen[node]`` what that node emitted since the last :meth:`feed`."""

    def __init__(self, count: int = 3, lease_s: float = 100, **limits) -> None:
        assert 2 <= count <= len(LETTERS)
        # The database's clock, which alone ends leases: the fake one (the brokers'
        # clocks move together; a killed broker's stops, the store's does not).
        self.nodes: list[Node] = []
        self.store = MemoryStore(clock=lambda: max((node.now for node in self.nodes), default=0.0))
        ids = [f"b{letter}" for letter in LETTERS[:count]]
        self.nodes = [Node(b, self.store, int(f"{letter.upper()}0000001", 16), lease_s, **limits)
                      for b, letter in zip(ids, LETTERS)]
        # Every broker's lease row, as its shell writes it at start (wall clock = the
        # fake one); :meth:`advance` renews them when the engines ask.
        self.store.apply([LeaseRenewed(n.broker_id, 1, endpoint_of(n.broker_id), 0.0,
                                       n.now + lease_s) for n in self.nodes])
        self.seen: dict[Node, list] = {node: [] for node in self.nodes}
        self.down: set[Node] = set()      # killed or stopped: nothing reaches or leaves them
        # Partitions: pairs of brokers whose links drop everything, and brokers cut
        # from the database (their lease renewals and adoptions fail).
        self.cuts: set[frozenset] = set()
        self.cut_from_store: set[Node] = set()
        # Adoptions the engines ask for are carried out by :meth:`advance` (as the
        # persistence worker does) rather than left to the test.
        self.auto_adopt = False

    def __getitem__(self, index: int) -> Node:
        return self.nodes[index]

    def node(self, broker_id: str) -> Node:
        (node,) = [n for n in self.nodes if n.broker_id == broker_id]
        return node

    def live(self) -> list[Node]:
        return [node for node in self.nodes if node not in self.down]

    def link(self) -> None:
        """Each reads the others' lease rows: links open, hellos cross."""
        for node in self.live():
            rows = [LeaseRenewed(peer.broker_id, 1, endpoint_of(peer.broker_id), 0.0,
                                 node.now + peer.lease_s)
                    for peer in self.live() if peer is not node]
            self.deliver(node, node.engine.handle(inputs.BrokersRead(rows, node.now)))
        self.settle()

    def deliver(self, node: Node, out: list) -> None:
        node.last = node._track(out)
        self.seen[node] += out
        self.pump(node, out)
        if self.auto_adopt and node not in self.down:
            for command in [c for c in out if isinstance(c, AdoptRuns)]:
                snapshot = None if node in self.cut_from_store else \
                    self.store.adopt_runs(command.broker_id, node.broker_id)
                self.deliver(node, node.engine.handle(inputs.RunsAdopted(
                    command.broker_id, snapshot, node.now)))

    def pump(self, node: Node, out: list) -> None:
        """Carry each ``LinkSend`` in ``out`` to the broker it names (not to a down one)."""
        if node in self.down:
            return
        for command in out:
            if isinstance(command, LinkSend):
                peer = self.node(command.broker_id)
                if peer in self.down or frozenset((node, peer)) in self.cuts:
                    continue
                reply = peer._track(peer.engine.handle(inputs.Frame(f"link-{node.broker_id}".encode(), command.envs, peer.now)))
                self.seen[peer] += reply
                self.pump(peer, reply)

    def settle(self) -> None:
        """Commit every live store's writes (claims included), carrying what that causes."""
        for node in self.live():
            node.commit()
            self.seen[node] += node.last
            self.pump(node, node.last)

    def feed(self, node: Node, identity: bytes, env: dict) -> None:
        self.seen = {n: [] for n in self.nodes}
        self.deliver(node, node.engine.handle(inputs.Frame(identity, [env], node.now)))

    def hello(self, node: Node, name: str, **fields) -> dict:
        msg_id = f"h-{name}"
        self.feed(node, name.encode(), envelope("hello", id=msg_id, name=name, **fields))
        self.settle()
        return result_for(self.seen[node], name.encode(), msg_id)

    def call(self, node: Node, identity: bytes, action: str, msg_id: str, **params) -> list:
        self.feed(node, identity, envelope("call", id=msg_id, action=action, **params))
        return self.seen[node]

    def sent(self, node: Node, identity: bytes, kind: str) -> list[dict]:
        return [c.env for c in self.seen[node] if isinstance(c, Send) and c.identity == identity
                and c.env["k"] == kind]

    # -- time, and brokers that end ----------------------------------------------------

    def advance(self, seconds: float, step: float = 0.5) -> None:
        """``seconds`` pass on every live broker in steps of ``step``: each runs its
        timers (its lease row is renewed and the others' rows read when its engine
        asks, as its shell would), and every session connected to it heartbeats.
        What they emit adds to ``seen``."""
        steps = max(1, round(seconds / step))
        for _ in range(steps):
            for node in self.live():
                node.now += seconds / steps
                out = node.engine.handle(inputs.Tick(node.now))
                self.deliver(node, out)
                self._leases(node, out)
                for identity in node.own_identities():
                    self.deliver(node, node.engine.handle(inputs.Frame(identity, [envelope("hb")], node.now)))

    def _leases(self, node: Node, out: list) -> None:
        for command in out:
            if node in self.cut_from_store:
                if isinstance(command, RenewLease) and command.ticket:
                    self.deliver(node, node.engine.handle(inputs.CommitFailed(
                        command.ticket, node.now, code="store_unavailable")))
                continue
            if isinstance(command, RenewLease):
                self.store.apply([LeaseRenewed(node.broker_id, 1, endpoint_of(node.broker_id),
                                               0.0, node.now + command.lease_s)])
                if command.ticket:
                    self.deliver(node, node.engine.handle(inputs.Committed(command.ticket,
                                                                           node.now)))
            if isinstance(command, (RenewLease, ReadBrokers)):
                rows = self.store.brokers(node.now, exclude=node.broker_id)
                self.deliver(node, node.engine.handle(inputs.BrokersRead(rows, node.now)))

    def cut(self, a: Node, b: Node) -> None:
        """Every frame between ``a`` and ``b`` is dropped from now on (both live)."""
        self.cuts.add(frozenset((a, b)))

    def heal(self, a: Node, b: Node) -> None:
        self.cuts.discard(frozenset((a, b)))

    def kill(self, node: Node) -> None:
        """``node`` dies at once (kill -9): it says nothing more and hears nothing;
        its lease row stays until it runs out."""
        self.down.add(node)

    def stop(self, node: Node) -> None:
        """``node`` stops cleanly: it tells the others, then releases its lease row."""
        self.deliver(node, node.engine.handle(inputs.Stopping(node.now)))
        self.down.add(node)
        self.store.apply([LeaseReleased(node.broker_id)])


class Pair(Mesh):
    """Brokers A and B on one store; ``limits`` (a ``Limits`` field each) for both."""

    def __init__(self, **limits) -> None:
        super().__init__(2, **limits)
        self.a, self.b = self.nodes

    def other(self, node: Node) -> Node:
        return self.b if node is self.a else self.a


def linked_pair(**limits) -> Pair:
    pair = Pair(**limits)
    pair.link()
    return pair


def linked_mesh(count: int = 3, **limits) -> Mesh:
    mesh = Mesh(count, **limits)
    mesh.link()
    return mesh


def hosted_pair() -> tuple[Pair, str]:
    """A host on A with run r1 (stage plan pending), bob on B in its invocation group."""
    pair = linked_pair()
    pair.hello(pair.a, "host")
    pair.feed(pair.a, b"host", envelope("workflow", id="w1", op="register_run", runId="r1",
                                        stages=[{"name": "plan"}]))
    pair.settle()               # register_run is answered once the run is durable
    grant = result_for(pair.seen[pair.a], b"host", "w1")["grants"]["workflow:r1/plan"]
    pair.hello(pair.b, "bob", group="workflow:r1")
    return pair, grant
