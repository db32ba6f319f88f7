"""The PostgreSQL store's own promises, on a real server: its URL and schema, the
schema made once when brokers start at once, compare-and-set writes raced from two
connections, and a server that goes away and comes back. (The shared semantics are
the contract suite's: test_store_contract.py and its neighbours run over it too.)"""

from __future__ import annotations

import threading
import time

import pytest

from broker.core.kernel.records import InvocationState, LeaseRenewed, RunSaved, SessionClaimed
from broker.store import UNAVAILABLE, SchemaError, StoreOpenError
from broker.store.postgres import SCHEMA_VERSION, PostgresStore, connect
from broker.store.postgres_connection import CALL_LIMIT_S, FIRST_WAIT_S, RECONNECT_S
from broker.store.urls import display_url, split_url
from tests.blackhole_proxy import BlackholeProxy
from tests.postgres_server import PostgresMissing, free_port, start_server

from .store_helpers import NOW, entry, job


# -- the URL -----------------------------------------------------------------------------

def test_a_password_in_the_url_is_masked_wherever_it_is_given():
    assert display_url("postgresql://bus:s3cret@db.example:5432/intercom?schema=a") == \
        "postgresql://bus:***@db.example:5432/intercom?schema=a"
    assert display_url("postgresql://bus@db/intercom?password=s3cret&sslmode=require") == \
        "postgresql://bus@db/intercom?password=***&sslmode=require"


def test_the_schema_is_the_flags_else_the_urls_else_intercom_and_never_reaches_libpq():
    assert split_url("postgresql://u@h/db?schema=blue&sslmode=disable") == (
        "postgresql://u@h/db?sslmode=disable", "blue")
    assert split_url("postgresql://u@h/db?schema=blue", "green")[1] == "green"
    assert split_url("postgresql://u@h/db") == ("postgresql://u@h/db", "intercom")


@pytest.mark.parametrize("name", ["Blue", "a-b", "1bus", "pg_bus", "x" * 64, "a;drop"])
def test_a_schema_name_that_is_not_a_plain_identifier_is_refused(name):
    with pytest.raises(ValueError, match="schema name"):
        split_url("postgresql://u@h/db", name)


def test_a_server_that_is_not_there_is_named_masked_in_one_line_within_seconds():
    url = f"postgresql://bus:s3cret@127.0.0.1:{free_port()}/intercom"
    started = time.monotonic()
    with pytest.raises(StoreOpenError) as refused:
        connect(url)
    line = str(refused.value)
    assert "s3cret" not in line and "bus:***@127.0.0.1" in line and "\n" not in line
    assert "start the server" in line and time.monotonic() - started < 5


# -- the schema --------------------------------------------------------------------------

def test_brokers_starting_at_once_on_a_new_schema_each_open_it_and_it_is_made_once(postgres_server):
    url = postgres_server.schema_url()

    def start():
        try:
            return PostgresStore.open(url)
        except Exception as exc:          # the test reports it below
            return exc

    opened = together([start] * 4)
    try:
        assert all(isinstance(store, PostgresStore) for store in opened), opened
        opened[0].apply([RunSaved("r1", {})])
        assert [run.run_id for run in opened[3].load().runs] == ["r1"]
    finally:
        for store in opened:
            if isinstance(store, PostgresStore):
                store.close()


def test_two_buses_on_one_database_keep_apart(postgres_server):
    blue, green = (PostgresStore.open(postgres_server.schema_url()) for _ in range(2))
    try:
        blue.apply([RunSaved("r1", {}), entry(1)])
        assert (green.load().runs, green.load().sticky) == ([], [])
        assert blue.load().grant_key != green.load().grant_key
    finally:
        blue.close()
        green.close()


def test_a_schema_from_a_newer_broker_is_refused_and_left_alone(postgres_server):
    schema = postgres_server.take_schema()
    PostgresStore.open(postgres_server.url(schema=schema)).close()
    with postgres_server.connect() as admin:
        admin.execute(f"UPDATE {schema}.meta SET value = %s WHERE key = 'schema_version'",
                      [str(SCHEMA_VERSION + 1)])
        with pytest.raises(SchemaError, match=f"version {SCHEMA_VERSION + 1}"):
            PostgresStore.open(postgres_server.url(schema=schema))
        (version,) = admin.execute(f"SELECT value FROM {schema}.meta "
                                   "WHERE key = 'schema_version'").fetchone()
    assert version == str(SCHEMA_VERSION + 1)


# -- compare-and-set across connections ---------------------------------------------------

