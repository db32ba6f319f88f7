"""Runs across brokers in the core (broker.core.cluster.ownership): two engines on one store,
their links wired in memory (the Pair of tests/unit/brokers_in_memory.py)."""

from __future__ import annotations

from broker.core import Send
from broker.core.kernel.commands import AdoptRuns, LinkSend
from broker.core.kernel.records import LeaseReleased, LeaseRenewed
from broker.core.sessions.grants import link_proof
from broker.core.cluster.ownership import ADOPT_RETRY_S
from schemas.limits import ADOPT_GRACE_S
from schemas import envelopes
from schemas.protocol import envelope
from tests.unit.harness import result_for
from tests.unit.brokers_in_memory import linked_mesh, linked_pair
from broker.core.kernel import inputs

RUN = "r-own"
PLAN = f"workflow:{RUN}/plan"


def a_stops(pair, now: float) -> list:
    """Broker A stops cleanly: its lease row goes, and B hears its ``link_bye``."""
    pair.store.apply([LeaseReleased("ba")])
    return pair.b.engine.handle(inputs.Frame(b"link-ba", [envelopes.link_bye()], now))


def hosted(pair):
    """alice hosts RUN on broker A (stage plan pending); bob is on broker B."""
    pair.hello(pair.a, "alice")
    pair.hello(pair.b, "bob", group=f"workflow:{RUN}")
    pair.feed(pair.a, b"alice", envelope("workflow", id="reg", op="register_run", runId=RUN,
                                         stages=[{"name": "plan"}]))
    pair.settle()               # register_run is answered once the run is durable
    grants = result_for(pair.seen[pair.a], b"alice", "reg")["grants"]
    return grants


def bob_sends(pair, msg_id: str, text: str) -> dict:
    """bob's send to PLAN, answered once the store committed what it needs."""
    seen = list(pair.call(pair.b, b"bob", "send", msg_id, to=PLAN, message=text))
    pair.settle()
    # The same command may be counted twice (a node's last output is pumped again).
    unique = {id(c): c for c in seen + pair.seen[pair.b]}
    return result_for(list(unique.values()), b"bob", msg_id)


def test_a_registered_run_is_announced_and_sends_from_the_other_broker_go_to_it():
    pair = linked_pair()
    hosted(pair)
    assert pair.b.engine.cluster.run_owners == {RUN: "ba"}
    answer = bob_sends(pair, "m1", "hi")
    assert (answer["queued"], answer["position"]) == (True, 1)
    assert [e.message for e in pair.a.engine.state.sticky.entries(RUN)] == ["hi"]
    assert RUN not in pair.b.engine.state.runs


def test_sends_reach_the_runs_broker_after_its_host_left():
    pair = linked_pair()
    hosted(pair)
    pair.feed(pair.a, b"alice", {"v": 1, "k": "bye"})
    answer = bob_sends(pair, "m2", "later")
    assert (answer["queued"], answer["position"]) == (True, 1)


def test_a_stage_hello_on_the_other_broker_is_refused_with_the_runs_endpoint():
    pair = linked_pair()
    grants = hosted(pair)
    answer = pair.hello(pair.b, "plan", sessionKind="stage", stage=PLAN, grant=grants[PLAN])
    assert (answer["ok"], answer["code"]) == (False, "run_elsewhere")
    assert answer["endpoint"] == "ipc:///tmp/ba.sock"


def test_a_stopped_brokers_runs_are_adopted_where_their_host_arrives():
    pair = linked_pair(adopt_grace_s=0.0)   # no grace: any broker asks
    hosted(pair)
    pair.call(pair.b, b"bob", "send", "m3", to=PLAN, message="kept")
    pair.settle()
    host_id = pair.a.engine.state.runs[RUN].host_id
    pair.a.engine.state.wall = pair.a.now
    bye = a_stops(pair, pair.b.now)
    assert not any(isinstance(c, AdoptRuns) for c in bye)        # it waits for the host
    out = pair.call(pair.b, b"bob", "send", "m4", to=PLAN, message="early")
    assert out == [AdoptRuns("ba")]          # the store is asked now; the send waits
    pair.b._track(pair.b.engine.handle(inputs.RunsAdopted("ba", pair.store.adopt_runs("ba", "bb"), pair.b.now)))
    answer = result_for(pair.b.commit(), b"bob", "m4")      # handled again, committed
    assert (answer["queued"], answer["position"]) == (True, 2)    # after the kept one
    assert RUN in pair.b.engine.state.runs and pair.b.engine.cluster.orphans == {}
    assert [e.message for e in pair.b.engine.state.sticky.entries(RUN)] == ["kept", "early"]
    run = pair.b.engine.state.runs[RUN]
    assert (run.host_id, run.last_host_id) == (None, host_id)      # leased, for its host
    answer = bob_sends(pair, "m5", "after")
    assert (answer["queued"], answer["position"]) == (True, 3)


