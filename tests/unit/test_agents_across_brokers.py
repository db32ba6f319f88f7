"""respond, list_sessions and invoke between two engines on one store, links wired in memory.

The agent ``lys`` has a conversation on each broker; each test drives both engines
with the fake clock of :mod:`tests.unit.brokers_in_memory` and compares what each broker
sends, publishes and keeps.
"""

from __future__ import annotations


from broker.core import Publish
from broker.core.kernel.commands import ReadJobs
from broker.core.agents.invocation_table import Job
from broker.core.kernel.records import InvocationSaved, InvocationState
from schemas.agent_config import AgentSettings
from schemas.protocol import envelope
from tests.unit.harness import result_for

from .brokers_in_memory import Node, Pair
from broker.core.kernel import inputs

REASON = "Time for the check-in."


def agent_pair() -> Pair:
    pair = Pair()
    for node in (pair.a, pair.b):
        node.set_agents(lys=AgentSettings(owner_id="discord:owner", invoke=True))
    pair.link()
    return pair


def request(pair: Pair, node: Node, identity: bytes, kind: str, msg_id: str, **fields) -> dict | None:
    """Send a request and commit what it wrote on both brokers; its answer, if any yet."""
    pair.feed(node, identity, envelope(kind, id=msg_id, **fields))
    seen = list(pair.seen[node])
    pair.settle()
    seen += pair.seen[node]
    found = [c.env for c in seen if getattr(c, "identity", None) == identity
             and c.env.get("k") == "result" and c.env.get("re") == msg_id]
    return found[0] if found else None


def events(pair: Pair, node: Node, identity: bytes, name: str) -> list[dict]:
    return [e for e in pair.sent(node, identity, "event") if e["event"] == name]


def published(pair: Pair, node: Node, topic: str) -> list[dict]:
    return [c.env for c in pair.seen[node] if isinstance(c, Publish) and c.topic == topic]


def sessions(pair: Pair, node: Node, identity: bytes) -> dict[str, dict]:
    rows = request(pair, node, identity, "sessions", f"s-{identity.decode()}-{node.now}")["sessions"]
    return {row["session"]: row for row in rows}


# -- conversations ------------------------------------------------------------------------

def test_a_conversation_opened_on_the_other_broker_is_listed_and_remembered_when_it_leaves():
    pair = agent_pair()
    pair.hello(pair.a, "caller", agent="lys", channel="discord:1")
    pair.hello(pair.b, "dest", agent="lys", channel="discord:2")
    pair.hello(pair.b, "brief", agent="lys", channel="discord:3", persistent=False)
    rows = sessions(pair, pair.a, b"caller")
    assert {c: (r["connected"], r["persistent"]) for c, r in rows.items()} == {
        "discord:1": (True, True), "discord:2": (True, True), "discord:3": (True, False)}
    pair.feed(pair.b, b"dest", envelope("bye"))
    pair.feed(pair.b, b"brief", envelope("bye"))
    rows = sessions(pair, pair.a, b"caller")
    assert {c: r["connected"] for c, r in rows.items()} == {"discord:1": True, "discord:2": False}
    assert rows["discord:2"]["persistent"] is True
    noted = request(pair, pair.a, b"caller", "respond", "r1", content="noted", channel="discord:2")
    assert (noted["ok"], noted["channel"]) == (True, "discord:2")     # remembered: it takes it


def test_a_channel_held_on_the_other_broker_is_in_use_here():
    pair = agent_pair()
    pair.hello(pair.b, "dest", agent="lys", channel="discord:2")
    welcome = pair.hello(pair.a, "again", agent="lys", channel="discord:2")
    assert welcome["code"] == "channel_in_use"


def test_a_conversation_whose_client_moves_to_the_other_broker_keeps_its_channel_there():
    pair = agent_pair()
    first = pair.hello(pair.a, "dest", agent="lys", channel="discord:2")
    pair.b.now += 2.5            # A went quiet (killed): not yet given up on, but suspect
    welcome = pair.hello(pair.b, "dest", agent="lys", channel="discord:2",
                         sessionId=first["sessionId"], token=first["token"])
    assert (welcome["ok"], welcome["reclaimed"], welcome["channel"]) == (True, True, "discord:2")


