"""Brokers split by the network, in memory on the fake clock: the database alone says
who is alive and who owns a run, and no run is ever held by two brokers.

* brokers cut from each other (both reach the database) adopt nothing: requests that
  need the other fail at once with ``broker_unreachable`` and nothing is queued into a
  copy; once healed, the links mend by themselves;
* a broker cut from the database stops acting as the owner of its runs before its
  lease can end (it *lapses*), the other adopts them only once the lease has ended by
  the database's clock, and the first takes back only what nobody took;
* a broker paused past its lease checks it before it serves anything;
* a write the store fenced out deposes the writer: its sender is told ``run_moving``.

The same faults with real processes, network namespaces and packet filters are in
``tests/faults`` (and ``scripts/faults``).
"""

from __future__ import annotations

from broker.core.kernel import inputs
from broker.core.kernel.commands import ReadJobs
from broker.core.kernel.records import LeaseReleased
from schemas.protocol import envelope
from tests.unit.brokers_in_memory import Pair, linked_pair
from tests.unit.harness import result_for

RUN = "r1"
PLAN = "workflow:r1/plan"


def hosted(lease_s: float = 100) -> Pair:
    """A host on A with run r1 (stage plan pending), bob on B in the run's group;
    adoptions asked for are carried out."""
    pair = linked_pair(lease_s=lease_s)
    pair.hello(pair.a, "host")
    pair.feed(pair.a, b"host", envelope("workflow", id="w1", op="register_run", runId=RUN,
                                        stages=[{"name": "plan"}]))
    pair.settle()
    pair.hello(pair.b, "bob", group=f"workflow:{RUN}")
    pair.auto_adopt = True
    return pair


def holders(pair: Pair) -> list[str]:
    return [node.broker_id for node in pair.nodes if RUN in node.engine.state.runs]


def send(pair: Pair, node, identity: bytes, msg_id: str, text: str) -> dict:
    out = pair.call(node, identity, "send", msg_id, to=PLAN, message=text)
    found = [c for c in out if getattr(c, "identity", None) == identity]
    if not found:
        pair.settle()
        out = pair.seen[node]
    return result_for(out, identity, msg_id)


def test_brokers_cut_from_each_other_adopt_nothing_and_refuse_what_needs_the_other():
    pair = hosted()
    pair.cut(pair.a, pair.b)
    for _ in range(40):                     # 20 s: the liveness window and the grace, twice
        pair.advance(0.5)
        assert holders(pair) == ["ba"]
    assert pair.b.engine.cluster.orphans == {}
    assert pair.b.engine.cluster.peers["ba"].silent
    answer = send(pair, pair.b, b"bob", "m1", "while cut")
    assert (answer["ok"], answer["code"]) == (False, "broker_unreachable")
    assert pair.store.load().sticky == []   # nothing queued into a copy
    pair.heal(pair.a, pair.b)
    pair.advance(9.0)                       # hellos again, at most 8 s apart
    assert not pair.b.engine.cluster.peers["ba"].silent
    answer = send(pair, pair.b, b"bob", "m2", "after the heal")
    assert (answer["queued"], answer["position"]) == (True, 1)
    assert holders(pair) == ["ba"]


def test_a_broker_cut_from_the_database_lapses_before_its_lease_ends_then_the_other_adopts():
    pair = hosted(lease_s=12)
    a, b = pair.nodes
    pair.cut(a, b)
    pair.cut_from_store.add(a)
    lapsed_at = adopted_at = None
    for _ in range(80):                     # 40 s
        pair.advance(0.5)
        assert len(holders(pair)) <= 1      # never two brokers holding the run
        if lapsed_at is None and RUN not in a.engine.state.runs:
            lapsed_at = a.now
        if adopted_at is None and RUN in b.engine.state.runs:
            adopted_at = b.now
    assert lapsed_at is not None and adopted_at is not None and lapsed_at < adopted_at
    answer = send(pair, a, b"host", "m1", "on the lapsed broker")
    assert (answer["ok"], answer["code"]) == (False, "run_moving")
    (run,) = pair.store.load().runs
    assert (run.owner, run.epoch) == ("bb", 2)
    pair.cut_from_store.discard(a)          # healed: A renews, takes back nothing
    pair.heal(a, b)
    pair.advance(10.0)
    assert holders(pair) == ["bb"]
    assert a.engine.cluster.run_owners.get(RUN) == "bb"


