"""The Store contract: the same records in give the same Snapshot out, whichever store.

Every test in the first part runs against each store: :class:`SqliteStore` (a real
file in the test's tmp dir), :class:`PostgresStore` (a schema on a real server) and the
reference :class:`MemoryStore`; a hypothesis test then feeds each database store and
the memory store random histories and compares them whole. The last part is SQLite's
own: schema migration and refusals.
"""

from __future__ import annotations

import dataclasses

import apsw
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker.core.kernel.records import (ConversationDeleted, ConversationSaved, IdentitySaved,
                                 InvocationSaved, InvocationState, LeaseReleased, LeaseRenewed,
                                 RecoveryDeleted, RecoverySaved, RunEnded, RunSaved, Snapshot,
                                 StickyAnswered, StickyDelivery, StickyDropped, StickyKept,
                                 StickyRow, StickySaved)
from broker.store import FINISHED_KEEP_S, IDENTITY_KEEP_S, SchemaError, Store
from broker.store.memory import MemoryStore
from broker.store.sqlite import SCHEMA_VERSION, SqliteStore

from .store_helpers import (DAY, NOW, conversation, draft_row, entry, identity, job,  # noqa: F401
                            open_store, store)

# -- identities --------------------------------------------------------------------------

def test_saving_an_identity_again_keeps_only_the_latest(store):
    store.apply([identity("s1", NOW - 10, "old-hash")])
    store.apply([IdentitySaved("s1", "atomic-1", "new-hash", "renamed", NOW)])
    assert store.load().identities == [IdentitySaved("s1", "atomic-1", "new-hash", "renamed", NOW)]


def test_identities_older_than_the_keep_window_are_not_restored(store):
    store.apply([identity("stale", NOW - IDENTITY_KEEP_S - DAY), identity("fresh", NOW - DAY)])
    assert [i.session_id for i in store.load().identities] == ["fresh"]


def test_identities_load_oldest_first(store):
    store.apply([identity("b", NOW - 1), identity("c", NOW), identity("a", NOW - 2)])
    assert [i.session_id for i in store.load().identities] == ["a", "b", "c"]


def test_identities_past_the_limit_restore_only_the_newest(open_store):
    store = open_store(identity_limit=2)
    store.apply([identity(f"s{n}", NOW - 10 + n) for n in range(5)])
    assert [i.session_id for i in store.load().identities] == ["s3", "s4"]


def test_identities_a_run_or_conversation_names_are_restored_past_the_limit(open_store):
    store = open_store(identity_limit=2)
    store.apply([identity(f"s{n}", NOW - 10 + n) for n in range(6)])
    store.apply([RunSaved("r1", {"runId": "r1", "host": "s0", "subagents": [{"id": "s1"}]}),
                 ConversationSaved("lys", "internal:x", False, NOW, "s2")])
    assert [i.session_id for i in store.load().identities] == ["s0", "s1", "s2", "s4", "s5"]


# -- runs --------------------------------------------------------------------------------

def test_a_run_saved_again_keeps_its_place_with_the_latest_record(store):
    store.apply([RunSaved("r1", {"v": 1}), RunSaved("r2", {"v": 1})])
    store.apply([RunSaved("r1", {"v": 2, "stages": [{"id": "a"}]})])
    assert store.load().runs == [RunSaved("r1", {"v": 2, "stages": [{"id": "a"}]}),
                                 RunSaved("r2", {"v": 1})]


def test_an_ended_run_takes_its_entries_and_their_deliveries_with_it(store):
    store.apply([RunSaved("r1", {}), RunSaved("r2", {}),
                 entry(1, "r1"), entry(2, "r2", "workflow:r2/a"),
                 StickyAnswered(1, ["a"]),
                 StickyDelivery(1, "a", "t1", "sent", NOW), StickyDelivery(2, "a", "t1", "sent", NOW)])
    store.apply([RunEnded("r1")])
    snapshot = store.load()
    assert snapshot.runs == [RunSaved("r2", {})]
    assert [row.entry.seq for row in snapshot.sticky] == [2]
    assert snapshot.deliveries == [StickyDelivery(2, "a", "t1", "sent", NOW)]


