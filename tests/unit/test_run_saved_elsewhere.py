"""A run registered on a broker that had not heard of it, while another broker owns its
stored row (the two not linked yet): the store refuses the save, and the broker keeps
no run it does not own. Two engines on one store (tests/unit/brokers_in_memory.py)."""

from __future__ import annotations

from schemas.protocol import envelope
from tests.unit.brokers_in_memory import Pair
from tests.unit.harness import result_for

RUN = "r-twice"


def register(pair: Pair, node, name: str, msg_id: str) -> dict:
    pair.hello(node, name)
    pair.feed(node, name.encode(), envelope("workflow", id=msg_id, op="register_run", runId=RUN,
                                            stages=[{"name": "plan"}]))
    seen = list(pair.seen[node])
    pair.settle()               # register_run is answered once the run is durable
    unique = {id(c): c for c in seen + pair.seen[node]}
    return result_for(list(unique.values()), name.encode(), msg_id)


def test_a_run_another_broker_owns_in_the_store_is_refused_and_not_kept():
    pair = Pair()               # not linked: B has not heard of A's runs
    assert register(pair, pair.a, "alice", "reg-a")["ok"] is True
    refused = register(pair, pair.b, "carol", "reg-b")
    assert (refused["ok"], refused["code"], refused.get("endpoint")) == \
        (False, "run_moving", "ipc:///tmp/bb.sock")
    state = pair.b.engine.state
    (carol,) = [s for s in state.registry.by_id.values() if s.name == "carol"]
    assert RUN not in state.runs
    assert RUN not in state.hosted.get(carol.id, set()) | state.hosted_before.get(carol.id, set())
    assert f"workflow:{RUN}" not in carol.groups
    assert RUN in pair.a.engine.state.runs          # A alone holds it, as the store says
    assert [(r.run_id, r.owner) for r in pair.store.load().runs] == [(RUN, "ba")]
