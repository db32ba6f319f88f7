"""Links between CURVE brokers on one database: real broker processes, CURVE clients,
and a hand-made link DEALER that tries its luck without CURVE.

Each broker has its own key directory (``python -m broker keys``); it learns the other
brokers' keys from their lease rows in the shared file.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from contextlib import closing
from pathlib import Path

import apsw
import msgpack
import pytest
import zmq
from zmq.utils.monitor import recv_monitor_message

from broker.core.sessions.grants import link_proof
from client.keys import from_directory
from schemas.protocol import envelope
from tests.conftest import ROOT
from tests.integration.multi_broker import Cluster, asking, others_live, sees, wait_until

pytestmark = pytest.mark.timeout(90)


def make_keys(directory: Path, client: str) -> Path:
    subprocess.run([sys.executable, "-m", "broker", "keys", "--dir", str(directory),
                    "--client", client], cwd=ROOT, check=True, capture_output=True,
                   env=dict(os.environ, PYTHONPATH=str(ROOT)))
    return directory


def client_keys(directory: Path, client: str) -> dict[str, str]:
    keys = from_directory(directory, client)
    return {"curve_server_key": keys.server_key, "curve_public_key": keys.public_key,
            "curve_secret_key": keys.secret_key}


@pytest.fixture
def cluster():
    """No broker yet: each test starts its own, with the arguments it needs."""
    with closing(Cluster(0)) as brokers:
        yield brokers


def curve_pair(cluster: Cluster):
    """Two CURVE brokers, each with its own keys; alice on the first, bob on the second,
    once each lists the other."""
    for index, name in enumerate(("alice", "bob")):
        cluster.start(None, "--curve", str(make_keys(cluster.root / f"keys{index}", name)))
    a = cluster.connect(0, "alice", group="team", **client_keys(cluster.root / "keys0", "alice"))
    b = cluster.connect(1, "bob", group="team", **client_keys(cluster.root / "keys1", "bob"))
    wait_until(lambda: sees(a, "bob") and sees(b, "alice"), 20, "the CURVE brokers linked")
    return a, b


def test_two_curve_brokers_with_their_own_keys_carry_send_and_ask_both_ways(cluster):
    a, b = curve_pair(cluster)
    assert (others_live(a), others_live(b)) == (1, 1)
    answer = a.intercom(action="send", to="bob", message="over a CURVE link")
    assert (answer["ok"], answer["delivered"]) == (True, True)
    got = b.receive(5)
    assert (got["message"], got["from"]) == ("over a CURVE link", a.id)
    result, asker = asking(b, "alice", "and back?")
    ask = a.receive(5)
    assert ask["expectsReply"] is True
    assert a.intercom(action="reply", message="yes")["ok"]
    asker.join(10)
    assert (result["ok"], result["message"], result["messageId"]) == (True, "yes", ask["id"])


# -- a link without CURVE ------------------------------------------------------------------

def forged_hello(db: Path, broker_id: str, group: str) -> bytes:
    """A link hello as a broker on the database would say it: the proof is made with
    the database's own grant key, so only the transport stands in its way."""
    conn = apsw.Connection(str(db))
    conn.set_busy_timeout(5000)
    ((key,),) = conn.execute("SELECT value FROM meta WHERE key = 'grant_key'")
    conn.close()
    row = {"id": "00000000-0000-4000-8000-00000000e001", "name": "mallory", "groups": [group]}
    return msgpack.packb(envelope("link", broker=broker_id, proof=link_proof(bytes.fromhex(key), broker_id),
                                  endpoint="ipc:///nowhere.sock", until=time.time() + 60,
                                  sessions=[row]))


def add_lease_row(db: Path, broker_id: str, curve_public: str) -> None:
    conn = apsw.Connection(str(db))
    conn.set_busy_timeout(5000)
    conn.execute("INSERT INTO brokers (broker_id, pid, endpoint, started_at, lease_until, curve_public) "
                 "VALUES (?, 1, 'ipc:///nowhere.sock', ?, ?, ?)",
                 (broker_id, time.time(), time.time() + 60, curve_public))
    conn.close()