def test_a_run_saved_after_it_ended_loads_after_the_older_runs(store):
    store.apply([RunSaved("r1", {}), RunSaved("r2", {})])
    store.apply([RunEnded("r1"), RunSaved("r1", {"again": True})])
    assert [run.run_id for run in store.load().runs] == ["r2", "r1"]


# -- sticky entries ----------------------------------------------------------------------

def test_a_sticky_entry_round_trips_every_field(store):
    saved = entry(7, attachments=[{"name": "a.txt", "data": b"\x00\xff"}, "note"], ack=True,
                  position=3, not_in_known_set=True, sent_at=NOW - 5)
    store.apply([saved])
    assert store.load().sticky == [StickyRow(saved, [])]


def test_text_with_nul_characters_and_backslashes_round_trips(store):
    # PostgreSQL text cannot hold NUL: its store escapes it, and the escape itself.
    saved = entry(1, message="a\x00b\\0c\\", message_id="m\\1\x00")
    store.apply([saved, job("j\x00", reason="why\\0\x00")])
    snapshot = store.load()
    assert snapshot.sticky == [StickyRow(saved, [])]
    assert snapshot.invocations == [job("j\x00", reason="why\\0\x00")]
    assert store.apply([entry(2, message_id="m\\1\x00")]) == [
        StickyKept(entry(2, message_id="m\\1\x00"), StickyRow(saved, []))]


def test_an_unanswered_entry_loads_with_an_empty_delivered_to(store):
    store.apply([entry(1)])
    assert store.load().sticky[0].delivered_to == []


def test_an_answered_entry_loads_with_the_stages_it_reached(store):
    store.apply([entry(1), StickyAnswered(1, ["workflow:r1/a", "workflow:r1/b"])])
    assert store.load().sticky[0].delivered_to == ["workflow:r1/a", "workflow:r1/b"]


def test_an_answer_for_an_entry_not_stored_is_not_kept_for_it(store):
    store.apply([StickyAnswered(1, ["a"]), entry(2), StickyAnswered(3, ["b"])])
    store.apply([entry(1)])
    assert store.load().sticky == [StickyRow(entry(1), []), StickyRow(entry(2), [])]


def test_entries_load_in_seq_order(store):
    store.apply([entry(3), entry(1), entry(2)])
    assert [row.entry.seq for row in store.load().sticky] == [1, 2, 3]


def test_a_delivery_recorded_again_is_updated_in_place(store):
    store.apply([entry(1), StickyDelivery(1, "a", "t1", "sent", NOW),
                 StickyDelivery(1, "a", "t2", "sent", NOW + 1)])
    store.apply([StickyDelivery(1, "a", "t1", "acked", NOW + 2)])
    assert store.load().deliveries == [StickyDelivery(1, "a", "t1", "acked", NOW + 2),
                                       StickyDelivery(1, "a", "t2", "sent", NOW + 1)]


def test_a_dropped_entry_takes_only_its_own_deliveries(store):
    store.apply([entry(1), entry(2), StickyAnswered(1, ["a"]),
                 StickyDelivery(1, "a", "t1", "acked", NOW), StickyDelivery(2, "a", "t1", "sent", NOW)])
    store.apply([StickyDropped(1)])
    snapshot = store.load()
    assert snapshot.sticky == [StickyRow(entry(2), [])]
    assert snapshot.deliveries == [StickyDelivery(2, "a", "t1", "sent", NOW)]


def test_a_seq_dropped_can_be_saved_again_fresh(store):
    store.apply([entry(1), StickyAnswered(1, ["a"]), StickyDropped(1), entry(1, message="second")])
    assert store.load().sticky == [StickyRow(entry(1, message="second"), [])]


# -- all or nothing ----------------------------------------------------------------------

def test_a_batch_with_a_seq_already_stored_applies_nothing(store):
    store.apply([entry(1)])
    before = store.load()
    with pytest.raises(Exception):
        store.apply([RunSaved("r2", {}), StickyDelivery(1, "a", "t", "sent", NOW), entry(1)])
    assert store.load() == before


