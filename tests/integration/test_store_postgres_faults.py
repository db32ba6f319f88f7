"""The PostgreSQL store through real broker processes and a real server: a server that
is not there at start, one that goes away while serving and comes back, and brokers
that reach each other at the endpoint they advertise.

At start, a server that refuses or never answers ends the broker with one
``broker: ...`` line naming the URL with its password masked, exit status 2, within
seconds. While serving, a server gone makes durable requests answer
``store_unavailable`` at once while live traffic goes on; the broker reconnects by
itself when the server is back, and nothing it answered ``queued`` is lost, across
the server's restart and a kill -9 of the broker. A server cut off (packets dropped,
not refused: a proxy that goes silent) costs the request in flight a bounded wait,
well under a client's timeout, and every later one nothing. Every wait is on a
process exit, a reply, or a condition with a deadline.
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import time
import types
from pathlib import Path

import pytest

from schemas.errors import error_text
from tests.conftest import BrokerProcess, start_broker
from tests.integration.conftest import child_env, make_tmp, wait_ready
from tests.integration.multi_broker import Cluster, others_live, query, sees, wait_until
from tests.integration.workflow_helpers import (assert_refused, granted, new_run_id, ok, path,
                                                queue, run_row, send, stage_row, start_stage,
                                                take)
from tests.blackhole_proxy import BlackholeProxy
from tests.postgres_server import free_port

pytestmark = pytest.mark.timeout(120)

START_BOUND_S = 8.0        # python start-up (~0.5-3 s on a busy VM) + libpq's 3 s timeout
FAST_ANSWER_S = 3.0        # a durable send refused while the server is gone
CUT_ANSWER_S = 7.0         # the first durable send once the server is cut off: the call
                           # limit (4 s) and the first reconnect's wait (0.5 s), with slack
KNOWN_DOWN_ANSWER_S = 1.0  # each later one, the outage known (it never touches the network)
STAGES = [{"name": "plan"}]


def start_once(data_dir: Path, db: str) -> tuple[int, str, float]:
    """Run ``python -m broker`` on ``db`` until it exits: (status, stderr, seconds)."""
    command = [sys.executable, "-m", "broker", "--data-dir", str(data_dir), "--db", db,
               "--endpoint", f"ipc://{data_dir}/broker.sock",
               "--pub-endpoint", f"ipc://{data_dir}/presence.sock"]
    started = time.monotonic()
    done = subprocess.run(command, capture_output=True, text=True, timeout=60,
                          env=child_env(data_dir), cwd=Path(__file__).resolve().parents[2])
    return done.returncode, done.stderr, time.monotonic() - started


@pytest.fixture
def tmp():
    path = make_tmp()
    yield path
    import shutil
    shutil.rmtree(path, ignore_errors=True)


# -- at start ------------------------------------------------------------------------------

def assert_one_masked_line(result: tuple[int, str, float], url_shown: str) -> str:
    status, stderr, seconds = result
    lines = stderr.splitlines()
    assert (status, len(lines)) == (2, 1), (status, stderr)
    assert lines[0].startswith("broker: ") and url_shown in lines[0], stderr
    assert "s3cret" not in stderr, stderr
    assert seconds < START_BOUND_S, (seconds, stderr)
    return lines[0]


def test_a_server_refusing_connections_at_start_ends_the_broker_in_one_masked_line(tmp):
    port = free_port()
    line = assert_one_masked_line(start_once(tmp, f"postgresql://bus:s3cret@127.0.0.1:{port}/bus"),
                                  f"postgresql://bus:***@127.0.0.1:{port}/bus")
    assert "start the server" in line, line
    assert not (tmp / "broker.sock").exists()


def test_a_server_that_never_answers_at_start_ends_the_broker_within_seconds(tmp):
    with socket.socket() as silent:           # accepts TCP, never speaks PostgreSQL
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        port = silent.getsockname()[1]
        line = assert_one_masked_line(start_once(tmp, f"postgresql://bus:s3cret@127.0.0.1:{port}/bus"),
                                      f"postgresql://bus:***@127.0.0.1:{port}/bus")
    assert "timeout" in line, line


def test_a_missing_database_is_named_with_how_to_create_it(tmp, postgres_server):
    url = postgres_server.url("no_such_bus")
    line = assert_one_masked_line(start_once(tmp, url), url)
    assert "does not exist" in line and "createdb" in line, line


# -- while serving -------------------------------------------------------------------------

def timed(call) -> tuple[dict, float]:
    started = time.monotonic()
    result = call()
    return result, time.monotonic() - started


@contextlib.contextmanager
def serving(tmp: Path, db: str):
    """A broker on ``db`` with host, alice and bob, and a run whose stage ``plan`` has one
    entry queued ("before"). ``bed.connect`` connects to whichever broker ``bed.broker``
    is now; every session is closed and that broker stopped at the end."""
    from client import Client
    bed = types.SimpleNamespace(broker=start_broker(tmp, "--db", db), sessions=[])

    def connect(name: str, **kwargs):
        session = Client.connect(name=name, endpoint=bed.broker.endpoint, timeout=15, **kwargs)
        bed.sessions.append(session)
        return session

    bed.connect = connect
    try:
        wait_ready(bed.broker.endpoint, bed.broker.proc)
        bed.host, bed.alice, bed.bob = connect("host"), connect("alice"), connect("bob")
        bed.run = new_run_id()
        granted(ok(bed.host.register_run(bed.run, STAGES)))
        assert queue(bed.host, path(bed.run, "plan"), "before")["position"] == 1
        yield bed
    finally:
        for session in bed.sessions:
            session.close()
        bed.broker.stop()


def test_a_server_gone_refuses_durable_sends_at_once_and_nothing_queued_is_lost(tmp, own_postgres):
    db = own_postgres.schema_url()
    with serving(tmp, db) as bed:
        host, run = bed.host, bed.run
        own_postgres.stop("immediate")            # as a crash of the server would
        refused, seconds = timed(lambda: send(host, path(run, "plan"), "while gone"))
        assert_refused(refused, "store_unavailable", error_text("store_unavailable"))
        assert seconds < FAST_ANSWER_S, seconds
        refused, seconds = timed(lambda: host.register_run(new_run_id(), STAGES))
        assert_refused(refused, "store_unavailable")
        assert seconds < FAST_ANSWER_S, seconds
        assert ok(send(bed.alice, bed.bob.id, "live while gone")).get("delivered") is True
        assert bed.bob.receive(10)["message"] == "live while gone"
        bed.connect("carol")                      # her identity waits for the server

        own_postgres.start()
        deadline = time.monotonic() + 30
        while not (answer := send(host, path(run, "plan"), "after")).get("ok"):
            assert answer.get("code") == "store_unavailable", answer
            assert time.monotonic() < deadline, "the broker never reconnected"
        assert (answer["queued"], answer["position"]) == (True, 2), answer

        bed.broker.kill()                         # kill -9: only what is committed is left
        bed.broker = start_broker(tmp, "--db", db)
        wait_ready(bed.broker.endpoint, bed.broker.proc)
        deadline = time.monotonic() + 30
        while not host.intercom(action="list").get("ok"):   # the host says hello again
            assert time.monotonic() < deadline, "the host never came back"
        assert stage_row(run_row(host, run), "plan")["queued"] == 2
        stage = start_stage(bed.connect, run, "plan")
        assert [m["message"] for m in take(stage, 2)] == ["before", "after"]
        names = {row[0] for row in query(db, "SELECT name FROM session_identity")}
        assert "carol" in names, names            # written once the server came back


def test_a_server_cut_off_costs_one_bounded_wait_then_durable_sends_are_refused_at_once(
        tmp, postgres_server):
    schema = postgres_server.take_schema()
    proxy = BlackholeProxy(postgres_server.port)
    db = f"postgresql://postgres@127.0.0.1:{proxy.port}/postgres?schema={schema}"
    try:
        with serving(tmp, db) as bed:
            host, run = bed.host, bed.run
            proxy.drop()                          # nothing answered, nothing refused
            refused, first = timed(lambda: send(host, path(run, "plan"), "first while cut"))
            assert_refused(refused, "store_unavailable", error_text("store_unavailable"))
            assert first < CUT_ANSWER_S, first
            for n in range(5):
                refused, seconds = timed(lambda: send(host, path(run, "plan"), f"cut {n}"))
                assert_refused(refused, "store_unavailable")
                assert seconds < KNOWN_DOWN_ANSWER_S, (n, seconds)
            assert ok(send(bed.alice, bed.bob.id, "live while cut")).get("delivered") is True
            assert bed.bob.receive(10)["message"] == "live while cut"
            bed.connect("carol")                  # her identity waits for the server

            proxy.heal()
            healed = time.monotonic()
            while not (answer := send(host, path(run, "plan"), "after")).get("ok"):
                assert answer.get("code") == "store_unavailable", answer
                assert time.monotonic() - healed < 15, "the broker never reconnected"
            assert (answer["queued"], answer["position"]) == (True, 2), answer
            wait_until(lambda: "carol" in {row[0] for row in query(db, "SELECT name FROM session_identity")},
                       10, "the identity held while cut off is written")
            stage = start_stage(bed.connect, run, "plan")
            assert [m["message"] for m in take(stage, 2)] == ["before", "after"]
    finally:
        proxy.close()


# -- several hosts -------------------------------------------------------------------------

def test_brokers_link_at_the_endpoint_they_advertise_and_clients_fail_over_along_a_list(
        postgres_server):
    ports = [free_port(), free_port()]
    db = postgres_server.schema_url()
    cluster = Cluster(0, db=db)
    try:
        for index, port in enumerate(ports):
            data_dir = cluster.root / f"b{index}"
            data_dir.mkdir()
            proc = start_broker(data_dir, "--db", db, "--endpoint", f"tcp://127.0.0.1:{port}",
                                "--advertise", f"tcp://localhost:{port}", wait=False)
            cluster.brokers.append(BrokerProcess(proc.proc, data_dir, f"tcp://127.0.0.1:{port}",
                                                 proc.pub_endpoint, proc.db, proc.log))
            wait_ready(cluster.brokers[-1].endpoint, proc.proc)
        advertised = {f"tcp://localhost:{port}" for port in ports}
        # Each writes its lease row in its first round, after it answers: wait for both.
        wait_until(lambda: {row[0] for row in query(db, "SELECT endpoint FROM brokers")}
                   == advertised, 15, "both lease rows name the advertised endpoints")
        alice = cluster.connect(0, "alice", group="team")
        bob = cluster.connect(1, "bob", group="team")
        wait_until(lambda: others_live(alice) == 1 and sees(alice, "bob"), 20, "linked")
        assert ok(send(alice, bob.id, "across")).get("delivered") is True
        assert bob.receive(10)["message"] == "across"

        from client import Client
        endpoints = [b.endpoint for b in cluster.brokers]
        carol = Client.connect(name="carol", endpoint=endpoints, group="team", timeout=15)
        cluster.opened.append(carol)
        first = carol.intercom(action="status")["broker"]["id"]
        cluster.brokers[0].kill()
        wait_until(lambda: (carol.intercom(action="status").get("broker") or {}).get("id")
                   not in (None, first), 30, "carol fails over to the second broker")
        assert ok(send(carol, bob.id, "after the failover")).get("delivered") is True
    finally:
        cluster.close()
