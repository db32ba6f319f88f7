"""The Store contract for sticky requests: one entry per (sender id, message id),
whichever broker writes it. Both stores (see store_helpers); the migration of a file
that an older broker filled with copies is SQLite's own."""

from __future__ import annotations

import apsw

from broker.core.kernel.records import (RunEnded, RunSaved, StickyAnswered, StickyDropped, StickyKept,
                                 StickyRow)
from broker.store.sqlite import SCHEMA_VERSION, SqliteStore

from .store_helpers import NOW, entry, open_store, store  # noqa: F401
from .test_store_contract import EMPTY_LIST, VERSION_1_SCHEMA, schema_version


def test_an_entry_for_a_request_already_stored_is_not_written_and_the_kept_one_is_returned(store):
    store.apply([entry(1, message_id="m-1"), StickyAnswered(1, ["stage-a"])])
    again = entry(2 << 16 | 7, message_id="m-1", position=4)     # another broker's number
    assert store.apply([RunSaved("r1", {"v": 1}), again]) == [
        StickyKept(again, StickyRow(entry(1, message_id="m-1"), ["stage-a"]))]
    snapshot = store.load()
    assert snapshot.sticky == [StickyRow(entry(1, message_id="m-1"), ["stage-a"])]
    assert snapshot.runs == [RunSaved("r1", {"v": 1})]     # the rest of the batch is written


def test_the_same_message_id_from_another_sender_is_another_entry(store):
    assert store.apply([entry(1, message_id="m-1"), entry(2, message_id="m-1", sender_id="s-2")]) == []
    assert [row.entry.seq for row in store.load().sticky] == [1, 2]


def test_a_request_in_one_batch_twice_is_written_once(store):
    second = entry(2, message_id="m-1")
    assert store.apply([entry(1, message_id="m-1"), second]) == [
        StickyKept(second, StickyRow(entry(1, message_id="m-1"), []))]
    assert [row.entry.seq for row in store.load().sticky] == [1]


def test_a_request_whose_entry_is_gone_can_be_saved_again(store):
    store.apply([entry(1, message_id="m-1"), entry(2, message_id="m-2", run_id="r2")])
    store.apply([StickyDropped(1), RunEnded("r2")])
    assert store.apply([entry(3, message_id="m-1"), entry(4, message_id="m-2")]) == []
    assert [row.entry.seq for row in store.load().sticky] == [3, 4]


# -- SQLite only: a file with copies of one request ------------------------------------

def test_a_file_with_copies_of_one_request_keeps_the_first_when_migrated(tmp_path):
    path = tmp_path / "v1.db"
    conn = apsw.Connection(str(path))
    conn.execute(VERSION_1_SCHEMA)
    for seq, msg_id in ((1, "m-1"), (2, "m-2"), (3, "m-1"), (4, "m-1")):
        conn.execute("INSERT INTO sticky VALUES (?, 'r1', 'workflow:r1/a', 's-1', 'sender', ?, "
                     "'hi', ?, ?, 1)", (seq, msg_id, EMPTY_LIST, NOW))
    for seq in (1, 3):
        conn.execute("INSERT INTO sticky_delivery VALUES (?, 'a', 't1', 'sent', ?)", (seq, NOW))
    conn.close()
    store = SqliteStore(path)
    try:
        snapshot = store.load()
        assert [(row.entry.seq, row.entry.message_id) for row in snapshot.sticky] == [
            (1, "m-1"), (2, "m-2")]
        assert [d.seq for d in snapshot.deliveries] == [1]
        assert store.apply([entry(5, message_id="m-1")])[0].kept.entry.seq == 1
    finally:
        store.close()
    assert schema_version(path) == str(SCHEMA_VERSION)