def test_a_batch_with_a_payload_msgpack_cannot_encode_applies_nothing(store):
    with pytest.raises(TypeError):
        store.apply([RunSaved("r1", {}), RunSaved("r2", {"stages": {1, 2}})])
    assert store.load() == Snapshot(grant_key=store.load().grant_key)


def test_a_value_that_is_not_a_record_fails_the_batch(store):
    with pytest.raises(TypeError):
        store.apply([RunSaved("r1", {}), ("run", "r2", {})])
    assert store.load() == Snapshot(grant_key=store.load().grant_key)


def test_changing_a_payload_after_apply_changes_nothing_stored(store):
    record, attachments = {"stages": []}, ["one"]
    store.apply([RunSaved("r1", record), entry(1, attachments=attachments)])
    record["stages"].append("late")
    attachments.append("late")
    snapshot = store.load()
    assert snapshot.runs == [RunSaved("r1", {"stages": []})]
    assert snapshot.sticky[0].entry.attachments == ["one"]


# -- both stores, random histories -------------------------------------------------------

_times = st.sampled_from([NOW - 2, NOW - 1.5, NOW, NOW - IDENTITY_KEEP_S - DAY])
_names = st.text(alphabet="ab/é", max_size=3)
_scalars = (st.none() | st.booleans() | st.integers(-5, 5) | st.floats(allow_nan=False)
            | _names | st.binary(max_size=3))
_plain = _scalars | st.lists(_scalars, max_size=2)   # flat: generation is most of the cost
_seqs = st.integers(1, 3)
_runs = st.sampled_from(["r1", "r2"])
_stages = st.sampled_from(["a", "b"])
_transcripts = st.sampled_from(["t1", "t2"])
_agents = st.sampled_from(["lys", "ana"])
_channels = st.sampled_from(["internal:a", "remote:b"])
_job_ids = st.sampled_from(["j1", "j2", "j3"])
_job_states = st.sampled_from(["queued", "started", "done", "failed"])
_job_times = st.sampled_from([NOW, NOW - FINISHED_KEEP_S - DAY])

_records = st.one_of(
    st.builds(IdentitySaved, st.sampled_from(["s1", "s2", "s3"]), st.none() | _names, _names,
              _names, _times),
    st.builds(LeaseRenewed, st.sampled_from(["b1", "b2"]), st.integers(1, 9), _names, _times,
              st.sampled_from([NOW - 1, NOW + DAY]), st.sampled_from(["", "curve-key"])),
    st.builds(LeaseReleased, st.sampled_from(["b1", "b2"])),
    st.builds(RunSaved, _runs, st.dictionaries(_names, _plain, max_size=3)),
    st.builds(RunEnded, _runs),
    st.builds(StickySaved, _seqs, _runs, st.sampled_from(["workflow:r1/a", "workflow:r2/*"]),
              _names, _names, _names, _names, st.lists(_plain, max_size=2), _times,
              st.booleans(), st.integers(1, 50), st.booleans()),
    st.builds(StickyAnswered, _seqs, st.lists(_names, max_size=2)),
    st.builds(StickyDelivery, _seqs, _stages, _transcripts, st.sampled_from(["sent", "acked"]),
              _times),
    st.builds(StickyDropped, _seqs),
    st.builds(ConversationSaved, _agents, _channels, st.booleans(), st.none() | _times,
              st.none() | _names),
    st.builds(ConversationDeleted, _agents, _channels),
    st.builds(InvocationSaved, _job_ids, _agents, _channels, _channels, _names, _job_times,
              _names, _job_states),
    st.builds(InvocationState, _job_ids, _job_states, _job_times, st.none() | _names),
    st.builds(RecoverySaved, _agents, _channels, _names, st.lists(_plain, max_size=2), _names,
              _times),
    st.builds(RecoveryDeleted, _agents, _channels),
)


def _outcome(store: Store, batch: list) -> bool:
    try:
        store.apply(batch)
    except Exception:
        return False
    return True


