"""A run's broker answers for it to sessions on the other broker: after its host left,
past the host lease (dormant), and when that session tries a host operation. Two
engines linked in memory on the fake clock (:mod:`tests.unit.brokers_in_memory`);
runs that move when a real broker is killed are tested in
tests/integration/test_multi_broker_runs.py.
"""

from __future__ import annotations

from broker.core.kernel.commands import LinkSend
from schemas.errors import ERRORS
from schemas.protocol import envelope
from tests.unit.brokers_in_memory import Pair, linked_pair
from tests.unit.harness import result_for

HOST_LEASE_S = 2.0
RUN = "r1"
PLAN = f"workflow:{RUN}/plan"


def answered(pair: Pair, node, identity: bytes, kind: str, msg_id: str, **fields) -> dict:
    """A request of ``kind`` from ``identity``, answered once every store committed."""
    pair.feed(node, identity, envelope(kind, id=msg_id, **fields))
    pair.settle()
    return result_for(pair.seen[node], identity, msg_id)


def linked_run() -> Pair:
    """A host on A with run r1 (stage plan pending), bob on B in the run's group, whose
    first send (``probe``) A queued."""
    pair = linked_pair(host_lease_s=HOST_LEASE_S)
    pair.hello(pair.a, "host")
    assert answered(pair, pair.a, b"host", "workflow", "reg", op="register_run", runId=RUN,
                    stages=[{"name": "plan"}])["ok"]
    pair.hello(pair.b, "bob", group=f"workflow:{RUN}")
    probe = answered(pair, pair.b, b"bob", "call", "probe", action="send", to=PLAN, message="probe")
    assert probe["queued"] is True
    return pair


def test_a_run_whose_host_left_still_queues_sends_from_another_broker():
    pair = linked_run()
    pair.feed(pair.a, b"host", envelope("bye", id="bye"))
    pair.settle()
    queued = answered(pair, pair.b, b"bob", "call", "m1", action="send", to=PLAN,
                      message="while the host is away")
    assert queued["position"] == 2, queued
    pair.advance(HOST_LEASE_S + 1.0)        # past the host's lease the run is dormant
    refused = answered(pair, pair.b, b"bob", "call", "q1", action="ask", to=PLAN, message="?",
                       timeout=5)
    assert (refused["ok"], refused["code"]) == (False, "run_dormant")
    assert isinstance(refused["error"], str) and refused["error"]
    dormant = answered(pair, pair.b, b"bob", "call", "m2", action="send", to=PLAN,
                       message="while dormant")
    assert dormant["position"] == 3, dormant


def forwarded(pair: Pair) -> list[str]:
    """The kinds B sent over its link during the last request."""
    return [env["k"] for c in pair.seen[pair.b] if isinstance(c, LinkSend) for env in c.envs]


def test_a_host_operation_on_another_broker_is_checked_and_answered_by_the_runs_broker():
    pair = linked_run()
    refusals = [answered(pair, pair.b, b"bob", "workflow", "t1", op="take_over", runId=RUN,
                         grant="x")]
    assert "forward" in forwarded(pair)
    refusals.append(answered(pair, pair.b, b"bob", "workflow", "s1", op="stage_state",
                             runId=RUN, stage="plan", state="RUNNING"))
    assert "forward" in forwarded(pair)
    for refused in refusals:                        # its host is live on A
        assert (refused["ok"], refused["code"]) == (False, "not_run_host"), refused
        assert refused["code"] in ERRORS and isinstance(refused["error"], str) and refused["error"]