def test_an_adoption_the_store_failed_is_asked_again():
    pair = linked_pair()
    hosted(pair)
    a_stops(pair, pair.b.now)
    orphans = pair.b.engine.cluster.orphans["ba"]
    out = pair.b.engine.handle(inputs.Tick(orphans.adopt_at))
    assert AdoptRuns("ba") in out
    pair.b.engine.handle(inputs.RunsAdopted("ba", None, orphans.adopt_at))
    later = pair.b.engine.handle(inputs.Tick(orphans.adopt_at + 0.1))
    assert AdoptRuns("ba") in later


def test_orphans_nobody_asked_for_are_adopted_once_the_brokers_adoption_grace_ends():
    for grace in (ADOPT_GRACE_S, 2.0):
        pair = linked_pair(adopt_grace_s=grace)
        hosted(pair)
        gone_at = pair.b.now
        a_stops(pair, gone_at)
        assert AdoptRuns("ba") not in pair.b.engine.handle(inputs.Tick(gone_at + grace - 0.1))
        assert AdoptRuns("ba") in pair.b.engine.handle(inputs.Tick(gone_at + grace))


def test_a_path_send_the_runs_broker_never_answered_is_answered_by_the_adopter():
    pair = linked_pair(adopt_grace_s=0.0)   # no grace: any broker asks
    hosted(pair)
    # Forwarded to broker A, which stops before handling it.
    out = pair.b.engine.handle(inputs.Frame(b"bob", [envelope("call", id="m6", action="send", to=PLAN,
                                                 message="in flight")], pair.b.now))
    assert [e["k"] for c in out if isinstance(c, LinkSend) for e in c.envs] == ["forward"]
    gone = a_stops(pair, pair.b.now)
    assert AdoptRuns("ba") in gone                        # the send waits for its run
    assert not [c for c in gone if isinstance(c, Send) and c.env.get("re") == "m6"]
    pair.b._track(pair.b.engine.handle(inputs.RunsAdopted("ba", pair.store.adopt_runs("ba", "bb"), pair.b.now)))
    answer = result_for(pair.b.commit(), b"bob", "m6")
    assert (answer["queued"], answer["position"]) == (True, 1)


def test_a_stages_subagent_that_reaches_another_broker_is_sent_to_the_runs_broker():
    pair = linked_pair()
    grants = hosted(pair)
    assert pair.hello(pair.a, "plan", sessionKind="stage", stage=PLAN, grant=grants[PLAN])["ok"]
    stage_id = pair.a.engine.state.registry.by_identity[b"plan"].id
    pair.feed(pair.a, b"plan", envelope("grant", id="g1"))
    child_grant = result_for(pair.seen[pair.a], b"plan", "g1")["grant"]
    pair.settle()
    answer = pair.hello(pair.b, "helper", parent=stage_id, grant=child_grant)
    assert (answer["ok"], answer["code"], answer["endpoint"]) == \
        (False, "run_elsewhere", "ipc:///tmp/ba.sock")


def test_pipelined_sends_waiting_for_a_failed_adoption_are_all_answered_after_the_retry():
    pair = linked_pair(adopt_grace_s=0.0)   # no grace: any broker asks
    hosted(pair)
    a_stops(pair, pair.b.now)
    waiting = pair.b.engine.handle(inputs.Frame(b"bob", [envelope("sends", to=PLAN, ids=["p1", "p2"],
                                                     messages=["one", "two"])], pair.b.now))
    assert waiting == [AdoptRuns("ba")]                      # parked, nothing answered
    failed = pair.b.engine.handle(inputs.RunsAdopted("ba", None, pair.b.now))
    assert not [c for c in failed if isinstance(c, Send)]    # still waiting, not refused
    pair.b.engine.handle(inputs.Frame(b"bob", [envelope("hb")], pair.b.now + 5.9))   # bob stays live
    retry = pair.b.engine.handle(inputs.Tick(pair.b.now + 6))
    assert AdoptRuns("ba") in retry
    pair.b._track(pair.b.engine.handle(inputs.RunsAdopted("ba", pair.store.adopt_runs("ba", "bb"), pair.b.now + 6)))
    out = pair.b.commit()
    acked = [i for c in out if isinstance(c, Send) and c.identity == b"bob"
             for i in (c.env.get("ids") or [c.env.get("re")])]
    assert sorted(acked) == ["p1", "p2"], out
    assert [e.message for e in pair.b.engine.state.sticky.entries(RUN)] == ["one", "two"]