def _same_as_memory(database: Store, history: list[list]) -> None:
    """``history`` applied to ``database`` and to a MemoryStore gives the same outcomes,
    snapshot and lease rows."""
    memory = MemoryStore()
    try:
        for batch in history:
            assert _outcome(database, batch) == _outcome(memory, batch), batch
        assert _without_key(database.load()) == _without_key(memory.load())
        for exclude in (None, "b1"):
            assert database.live_brokers(NOW, exclude) == memory.live_brokers(NOW, exclude)
            assert database.brokers(NOW, exclude) == memory.brokers(NOW, exclude)
    finally:
        memory.close()


_histories = st.lists(st.lists(_records, max_size=5), min_size=1, max_size=6)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_histories)
def test_sqlite_gives_the_memory_stores_snapshot_for_any_history(history):
    sqlite = SqliteStore(":memory:")
    try:
        _same_as_memory(sqlite, history)
    finally:
        sqlite.close()


@pytest.fixture
def emptied_postgres(postgres_server):
    """One PostgresStore for a whole hypothesis test, emptied for each example."""
    from broker.store.postgres import PostgresStore
    schema = postgres_server.take_schema()
    store = PostgresStore.open(postgres_server.url(schema=schema))
    admin = postgres_server.connect()

    def emptied() -> Store:
        assert postgres_server.empty(schema, admin), "the schema could not be emptied"
        return store
    yield emptied
    admin.close()
    store.close()
    postgres_server.give_back(schema)


