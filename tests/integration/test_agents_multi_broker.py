"""respond, list_sessions and invoke between two broker processes on one SQLite file.

The agent is configured (``invoke = true``, an owner) in both brokers' data dirs
before they start; its conversations are split across the brokers, clients use the
public Client API, and every wait is a reply or an event with a deadline. What the
engines decide across brokers without a PUB, a restart, a kill or the database's rows
is tested in memory in tests/unit/test_agents_across_brokers.py.
"""

from __future__ import annotations

import time

import msgpack
import pytest
import zmq

from .agent_helpers import configure_agent
from .multi_broker import Cluster, database_for, on_both_stores, others_live, query, wait_until

pytestmark = pytest.mark.timeout(90)

AGENT = "lys"
WAIT_S = 15.0


@pytest.fixture
def two(request, store_kind):
    cluster = Cluster(0, db=database_for(store_kind, request))
    for index in range(2):
        data_dir = cluster.root / f"b{index}"
        data_dir.mkdir()
        configure_agent(data_dir, AGENT, owner="discord:owner", invoke=True)
        cluster.start(data_dir)
    yield cluster
    cluster.close()


def conversation_alone(cluster: Cluster, index: int, channel: str, **kwargs):
    return cluster.connect(index, channel.replace(":", "-"), agent=AGENT, channel=channel, **kwargs)


def conversation(cluster: Cluster, index: int, channel: str, **kwargs):
    session = conversation_alone(cluster, index, channel, **kwargs)
    wait_until(lambda: others_live(session) == 1, WAIT_S, "the brokers count each other")
    return session


def split(cluster: Cluster):
    """The caller's conversation discord:1 on broker 0, discord:2 on broker 1, once
    broker 0 lists discord:2 as connected."""
    caller = conversation(cluster, 0, "discord:1")
    dest = conversation(cluster, 1, "discord:2")
    connected_as_seen_by(caller, "discord:2", True)
    return caller, dest


def first_published(pub_endpoint: str, topic: str, send, timeout: float = WAIT_S) -> tuple[str, dict]:
    """Call ``send`` until an event under ``topic`` shows on that PUB (a SUB is a slow
    joiner: the first sends may go before its subscription arrives); that event."""
    sub = zmq.Context.instance().socket(zmq.SUB)
    sub.linger = 0
    sub.connect(pub_endpoint)
    sub.subscribe(topic.encode())
    try:
        deadline = time.monotonic() + timeout
        while True:
            send()
            if sub.poll(200):
                frame_topic, body = sub.recv_multipart()
                return frame_topic.decode(), msgpack.unpackb(body, raw=False)
            assert time.monotonic() < deadline, f"nothing published under {topic}"
    finally:
        sub.close()


def row_of(session, channel: str) -> dict | None:
    rows = [r for r in session.list_sessions()["sessions"] if r["session"] == channel]
    return rows[0] if rows else None


def connected_as_seen_by(session, channel: str, connected: bool) -> None:
    wait_until(lambda: (row_of(session, channel) or {}).get("connected") is connected, WAIT_S,
               f"{channel} listed with connected={connected}")


def next_of(session, name: str, timeout: float = WAIT_S) -> dict:
    deadline = time.monotonic() + timeout
    while (left := deadline - time.monotonic()) > 0:
        event = session.next_event(left)
        if event is not None and event.get("event") == name:
            return event
    raise AssertionError(f"no {name} event within {timeout:g} s")


def none_of(session, name: str, seconds: float) -> list[dict]:
    """The ``name`` events in the next ``seconds``: an absence check over a stated time."""
    deadline = time.monotonic() + seconds
    got = []
    while (left := deadline - time.monotonic()) > 0:
        event = session.next_event(left)
        if event is not None and event.get("event") == name:
            got.append(event)
    return got


def job_states(cluster: Cluster) -> dict[str, str]:
    return dict(query(cluster.db, "SELECT id, state FROM invocations"))


# -- respond ------------------------------------------------------------------------

def test_a_respond_to_a_channel_on_the_other_broker_reaches_it_in_band_and_on_that_brokers_pub(two):
    caller, dest = split(two)

    def respond() -> None:
        result = caller.respond(content="over there", channel="discord:2")
        assert (result["ok"], result["final"], result["channel"]) == (True, False, "discord:2")

    topic, published = first_published(two.brokers[1].pub_endpoint, "channel:discord:2", respond)
    assert topic == "channel:discord:2"
    assert (published["content"], published["fromSession"]) == ("over there", "discord:1")
    inband = next_of(dest, "output")
    assert (inband["channel"], inband["content"], inband["final"]) == ("discord:2", "over there", False)


# -- invoke --------------------------------------------------------------------------

def test_an_invoke_of_a_conversation_on_the_other_broker_is_handed_over_once_and_finished(two):
    caller, dest = split(two)
    queued = caller.invoke(session="discord:2", reason="check in, please")
    assert (queued["ok"], queued["queued"], queued["session"]) == (True, True, "discord:2")
    event = next_of(dest, "invocation")
    assert (event["id"], event["fromSession"], event["reason"]) == (
        queued["id"], "discord:1", "check in, please")
    assert dest.finish_invocation(event["id"], ok=True)["ok"]
    assert job_states(two) == {queued["id"]: "done"}
    assert none_of(dest, "invocation", 1.5) == []


def test_a_job_for_an_offline_conversation_reaches_it_on_the_other_broker_exactly_once(two):
    caller, dest = split(two)
    dest.close()
    connected_as_seen_by(caller, "discord:2", False)
    queued = caller.invoke(session="discord:2", reason="while you were away")
    assert queued["queued"] is True                 # committed by broker 0
    assert row_of(caller, "discord:2")["queuedInvocations"] == 1
    back = conversation(two, 1, "discord:2")       # comes back on broker 1
    event = next_of(back, "invocation")
    assert event["id"] == queued["id"]
    assert job_states(two) == {queued["id"]: "started"}
    assert back.finish_invocation(event["id"], ok=True)["ok"]
    assert none_of(back, "invocation", 1.5) == []
    assert row_of(caller, "discord:2")["queuedInvocations"] == 0


@on_both_stores
def test_a_job_both_brokers_loaded_at_their_start_is_handed_over_by_one_only(two):
    caller, dest = split(two)
    dest.close()
    connected_as_seen_by(caller, "discord:2", False)
    queued = caller.invoke(session="discord:2", reason="once only")
    second_dir = two.brokers[1].data_dir
    two.brokers[1].stop()
    two.start(second_dir)                           # broker 2 loads the queued job too
    back = conversation(two, 2, "discord:2")
    event = next_of(back, "invocation")
    assert event["id"] == queued["id"]
    back.close()                                    # the started job fails; never again
    connected_as_seen_by(caller, "discord:2", False)
    again = conversation(two, 0, "discord:2")       # on broker 0, which also held it
    assert none_of(again, "invocation", 2.0) == []
    assert job_states(two) == {queued["id"]: "failed"}


def test_a_job_whose_broker_was_killed_reaches_its_destination_on_the_other_broker(two):
    caller, dest = split(two)
    dest.close()
    connected_as_seen_by(caller, "discord:2", False)
    queued = caller.invoke(session="discord:2", reason="from a broker about to die")
    assert queued["queued"] is True                 # committed by broker 0, held only there
    two.brokers[0].kill()
    back = conversation_alone(two, 1, "discord:2")  # broker 1 reads it from the database
    event = next_of(back, "invocation")
    assert event["id"] == queued["id"]
    assert back.finish_invocation(event["id"], ok=True)["ok"]
    assert job_states(two) == {queued["id"]: "done"}