def test_a_host_back_on_the_other_broker_is_answered_by_its_runs_broker():
    """alice's run stays on broker A; she comes back (her id and secret) on broker B:
    each host operation is forwarded to A and answered, never refused run_elsewhere."""
    pair = linked_pair()
    hosted(pair)
    alice = pair.a.engine.state.registry.by_identity[b"alice"]
    alice_id, secret = alice.id, alice.token
    pair.feed(pair.a, b"alice", {"v": 1, "k": "bye"})
    pair.settle()
    back = pair.hello(pair.b, "alice", sessionId=alice_id, token=secret)
    assert (back["sessionId"], back["reclaimed"]) == (alice_id, True)
    assert pair.a.engine.state.runs[RUN].host_id == alice_id       # hosting from B
    asked = [("stage_state", {"stage": "plan", "state": "RUNNING"}),
             ("add_stages", {"stages": [{"name": "review"}]}),
             ("revoke_stage", {"stage": "review"}),
             ("register_run", {"stages": [{"name": "plan"}]}),
             ("end_run", {})]
    answers = {}
    for n, (op, fields) in enumerate(asked):
        pair.feed(pair.b, b"alice", envelope("workflow", id=f"op{n}", op=op, runId=RUN, **fields))
        pair.settle()
        answers[op] = result_for(pair.seen[pair.b], b"alice", f"op{n}")
    assert all(a["ok"] for a in answers.values()), answers
    assert answers["stage_state"]["state"] == "RUNNING"
    assert f"workflow:{RUN}" in answers["register_run"]["groups"]
    assert answers["end_run"]["ended"] is True
    assert RUN not in pair.a.engine.state.runs and RUN not in pair.b.engine.state.runs
    assert pair.b.engine.cluster.forwarded == {}


def answers_to(out: list, identity: bytes) -> list[dict]:
    return [c.env for c in out if isinstance(c, Send) and c.identity == identity
            and c.env.get("k") == "result"]


def test_host_operations_during_an_adoption_wait_for_it_and_are_answered():
    pair = linked_pair()
    hosted(pair)
    alice = pair.a.engine.state.registry.by_identity[b"alice"]
    a_stops(pair, pair.b.now)   # A stops
    back = pair.hello(pair.b, "alice", sessionId=alice.id, token=alice.token)
    assert back["reclaimed"] is True
    assert AdoptRuns("ba") in pair.b.last or AdoptRuns("ba") in pair.seen[pair.b]
    waiting = []
    for n, (op, fields) in enumerate([("stage_state", {"stage": "plan", "state": "RUNNING"}),
                                      ("add_stages", {"stages": [{"name": "review"}]})]):
        waiting += pair.b.engine.handle(inputs.Frame(b"alice", [envelope("workflow", id=f"op{n}", op=op,
                                                            runId=RUN, **fields)], pair.b.now))
    assert answers_to(waiting, b"alice") == []              # they wait, not unknown_run
    out = pair.b._track(pair.b.engine.handle(inputs.RunsAdopted("ba", pair.store.adopt_runs("ba", "bb"), pair.b.now)))
    answers = {a["re"]: a for a in answers_to(out, b"alice")}
    assert (answers["op0"]["ok"], answers["op0"]["state"]) == (True, "RUNNING")
    assert answers["op1"]["ok"] and f"{PLAN[:-4]}review" in answers["op1"]["stages"]