# Fewer examples: each one commits a few transactions on a real server (fsync on); a
# few seconds of work that a loaded host may stretch well past the default timeout.
@pytest.mark.timeout(240)
@settings(max_examples=30, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(history=_histories)
def test_postgres_gives_the_memory_stores_snapshot_for_any_history(emptied_postgres, history):
    _same_as_memory(emptied_postgres(), history)


# -- SQLite only: schema versions --------------------------------------------------------

VERSION_1_SCHEMA = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE brokers (broker_id TEXT PRIMARY KEY, pid INTEGER NOT NULL, endpoint TEXT NOT NULL,
    started_at REAL NOT NULL, lease_until REAL NOT NULL);
CREATE TABLE runs (run_id TEXT PRIMARY KEY, record BLOB NOT NULL);
CREATE TABLE sticky (seq INTEGER PRIMARY KEY, run_id TEXT NOT NULL, target TEXT NOT NULL,
    sender_id TEXT NOT NULL, sender_name TEXT NOT NULL, message_id TEXT NOT NULL,
    message TEXT NOT NULL, attachments BLOB NOT NULL, sent_at REAL NOT NULL, ack INTEGER NOT NULL);
CREATE INDEX sticky_run ON sticky (run_id);
CREATE TABLE sticky_delivery (seq INTEGER NOT NULL, stage TEXT NOT NULL, transcript TEXT NOT NULL,
    state TEXT NOT NULL, at REAL NOT NULL, PRIMARY KEY (seq, stage, transcript));
CREATE TABLE session_identity (session_id TEXT PRIMARY KEY, atomic_session_id TEXT,
    token_hash TEXT NOT NULL, name TEXT NOT NULL, updated_at REAL NOT NULL);
INSERT INTO meta VALUES ('schema_version', '1');
"""
EMPTY_LIST = b"\x90"   # msgpack []


def write_version_1_file(path) -> None:
    conn = apsw.Connection(str(path))
    conn.execute(VERSION_1_SCHEMA)
    conn.execute("INSERT INTO runs VALUES ('r1', ?)", (b"\x81\xa2id\xa2r1",))   # {"id": "r1"}
    for seq, target in ((1, "workflow:r1/a"), (3, "workflow:r1/b"), (5, "workflow:r1/a")):
        conn.execute("INSERT INTO sticky VALUES (?, 'r1', ?, 's-1', 'sender', ?, 'hi', ?, ?, 1)",
                     (seq, target, f"m{seq}", EMPTY_LIST, NOW))
    conn.execute("INSERT INTO sticky_delivery VALUES (1, 'a', 't1', 'acked', ?)", (NOW,))
    conn.execute("INSERT INTO session_identity VALUES ('s1', NULL, 'hash', 'alice', ?)", (NOW,))
    conn.close()


def schema_version(path) -> str:
    conn = apsw.Connection(str(path))
    try:
        ((value,),) = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'")
        return value
    finally:
        conn.close()


def test_a_version_1_file_is_migrated_in_place_and_its_rows_load(tmp_path):
    path = tmp_path / "v1.db"
    write_version_1_file(path)
    store = SqliteStore(path)
    snapshot = store.load()
    store.close()
    assert schema_version(path) == str(SCHEMA_VERSION)
    assert snapshot.runs == [RunSaved("r1", {"id": "r1"})]
    assert snapshot.identities == [IdentitySaved("s1", None, "hash", "alice", NOW)]
    assert snapshot.deliveries == [StickyDelivery(1, "a", "t1", "acked", NOW)]
    # Position: the 1-based rank among entries of the same (run, target), by seq.
    assert [(row.entry.seq, row.entry.position) for row in snapshot.sticky] == [(1, 1), (3, 1), (5, 2)]
    assert all(not row.entry.not_in_known_set and row.entry.ack for row in snapshot.sticky)
    assert all(row.delivered_to == [] for row in snapshot.sticky)


def test_a_migrated_file_keeps_the_curve_key_of_a_lease(tmp_path):
    path = tmp_path / "v1.db"
    write_version_1_file(path)
    store = SqliteStore(path)
    store.apply([LeaseRenewed("b1", 1, "ipc:///tmp/b1.sock", NOW, NOW + 30, "key-z85")])
    assert [row.curve_public for row in store.brokers(NOW)] == ["key-z85"]
    store.close()


def test_a_migrated_file_takes_new_records_and_reopens_as_it_was(tmp_path):
    path = tmp_path / "v1.db"
    write_version_1_file(path)
    store = SqliteStore(path)
    store.apply([StickyAnswered(1, ["a"]), entry(6, target="workflow:r1/a", position=3,
                                                not_in_known_set=True)])
    before = store.load()
    store.close()
    again = SqliteStore(path)
    assert again.load() == before
    again.close()
    assert [(row.entry.seq, row.entry.position, row.delivered_to) for row in before.sticky] == [
        (1, 1, ["a"]), (3, 1, []), (5, 2, []), (6, 3, [])]


def test_a_file_from_a_newer_schema_is_refused_and_left_alone(tmp_path):
    path = tmp_path / "future.db"
    SqliteStore(path).close()
    conn = apsw.Connection(str(path))
    conn.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION + 1),))
    conn.close()
    with pytest.raises(SchemaError, match=f"schema version {SCHEMA_VERSION + 1}"):
        SqliteStore(path)
    assert schema_version(path) == str(SCHEMA_VERSION + 1)


def test_an_unknown_synchronous_mode_is_refused(tmp_path):
    with pytest.raises(ValueError, match="synchronous"):
        SqliteStore(tmp_path / "bus.db", synchronous="FULL; DROP TABLE runs")


def _without_key(snapshot: Snapshot) -> Snapshot:
    """Each database makes its own grant key; everything else must agree."""
    return dataclasses.replace(snapshot, grant_key=b"")


def test_the_grant_key_is_made_once_and_kept(open_store):
    store = open_store()
    key = store.load().grant_key
    assert len(key) == 32 and store.load().grant_key == key


def test_a_migrated_file_gains_the_respond_and_invoke_tables(tmp_path):
    path = tmp_path / "v1.db"
    write_version_1_file(path)
    store = SqliteStore(path)
    store.apply([conversation("internal:b"), job("j1"), draft_row()])
    store.close()
    again = SqliteStore(path)
    snapshot = again.load()
    again.close()
    assert (snapshot.conversations, snapshot.invocations, snapshot.recoveries) == (
        [conversation("internal:b")], [job("j1")], [draft_row()])
