"""Nothing twice across a failover: a client whose broker is killed resends what it
was owed to the next broker, and nothing it was (or would have been) answered is
queued or handed over twice.

Real broker processes on one SQLite file (tests/integration/multi_broker.py). The
window is made real, not simulated: the sender's reading is held up by its own
bounded inbox (messages it does not take fill it, then its socket, then its broker's
queue for it), so the ``queued`` answers its broker relays wait behind them, and the
kill -9 loses them. Nothing sleeps: every wait is for an answer or a condition.
"""

from __future__ import annotations

import json
import uuid

import pytest

from schemas.limits import CALL_TIMEOUT_S
from schemas.protocol import envelope
from tests.integration.multi_broker import Cluster, database_for, on_both_stores, sees, wait_until
from tests.integration.workflow_helpers import host_run, ok, path, start_stage, take

pytestmark = pytest.mark.timeout(120)

SENDS = 40                 # sticky sends in flight at the kill (under the 50 per stage)
FILLER = 300               # messages the sender does not take, 4 KiB each: past what its
FILLER_TEXT = "f" * 4096   # socket holds (32 frames and the kernel's buffers)


@pytest.fixture
def two(request, store_kind):
    cluster = Cluster(2, db=database_for(store_kind, request))
    yield cluster
    cluster.close()


def connect_both(cluster: Cluster, name: str, **kwargs):
    """A session on broker 0 that fails over to broker 1."""
    from client import Client
    session = Client.connect(name=name, endpoint=[b.endpoint for b in cluster.brokers],
                             timeout=15, **kwargs)
    cluster.opened.append(session)
    return session


def wait_mirrored(cluster: Cluster, name: str, group: str) -> str:
    """Broker 1's id, once it mirrors broker 0's session ``name`` (in ``group``): broker
    0 linked back and told it everything before, its runs too. The failovers below are
    from a cluster that formed: a broker 0 killed before it heard of broker 1 never
    told it of its runs, so broker 1 does not adopt them (it takes a host's
    register_run for a run of its own)."""
    watcher = cluster.connect(1, "watcher", group=group)
    wait_until(lambda: sees(watcher, name), 15, f"broker 1 mirrors {name}")
    watcher.close()
    return watcher.welcome["brokerId"]


def on_broker(session, broker_id: str) -> str:
    """``session``'s id once it is connected to ``broker_id`` (a request made while it
    fails over is answered after its welcome there)."""
    def there():
        status = session.intercom(action="status")
        return status["broker"]["id"] == broker_id and status["sessionId"]
    return wait_until(there, 30, f"{session.name} is on broker {broker_id}")


def queued_count(host, run: str, stage: str) -> int:
    (workflow,) = [w for w in host.intercom(action="list")["workflows"] if w["runId"] == run]
    return next(s["queued"] for s in workflow["stages"] if s["name"] == stage)


def stopped_stats(broker) -> dict[str, int]:
    """Stop ``broker`` cleanly and read the counters its last log line names."""
    broker.stop()
    (line,) = [line for line in broker.log.read_text(errors="replace").splitlines()
               if '"broker_stopping"' in line]
    return json.loads(line)


def send_with_id(session, to: str, message: str, msg_id: str) -> dict:
    """A send under an id the test chose (the public call picks its own): the resend a
    client makes of a request still owed an answer after a failover."""
    future = session._transport.request(
        envelope("call", id=msg_id, action="send", to=to, message=message))
    return future.result(CALL_TIMEOUT_S)