# -- respond ------------------------------------------------------------------------------

def test_a_respond_to_a_channel_on_the_other_broker_reaches_its_session_and_both_pubs():
    pair = agent_pair()
    pair.hello(pair.a, "caller", agent="lys", channel="discord:1")
    pair.hello(pair.b, "dest", agent="lys", channel="discord:2")
    result = request(pair, pair.a, b"caller", "respond", "r1", content="hello there",
                     channel="discord:2")
    assert (result["ok"], result["final"], result["channel"]) == (True, False, "discord:2")
    pair.feed(pair.a, b"caller", envelope("respond", id="r2", content="again", channel="discord:2"))
    (inband,) = events(pair, pair.b, b"dest", "output")
    assert (inband["content"], inband["fromSession"], inband["final"]) == ("again", "discord:1", False)
    assert published(pair, pair.b, "channel:discord:2") == [inband]
    assert published(pair, pair.a, "channel:discord:2") == [inband]


def test_an_output_acknowledged_on_the_other_broker_reaches_its_sender():
    pair = agent_pair()
    pair.hello(pair.a, "caller", agent="lys", channel="discord:1")
    pair.hello(pair.b, "dest", agent="lys", channel="discord:2")
    pair.feed(pair.a, b"caller", envelope("respond", id="r1", content="ack me", channel="discord:2"))
    sent = result_for(pair.seen[pair.a], b"caller", "r1")
    (output,) = events(pair, pair.b, b"dest", "output")
    assert (output["content"], output["outputId"]) == ("ack me", sent["outputId"])
    acked = request(pair, pair.b, b"dest", "ack_output", "a1", outputId=output["outputId"])
    assert acked["told"] is True
    (told,) = events(pair, pair.a, b"caller", "output_acked")
    assert (told["outputId"], told["channel"]) == (sent["outputId"], "discord:2")


def test_last_names_the_most_recently_active_conversation_whichever_broker_holds_it():
    pair = agent_pair()
    pair.hello(pair.a, "caller", agent="lys", channel="discord:1")
    pair.hello(pair.b, "dest", agent="lys", channel="discord:2")
    pair.a.now = pair.b.now = 5.0
    pair.feed(pair.a, b"caller", envelope("turn"))
    pair.a.now = pair.b.now = 10.0
    pair.feed(pair.b, b"dest", envelope("turn"))
    result = request(pair, pair.a, b"caller", "respond", "r1", content="x", channel="last")
    assert result["channel"] == "discord:2"


# -- invoke -------------------------------------------------------------------------------

def test_an_invoke_of_a_conversation_on_the_other_broker_is_handed_over_there_once():
    pair = agent_pair()
    pair.hello(pair.a, "caller", agent="lys", channel="discord:1")
    pair.hello(pair.b, "dest", agent="lys", channel="discord:2")
    pair.feed(pair.a, b"caller", envelope("invoke", id="i1", session="discord:2", reason=REASON))
    pair.settle()                                   # A commits; the job moves to B
    queued = [c.env for c in pair.seen[pair.a] if getattr(c, "identity", None) == b"caller"
              and c.env.get("re") == "i1"]
    assert queued and queued[0]["queued"] is True
    pair.settle()                                   # B commits the start
    (event,) = events(pair, pair.b, b"dest", "invocation")
    assert (event["id"], event["fromSession"], event["reason"]) == (
        queued[0]["id"], "discord:1", REASON)
    # (the request's id is the job's)
    assert request(pair, pair.b, b"dest", "finish_invocation", event["id"], ok=True)["ok"]
    assert pair.store.load().invocations == []
    assert pair.a.engine.state.invocations.by_id == {}