def say_on_link(endpoint: str, frame: bytes, curve: tuple[bytes, bytes, bytes] | None) -> int:
    """Connect a DEALER (a CURVE client when ``curve`` is (public, secret, server key)),
    send ``frame``, and return the first handshake event its monitor reports (the socket
    is closed then: a failed handshake never carries the frame)."""
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.linger = 0
    if curve is not None:
        sock.curve_publickey, sock.curve_secretkey, sock.curve_serverkey = curve
    monitor = sock.get_monitor_socket(zmq.EVENT_HANDSHAKE_SUCCEEDED | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
                                      | zmq.EVENT_HANDSHAKE_FAILED_AUTH | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL)
    try:
        sock.connect(endpoint)
        sock.send(frame)
        assert monitor.poll(10_000), "no handshake within 10 s"
        return recv_monitor_message(monitor)["event"]
    finally:
        sock.disable_monitor()
        monitor.close(linger=0)
        sock.close(linger=0)


def test_a_plain_dealer_cannot_speak_link_to_a_curve_broker_even_with_the_databases_proof(cluster):
    keys = make_keys(cluster.root / "keys0", "alice")
    broker = cluster.start(None, "--curve", str(keys))
    alice = cluster.connect(0, "alice", group="team", **client_keys(keys, "alice"))
    # A broker row for "intruder" with a key of its own, as a broker on the file has.
    public, secret = zmq.curve_keypair()
    add_lease_row(cluster.db, "intruder", public.decode())
    wait_until(lambda: others_live(alice) == 1, 15, "the intruder's row read")
    hello = forged_hello(cluster.db, "intruder", "team")
    assert say_on_link(broker.endpoint, hello, None) != zmq.EVENT_HANDSHAKE_SUCCEEDED
    assert not sees(alice, "mallory")
    # The same hello over CURVE with the key the row names is a link like any other.
    server_key = client_keys(keys, "alice")["curve_server_key"].encode()
    assert say_on_link(broker.endpoint, hello, (public, secret, server_key)) == zmq.EVENT_HANDSHAKE_SUCCEEDED
    wait_until(lambda: sees(alice, "mallory"), 10, "the CURVE hello taken")


# -- a CURVE broker and a plain one --------------------------------------------------------

def test_a_curve_broker_and_a_plain_one_do_not_link_and_each_says_why_once(cluster):
    keys = make_keys(cluster.root / "keys0", "alice")
    cluster.start(None, "--curve", str(keys))
    cluster.start(None)
    a = cluster.connect(0, "alice", group="team", **client_keys(keys, "alice"))
    b = cluster.connect(1, "bob", group="team")
    for session, other in ((a, "bob"), (b, "alice")):
        warnings = wait_until(lambda: session.intercom(action="status")["broker"].get("warnings"),
                              15, "the other broker noted")
        assert len(warnings) == 1 and "--curve" in warnings[0]
        broker = session.intercom(action="status")["broker"]
        assert (broker["routing"], broker["otherBrokersLive"]) == ("single-node", 0)
        assert not sees(session, other)
    for proc in cluster.brokers:
        assert proc.stop() == 0                  # neither hung nor crashed
        lines = [json.loads(line) for line in proc.log.read_text().splitlines()
                 if '"broker_not_linked"' in line]
        assert len(lines) == 1 and "--curve" in lines[0]["reason"], lines


def test_a_curve_stage_sent_to_its_runs_broker_is_told_that_brokers_key(cluster):
    import shutil

    from tests.integration.workflow_helpers import host_run, start_stage

    keys0 = make_keys(cluster.root / "keys0", "alice")
    keys1 = make_keys(cluster.root / "keys1", "plan")
    # The stage's key is allowed on both brokers; its client knows only broker 1's key.
    shutil.copy(keys1 / "clients" / "plan.key", keys0 / "clients" / "plan.key")
    for index, keys in enumerate((keys0, keys1)):
        cluster.start(None, "--curve", str(keys))
    host, run = host_run(lambda name: cluster.connect(0, name, **client_keys(keys0, "alice")),
                         [{"name": "plan"}])
    watcher = cluster.connect(1, "watcher", group=f"workflow:{run}", **client_keys(keys1, "plan"))
    wait_until(lambda: watcher.intercom(action="send", to=f"workflow:{run}/plan",
                                        message="x").get("queued"), 20,
               "broker 1 forwards to the run's broker")
    stage = start_stage(lambda name, **kw: cluster.connect(1, name, **kw,
                                                           **client_keys(keys1, "plan")),
                        run, "plan")
    host_broker = host.intercom(action="status")["broker"]["id"]
    assert stage.intercom(action="status")["broker"]["id"] == host_broker
