"""Records and fixtures the store contract tests share: every test that takes
``store`` or ``open_store`` runs against each store: SqliteStore (a file in the test's
tmp dir), PostgresStore (a schema of its own on this worker's real server) and
MemoryStore."""

from __future__ import annotations

import time
from typing import Callable

import pytest

from broker.core.kernel.records import (ConversationSaved, IdentitySaved, InvocationSaved, LeaseRenewed,
                                 RecoverySaved, StickySaved)
from broker.store import Store
from broker.store.memory import MemoryStore
from broker.store.sqlite import SqliteStore

NOW = time.time()
DAY = 86400.0


def entry(seq: int, run_id: str = "r1", target: str = "workflow:r1/a", **fields) -> StickySaved:
    values = dict(seq=seq, run_id=run_id, target=target, sender_id="s-1", sender_name="sender",
                  message_id=f"m{seq}", message=f"message {seq}", attachments=[], sent_at=NOW,
                  ack=False, position=1, not_in_known_set=False)
    values.update(fields)
    return StickySaved(**values)


def identity(session_id: str, at: float, token_hash: str = "hash") -> IdentitySaved:
    return IdentitySaved(session_id, None, token_hash, f"name of {session_id}", at)


def lease(broker_id: str, until: float, started_at: float = NOW) -> LeaseRenewed:
    return LeaseRenewed(broker_id, 4242, f"ipc:///tmp/{broker_id}.sock", started_at, until)


OpenStore = Callable[..., Store]


STORES = ["sqlite", "postgres", "memory"]


@pytest.fixture(params=STORES)
def open_store(request, tmp_path) -> OpenStore:
    """Opens the store under test (keyword arguments go to its constructor); each call
    opens another, empty one."""
    opened: list[Store] = []
    server = request.getfixturevalue("postgres_server") if request.param == "postgres" else None
    schemas: list[str] = []

    def _open(**kwargs) -> Store:
        if request.param == "sqlite":
            store = SqliteStore(tmp_path / f"bus-{len(opened)}.db", **kwargs)
        elif request.param == "postgres":
            from broker.store.postgres import PostgresStore
            schemas.append(server.take_schema())
            store = PostgresStore.open(server.url(schema=schemas[-1]), **kwargs)
        else:
            store = MemoryStore(**kwargs)
        opened.append(store)
        return store

    yield _open
    for store in opened:
        store.close()
    for schema in schemas:
        server.give_back(schema)


@pytest.fixture
def store(open_store) -> Store:
    return open_store()


def job(job_id: str, channel: str = "internal:b", **fields) -> InvocationSaved:
    values = dict(id=job_id, agent="lys", channel=channel, from_channel="internal:a",
                  reason="check in", created_at=NOW, request=f"s/{job_id}")
    values.update(fields)
    return InvocationSaved(**values)


def conversation(channel: str, agent: str = "lys", at: float | None = NOW) -> ConversationSaved:
    return ConversationSaved(agent, channel, channel.startswith("remote:"), at, "s-1")


def draft_row(channel: str = "internal:b", turn: str = "t1", outcome: str = "pending") -> RecoverySaved:
    drafts = [{"id": "d1", "text": "the answer", "completion": "complete", "outcome": "pending"}]
    return RecoverySaved("lys", channel, turn, drafts, outcome, NOW)
