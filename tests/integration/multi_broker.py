"""Helpers for the tests of several brokers on one database: real processes, one SQLite
file or one PostgreSQL schema (the tests marked :data:`on_both_stores` run on each)."""

from __future__ import annotations

import shutil
import sqlite3
import threading
import time
from pathlib import Path
from typing import Callable

import pytest

from tests.conftest import BrokerProcess, start_broker
from tests.integration.conftest import make_tmp, unique

LEASE_S = "3"          # a short broker lease: an expiry shows within a few seconds

# For the tests that matter most across hosts: run them on PostgreSQL too (the others
# run on SQLite alone, the store_kind fixture's default).
on_both_stores = pytest.mark.parametrize("store_kind", ["sqlite", "postgres"])


def database_for(store_kind: str, request) -> str | None:
    """The database a test's brokers share: a new schema on the run's PostgreSQL server
    for ``postgres``, else None (a SQLite file of the cluster's own)."""
    if store_kind == "postgres":
        return request.getfixturevalue("postgres_server").schema_url()
    return None


class Cluster:
    """N broker processes sharing one database (a SQLite file in the cluster's
    directory, or ``db``: a PostgreSQL URL), each with its own data dir."""

    def __init__(self, count: int, *extra: str, db: str | None = None) -> None:
        self.root = make_tmp()
        self.db = db or self.root / "shared.db"
        self.extra = extra
        self.brokers: list[BrokerProcess] = []
        self.opened: list = []
        self.group = unique("t")     # a group of the current test's own (see shared_cluster)
        try:
            for _ in range(count):
                self.start()
        except BaseException:
            self.close()          # the brokers started before the one that failed
            raise

    def start(self, data_dir: Path | None = None, *extra: str) -> BrokerProcess:
        """One more broker on the file (``extra``: arguments for this one alone)."""
        if data_dir is None:
            data_dir = self.root / f"b{len(self.brokers)}"
            data_dir.mkdir()
        proc = start_broker(data_dir, "--db", str(self.db), "--broker-lease-s", LEASE_S,
                            *self.extra, *extra)
        self.brokers.append(proc)
        return proc

    def connect(self, index: int, name: str, **kwargs):
        from client import Client
        session = Client.connect(name=name, endpoint=self.brokers[index].endpoint, timeout=15, **kwargs)
        self.opened.append(session)
        return session

    def close_sessions(self) -> None:
        for session in self.opened:
            try:
                session.close()
            except Exception:
                pass
        self.opened = []

    def close(self) -> None:
        self.close_sessions()
        for proc in self.brokers:
            proc.stop()
        shutil.rmtree(self.root, ignore_errors=True)


def query(db: Path | str, statement: str) -> list[tuple]:
    """The rows of ``statement`` read straight from a cluster's database, either kind."""
    if isinstance(db, str):
        import psycopg
        from broker.store.urls import split_url
        url, schema = split_url(db)
        with psycopg.connect(url, options=f"-c search_path={schema}") as conn:
            return conn.execute(statement).fetchall()
    with sqlite3.connect(db) as conn:
        return list(conn.execute(statement))
def shared_cluster(name: str, count: int, *extra: str):
    """Fixtures for the tests of a module that neither stop, kill nor restart a broker:
    they share ``count`` brokers (started once per module and xdist worker) instead of
    starting their own. The test fixture ``name`` is the cluster with a fresh
    ``group`` for the test's sessions (sessions in other groups are invisible to
    them), and closes the test's sessions after it. Assign both at module level:
    ``_brokers, two = shared_cluster("two", 2)``."""
    @pytest.fixture(scope="module", name=f"{name}_brokers")
    def brokers():
        cluster = Cluster(count, *extra)
        yield cluster
        cluster.close()

    @pytest.fixture(name=name)
    def per_test(request):
        cluster = request.getfixturevalue(f"{name}_brokers")
        cluster.group = unique("t")
        yield cluster
        cluster.close_sessions()
        assert all(p.proc.poll() is None for p in cluster.brokers), "a shared broker died"

    return brokers, per_test


def wait_until(condition: Callable[[], object], timeout: float, what: str):
    """Poll ``condition`` (each poll is a request round trip) until it is truthy."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout:g} s: {what}")
        time.sleep(0.05)     # between round trips to the broker, not a settle


def asking(session, to: str, message: str) -> tuple[dict, threading.Thread]:
    """``session`` asks ``to`` on a thread of its own: (its answer once joined, the thread)."""
    result: dict = {}
    asker = threading.Thread(target=lambda: result.update(
        session.intercom(action="ask", to=to, message=message)))
    asker.start()
    return result, asker


def others_live(session) -> int:
    return session.intercom(action="status")["broker"]["otherBrokersLive"]


def sees(session, name: str) -> bool:
    rows = session.intercom(action="list")["sessions"]
    return any(row["name"] == name for row in rows)


class PubTail:
    """A SUB socket on one broker's PUB, for events under ``topic``."""

    def __init__(self, endpoint: str, topic: str) -> None:
        import zmq
        self.topic = topic
        self.sock = zmq.Context.instance().socket(zmq.SUB)
        self.sock.linger = 0
        self.sock.setsockopt_string(zmq.SUBSCRIBE, topic)
        self.sock.connect(endpoint)

    def wait_for(self, predicate: Callable[[dict], bool], timeout: float) -> dict:
        import msgpack
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            if not self.sock.poll(left * 1000):
                break
            topic, frame = self.sock.recv_multipart()
            env = msgpack.unpackb(frame, raw=False)
            if topic.decode() == self.topic and predicate(env):
                return env
        raise AssertionError(f"no matching event on {self.topic} within {timeout:g} s")

    def warm_up(self, session, timeout: float = 15.0) -> None:
        """PUB/SUB is a slow joiner: change ``session``'s status until one shows here."""
        import zmq
        deadline = time.monotonic() + timeout
        flip = 0
        while time.monotonic() < deadline:
            flip += 1
            session.set_status("thinking" if flip % 2 else "idle")
            if self.sock.poll(200, zmq.POLLIN):
                return
        raise AssertionError("the PUB socket never delivered")

    def close(self) -> None:
        self.sock.close(linger=0)