def together(calls: list) -> list:
    """Run ``calls`` on threads of their own, released at the same moment; their results."""
    barrier = threading.Barrier(len(calls))
    results: list = [None] * len(calls)

    def one(n: int) -> None:
        barrier.wait()
        results[n] = calls[n]()

    threads = [threading.Thread(target=one, args=(n,)) for n in range(len(calls))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    return results


def _race(stores: list[PostgresStore], batch_of) -> list[list]:
    """Each store applies its batch at the same moment; what each got refused."""
    return together([lambda n=n: stores[n].apply(batch_of(n)) for n in range(len(stores))])


@pytest.fixture
def three_brokers(postgres_server):
    url = postgres_server.schema_url()
    stores = [PostgresStore.open(url) for _ in range(3)]
    yield stores
    for store in stores:
        store.close()


def test_racing_claims_of_one_id_are_granted_to_exactly_one_broker(three_brokers):
    leases = [LeaseRenewed(f"b{n}", 1, f"ipc:///tmp/b{n}", NOW, time.time() + 600) for n in range(3)]
    three_brokers[0].apply(leases)
    for round_ in range(5):
        refused = _race(three_brokers, lambda n: [SessionClaimed(f"s{round_}", f"b{n}", time.time())])
        assert sorted(len(r) for r in refused) == [0, 1, 1], refused
        winner = next(n for n, r in enumerate(refused) if not r)
        assert three_brokers[1].claims()[f"s{round_}"] == f"b{winner}"


def test_racing_starts_of_one_job_hand_it_over_exactly_once(three_brokers):
    for round_ in range(5):
        three_brokers[0].apply([job(f"j{round_}")])
        refused = _race(three_brokers, lambda n: [
            InvocationState(f"j{round_}", "started", time.time(), broker_id=f"b{n}")])
        assert sorted(len(r) for r in refused) == [0, 1, 1], refused


def test_racing_adoptions_of_a_dead_brokers_runs_give_each_run_to_one_adopter(three_brokers):
    three_brokers[0].apply([RunSaved(f"r{n}", {}, "dead") for n in range(20)])
    adopted = together([lambda n=n: three_brokers[n].adopt_runs("dead", f"b{n}").runs
                        for n in range(3)])
    assert sorted(run.run_id for runs in adopted for run in runs) == sorted(f"r{n}" for n in range(20))


# -- a server that goes away ---------------------------------------------------------------

@pytest.fixture(scope="module")
def restartable():
    """A server of this module's own, which its tests stop and start (and leave serving)."""
    try:
        server = start_server()
    except PostgresMissing as exc:
        pytest.fail(str(exc), pytrace=False)
    yield server
    server.destroy()


def test_a_server_gone_fails_writes_unavailable_at_once_keeps_nothing_and_is_reconnected(restartable):
    store = PostgresStore.open(restartable.schema_url())
    try:
        store.apply([RunSaved("before", {})])
        restartable.stop("immediate")
        for attempt in range(3):              # the lost connection, then paced reconnects
            started = time.monotonic()
            with pytest.raises(Exception) as failed:
                store.apply([RunSaved("during", {}), entry(1, run_id="during")])
            assert store.failure_code(failed.value) == UNAVAILABLE
            assert time.monotonic() - started < 1.0
        restartable.start()
        deadline = time.monotonic() + 10
        while True:
            try:
                store.apply([RunSaved("after", {})])
                break
            except Exception as exc:
                assert store.failure_code(exc) == UNAVAILABLE
                assert time.monotonic() < deadline, "never reconnected"
                time.sleep(RECONNECT_S / 2)    # paced by the store itself: not a settle
        assert [run.run_id for run in store.load().runs] == ["before", "after"]
        assert store.load().sticky == []
    finally:
        store.close()


def test_a_server_restarted_while_the_store_was_idle_costs_no_write(restartable):
    store = PostgresStore.open(restartable.schema_url())
    try:
        store.apply([RunSaved("before", {})])
        restartable.stop("fast")
        restartable.start()
        assert store.apply([RunSaved("after", {})]) == []   # on a new connection, at once
        assert [run.run_id for run in store.load().runs] == ["before", "after"]
    finally:
        store.close()


def test_a_server_cut_off_costs_one_bounded_call_then_uses_fail_at_once_until_it_answers(
        postgres_server):
    proxy = BlackholeProxy(postgres_server.port)
    schema = postgres_server.take_schema()
    store = PostgresStore.open(f"postgresql://postgres@127.0.0.1:{proxy.port}/postgres",
                               schema)
    try:
        store.apply([RunSaved("before", {})])
        proxy.drop()                        # packets dropped: nothing refused, nothing said
        started = time.monotonic()
        with pytest.raises(Exception) as failed:
            store.apply([RunSaved("cut", {})])
        assert store.failure_code(failed.value) == UNAVAILABLE
        # Bounded by the call limit (a wide margin: the machine may be busy), not by
        # libpq's connect timeout paid again and again.
        assert time.monotonic() - started < CALL_LIMIT_S + FIRST_WAIT_S + 3.0
        assert store.connection.cuts == 1 and store.connection.down
        started = time.monotonic()
        for _ in range(20):                 # the outage is known: no connect timeout paid
            with pytest.raises(Exception) as failed:
                store.apply([RunSaved("during", {})])
            assert store.failure_code(failed.value) == UNAVAILABLE
        # Twenty calls together take less than one bounded call would: none waited.
        assert time.monotonic() - started < CALL_LIMIT_S
        assert store.connection.cuts == 1
        proxy.heal()
        deadline = time.monotonic() + 10
        while True:
            try:
                assert store.apply([RunSaved("after", {})]) == []
                break
            except Exception as exc:
                assert store.failure_code(exc) == UNAVAILABLE
                assert time.monotonic() < deadline, "never reconnected"
                time.sleep(RECONNECT_S / 2)    # paced by the store itself: not a settle
        assert not store.connection.down
        assert [run.run_id for run in store.load().runs] == ["before", "after"]
    finally:
        store.close()
        proxy.close()