def test_a_broker_paused_past_its_lease_lapses_before_it_serves_anything():
    pair = hosted(lease_s=12)
    a, b = pair.nodes
    pair.advance(1.0)                       # serving: its lease renewed
    pair.down.add(a)                        # SIGSTOP: it neither speaks nor hears
    pair.advance(30.0)
    assert RUN in b.engine.state.runs       # its lease ended: adopted
    pair.down.discard(a)                    # SIGCONT, 30 s later by its clock
    a.now = b.now
    out = a.engine.handle(inputs.Frame(b"host", [envelope(
        "call", id="m1", action="send", to=PLAN, message="queued before the pause")], a.now))
    assert RUN not in a.engine.state.runs
    # Its clients were silent past the window (they failed over, and hold their ids
    # elsewhere): their sessions went before the frame was read.
    answer = result_for(out, b"host", "m1")
    assert (answer["ok"], answer["code"]) == (False, "not_connected")
    assert not [s for s in a.engine.state.registry.by_id.values() if s.broker is None]
    assert [row.entry.message for row in pair.store.load().sticky] == []


def test_a_write_the_store_fenced_out_is_refused_run_moving_and_the_run_leaves_the_writer():
    pair = hosted()
    a, b = pair.nodes
    pair.store.apply([LeaseReleased("ba")])          # its lease ended unseen...
    pair.store.adopt_runs("ba", "bb")                # ... and B took the run
    answer = send(pair, a, b"host", "m1", "too late")
    assert (answer["ok"], answer["code"]) == (False, "run_moving")
    assert answer["endpoint"] == "ipc:///tmp/ba.sock"  # ask again: forwarded once it hears
    assert RUN not in a.engine.state.runs
    assert pair.store.load().sticky == []
    assert a.engine.stats["runs.deposed"] == 1


def test_a_broker_heard_again_after_silence_reads_its_conversations_queued_jobs_again():
    """Jobs another broker committed for a conversation here are sent over the link
    (link_jobs), which a partition drops without a word: once the other broker speaks
    again, each persistent conversation here reads its queued jobs from the store."""
    pair = Pair()
    pair.link()
    a, b = pair.nodes
    pair.hello(b, "dest", agent="lys", channel="discord:2")
    pair.hello(b, "brief", agent="lys", channel="discord:3", persistent=False)
    pair.cut(a, b)
    pair.advance(10.0)
    pair.seen[b].clear()
    pair.heal(a, b)
    pair.advance(3.0)
    reads = [c for c in pair.seen[b] if isinstance(c, ReadJobs)]
    assert [(r.agent, r.channel) for r in reads] == [("lys", "discord:2")]


def test_a_lapsed_broker_does_not_tell_the_others_its_runs_ended():
    """A broker cut from the database lapses and drops its runs without a word: for the
    others the run is still its own until its lease ends (then an orphan), so a stage
    hello there is redirected or told run_moving, never unknown_run (a stage gave up)."""
    pair = hosted(lease_s=12)
    a, b = pair.nodes
    pair.auto_adopt = False
    pair.cut_from_store.add(a)
    lapsed = False
    for _ in range(60):
        pair.advance(0.25)
        if RUN not in a.engine.state.runs:
            lapsed = True
            break
    assert lapsed
    pair.advance(0.5)                       # what A sends after the lapse reaches B
    assert b.engine.cluster.run_owners.get(RUN) == "ba"
    answer = pair.hello(b, "stage", sessionKind="stage", stage=PLAN)
    assert answer["code"] in ("run_elsewhere", "run_moving"), answer


def test_a_link_made_anew_reads_the_conversations_queued_jobs_again():
    """A broker met again after it was taken for gone (its lease ended while it lived,
    cut from the database) links anew: jobs it committed for a conversation here while
    unlinked went over no link, so they are read from the store."""
    pair = Pair()
    a, b = pair.nodes
    pair.hello(b, "dest", agent="lys", channel="discord:2")
    pair.seen[b].clear()
    pair.link()
    reads = [c for c in pair.seen[b] if isinstance(c, ReadJobs)]
    assert ("lys", "discord:2") in [(r.agent, r.channel) for r in reads]