def test_a_job_for_an_offline_conversation_goes_to_the_broker_it_reconnects_to():
    pair = agent_pair()
    pair.hello(pair.a, "caller", agent="lys", channel="discord:1")
    pair.hello(pair.b, "dest", agent="lys", channel="discord:2")
    pair.feed(pair.b, b"dest", envelope("bye"))
    answer = request(pair, pair.a, b"caller", "invoke", "i1", session="discord:2", reason=REASON)
    assert answer["queued"] is True
    assert sessions(pair, pair.a, b"caller")["discord:2"]["queuedInvocations"] == 1
    pair.hello(pair.b, "dest2", agent="lys", channel="discord:2")
    pair.settle()
    (event,) = events(pair, pair.b, b"dest2", "invocation")
    assert event["id"] == answer["id"]
    assert [j.state for j in pair.store.load().invocations] == ["started"]


def test_a_job_both_brokers_loaded_is_handed_over_by_one_of_them_only():
    pair = Pair()
    job = InvocationSaved("j1", "lys", "discord:2", "discord:1", REASON, 0.0, "c/1")
    pair.store.apply([job])
    for node in (pair.a, pair.b):
        node.engine.restore(pair.store.load())
        node.set_agents(lys=AgentSettings(invoke=True))
    pair.link()
    pair.hello(pair.b, "dest", agent="lys", channel="discord:2")
    pair.settle()
    pair.settle()
    assert [e["id"] for e in events(pair, pair.b, b"dest", "invocation")] == ["j1"]
    assert events(pair, pair.a, b"dest", "invocation") == []
    assert pair.a.engine.state.invocations.by_id == {}


def test_a_start_the_store_refuses_sends_nothing_and_forgets_the_job():
    pair = agent_pair()
    job = InvocationSaved("j1", "lys", "discord:2", "discord:1", REASON, 0.0, "c/1")
    # B holds a copy still queued, as loaded at its start; another broker started it since.
    pair.b.engine.state.invocations.add(Job.from_record(job))
    pair.store.apply([job, InvocationState("j1", "started", 0.0)])
    pair.hello(pair.b, "dest", agent="lys", channel="discord:2")
    pair.settle()
    assert events(pair, pair.b, b"dest", "invocation") == []
    assert pair.b.engine.state.invocations.by_id == {}
    assert pair.b.engine.stats["invocations.taken"] == 1


def reads(pair: Pair, node: Node) -> list[ReadJobs]:
    return [c for c in pair.seen[node] if isinstance(c, ReadJobs)]


def test_a_job_of_a_broker_that_died_is_read_from_the_store_when_its_destination_opens():
    pair = agent_pair()
    # Committed by a third broker that died before its destination connected anywhere.
    pair.store.apply([InvocationSaved("j1", "lys", "discord:2", "discord:1", REASON, 0.0, "c/1")])
    pair.hello(pair.b, "dest", agent="lys", channel="discord:2")
    (read,) = reads(pair, pair.b)
    assert (read.agent, read.channel) == ("lys", "discord:2")
    rows = pair.store.queued_jobs(read.agent, read.channel)
    pair.deliver(pair.b, pair.b.engine.handle(inputs.JobsRead(rows, pair.b.now)))
    pair.settle()
    assert [e["id"] for e in events(pair, pair.b, b"dest", "invocation")] == ["j1"]
    assert request(pair, pair.b, b"dest", "finish_invocation", "j1", ok=True)["ok"]
    # The same rows again (an answer read before the start committed): refused by the
    # store's compare-and-set, never handed over again.
    pair.seen[pair.b] = []
    pair.deliver(pair.b, pair.b.engine.handle(inputs.JobsRead(rows, pair.b.now)))
    pair.settle()
    assert events(pair, pair.b, b"dest", "invocation") == []
    assert pair.b.engine.stats["invocations.taken"] == 1
    assert pair.store.load().invocations == []


def test_a_conversation_opening_on_a_broker_alone_reads_nothing():
    pair = Pair()
    pair.a.set_agents(lys=AgentSettings(invoke=True))
    pair.hello(pair.a, "dest", agent="lys", channel="discord:2")
    assert reads(pair, pair.a) == []