def adopted_elsewhere(msg_id: str):
    """Broker A stops; bob's send waits for its run, which a third broker ``bc``
    adopts before broker B asks. Returns (B's engine, now) once B's adoption answered."""
    pair = linked_pair(adopt_grace_s=0.0)   # no grace: any broker asks
    hosted(pair)
    b = pair.b.engine
    now = pair.b.now
    pair.store.apply([LeaseReleased("ba")])
    b.handle(inputs.Frame(b"link-ba", [envelopes.link_bye()], now))
    assert b.handle(inputs.Frame(b"bob", [envelope("call", id=msg_id, action="send", to=PLAN,
                                      message="moving")], now)) == [AdoptRuns("ba")]
    pair.store.adopt_runs("ba", "bc")
    out = b.handle(inputs.RunsAdopted("ba", pair.store.adopt_runs("ba", "bb"), now))
    assert answers_to(out, b"bob") == []                      # waits, not unknown_run
    return pair, b, now


def test_a_send_for_a_run_another_broker_adopted_first_waits_for_that_brokers_word():
    pair, b, now = adopted_elsewhere("m7")
    b.handle(inputs.BrokersRead([LeaseRenewed("bc", 1, "ipc:///tmp/bc.sock", 0.0, now + 100)], now))
    told = b.handle(inputs.Frame(b"link-bc", [envelopes.link(
        "bc", link_proof(b.state.grant_key, "bc"), "ipc:///tmp/bc.sock", now + 100, [], [RUN],
        {})], now))
    forwarded = [e["env"]["id"] for c in told if isinstance(c, LinkSend) and c.broker_id == "bc"
                 for e in c.envs if e["k"] == "forward"]
    assert forwarded == ["m7"]                                # handed to the adopter


def test_a_send_for_a_run_no_broker_claims_after_the_adoption_is_refused_after_one_retry():
    pair, b, now = adopted_elsewhere("m8")                   # bc never says it owns it
    b.handle(inputs.Frame(b"bob", [envelope("hb")], now + ADOPT_RETRY_S - 0.1))    # bob stays live
    assert AdoptRuns("ba") in b.handle(inputs.Tick(now + ADOPT_RETRY_S))
    out = b.handle(inputs.RunsAdopted("ba", pair.store.adopt_runs("ba", "bb"), now + ADOPT_RETRY_S))
    (answer,) = answers_to(out, b"bob")
    assert (answer["re"], answer["ok"], answer["code"]) == ("m8", False, "unknown_run")


def test_a_stage_hello_while_its_run_moves_is_told_run_moving_and_binds_after_the_adoption():
    """A stage hello for a dead broker's run nobody adopted yet is not parked (its
    client would wait, silent, and every parked copy would open a session after the
    adoption: phantoms with fresh ids that take the stage's binding): it is refused
    run_moving at once, and the client's next hello after the adoption binds the
    stage under its own id. (A third broker stays alive, so reclaims wait for their
    claim's commit.)"""
    mesh = linked_mesh(3, adopt_grace_s=0.0)   # no grace: any broker asks at once
    a, b = mesh[0], mesh[1]
    mesh.hello(a, "alice")
    mesh.feed(a, b"alice", envelope("workflow", id="reg", op="register_run", runId=RUN,
                                    stages=[{"name": "plan"}]))
    mesh.settle()
    grant = result_for(mesh.seen[a], b"alice", "reg")["grants"][PLAN]
    first = mesh.hello(a, "plan", sessionKind="stage", stage=PLAN, grant=grant,
                       instance="i-plan")
    assert first["ok"], first
    mesh.stop(a)
    mesh.settle()
    again = dict(name="plan", sessionKind="stage", stage=PLAN, grant=grant,
                 instance="i-plan", sessionId=first["sessionId"], token=first["token"])
    for n, identity in enumerate((b"plan-1", b"plan-2")):
        mesh.feed(b, identity, envelope("hello", id=f"again-{n}", **again))
        answer = result_for(mesh.seen[b], identity, f"again-{n}")
        assert (answer["ok"], answer["code"], answer["endpoint"]) == \
            (False, "run_moving", "ipc:///tmp/bb.sock")
    b._track(b.engine.handle(inputs.RunsAdopted("ba", mesh.store.adopt_runs("ba", "bb"), b.now)))
    b.commit()
    mesh.settle()
    assert mesh.hello(b, "plan", **{k: v for k, v in again.items() if k != "name"})["ok"]
    state = b.engine.state
    stages = [s for s in state.registry.by_id.values() if s.name == "plan" and s.broker is None]
    assert [s.id for s in stages] == [first["sessionId"]]
    assert state.runs[RUN].node_by_key(stages[0].binding.node_key).session_id == stages[0].id