@on_both_stores
def test_sticky_sends_owed_answers_at_a_kill_9_of_the_senders_broker_are_queued_once(two):
    first, second = two.brokers
    host, run = host_run(lambda name: two.connect(1, name), [{"name": "plan"}])
    sender = connect_both(two, "sender", group=f"workflow:{run}", inbox_limit_bytes=1024)
    filler = two.connect(0, "filler", group=f"workflow:{run}")
    wait_until(lambda: any(r["name"] == "sender" for r in host.intercom(action="list")["sessions"]),
               15, "the run's broker mirrors the sender")

    for _ in range(FILLER):     # one message a round trip: one frame each
        result = filler.intercom(action="send", to="sender", message=FILLER_TEXT)
        if not result.get("ok"):
            assert result["code"] == "target_backlogged", result
            break
    wait_until(lambda: sender.inbox_statistics().paused, 15, "the sender's reading is held up")

    target = path(run, "plan")
    futures = [sender.send_nowait(target, f"s{n:02d}") for n in range(SENDS)]
    wait_until(lambda: queued_count(host, run, "plan") == SENDS, 30,
               "the run's broker committed every send")
    assert not any(f.done() for f in futures), "an answer got through: no window"
    first.kill()

    while sender.receive(2.0) is not None:    # what reached the socket before the kill
        pass
    answers = [f.result(60) for f in futures]
    assert all(a.get("ok") and a.get("queued") for a in answers), answers
    assert sorted(a["position"] for a in answers) == list(range(1, SENDS + 1)), answers
    assert queued_count(host, run, "plan") == SENDS

    stage = start_stage(lambda name, **kw: two.connect(1, name, **kw), run, "plan")
    assert [m["message"] for m in take(stage, SENDS)] == [f"s{n:02d}" for n in range(SENDS)]
    marker = ok(host.intercom(action="send", to=target, message="marker"))
    assert marker.get("delivered") is True, marker
    assert stage.receive(10)["message"] == "marker"      # nothing was queued twice

    stats = stopped_stats(second)
    assert stats.get("dedup.retries", 0) > 0, f"no send was resent: no window ({stats})"


def test_a_live_send_resent_after_a_failover_is_not_handed_to_the_receiver_twice(two):
    sender = connect_both(two, "sender")
    receiver = connect_both(two, "receiver")
    next_broker = wait_mirrored(two, "receiver", "default")
    msg_id = str(uuid.uuid4())
    assert send_with_id(sender, "receiver", "once", msg_id)["delivered"] is True
    assert receiver.receive(10)["id"] == msg_id

    receiver_id = receiver.id
    two.brokers[0].kill()
    # Both fail over, each in its own time: the resend waits for the receiver to be
    # there (before, broker 1 knows no "receiver": broker 0's mirrors left with it).
    assert on_broker(receiver, next_broker) == receiver_id
    # The sender resends under the same id, as it does for a send whose answer the
    # dead broker never sent. The next broker has never seen the id.
    again = send_with_id(sender, "receiver", "once", msg_id)
    assert again.get("delivered") is True, again
    ok(sender.intercom(action="send", to="receiver", message="marker"))
    assert receiver.receive(10)["message"] == "marker"
    assert receiver.inbox_statistics().duplicates_dropped == 1


def resumed(answer: dict) -> bool:
    """True once ``register_run`` took the run; False while its old host's lease runs."""
    if answer.get("code") in ("broker_unreachable", "run_moving"):
        return False
    return ok(answer) is not None


def test_a_send_the_dead_owner_committed_is_not_queued_again_by_the_next_broker(two):
    """The run's own broker commits an entry and dies; its host resumes the run on the
    next broker, which never saw the entry, and the sender resends it there: the store
    holds one entry per request, so it is answered as first and kept once, even after
    that broker restarts and reads every entry back."""
    host = connect_both(two, "host")
    run = f"run-{uuid.uuid4().hex[:10]}"
    stages = [{"name": "plan"}]
    ok(host.register_run(run, stages))
    sender = connect_both(two, "sender", group=f"workflow:{run}")
    next_broker = wait_mirrored(two, "sender", f"workflow:{run}")   # and knows the run
    msg_id = str(uuid.uuid4())
    first = send_with_id(sender, path(run, "plan"), "exactly once", msg_id)
    assert (first.get("queued"), first.get("position")) == (True, 1), first

    ids = (host.id, sender.id)
    two.brokers[0].kill()
    # Both get their ids back there: the run is the host's, the entry the sender's.
    assert (on_broker(host, next_broker), on_broker(sender, next_broker)) == ids
    # The host resumes its run on broker 1, once the dead broker's lease has ended
    # (until then the run is unreachable there, or moving).
    wait_until(lambda: resumed(host.register_run(run, stages)), 30, "broker 1 takes the run")
    again = send_with_id(sender, path(run, "plan"), "exactly once", msg_id)
    assert again == first

    second = two.brokers[1]
    second.kill()
    two.start(second.data_dir)                  # broker 1 again: it loads every entry
    grants = ok(host.register_run(run, stages))["grants"]
    stage = start_stage(lambda name, **kw: two.connect(2, name, **kw), run, "plan",
                        grant=grants[path(run, "plan")])
    (msg,) = take(stage, 1)
    assert (msg["id"], msg["message"]) == (msg_id, "exactly once")
    ok(host.intercom(action="send", to=path(run, "plan"), message="marker"))
    assert stage.receive(10)["message"] == "marker"
    assert stage.inbox_statistics().duplicates_dropped == 0
