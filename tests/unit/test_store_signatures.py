"""Every store implements every method of the :class:`broker.store.Store` protocol with
the protocol's own signature, and a writer for every record type of
:data:`broker.store.RECORD_HANDLERS` taking that record alone."""

from __future__ import annotations

import inspect

import pytest

from broker.store import RECORD_HANDLERS, Store
from broker.store.memory import MemoryStore, MemoryTables
from broker.store.postgres import PostgresStore
from broker.store.sqlite import SqliteStore

# Each store, and the class holding its record writers.
STORES = {MemoryStore: MemoryTables, SqliteStore: SqliteStore, PostgresStore: PostgresStore}
PROTOCOL_METHODS = sorted(name for name, value in vars(Store).items()
                          if callable(value) and not name.startswith("_"))


def test_the_protocol_names_the_operations_the_worker_and_the_start_use():
    assert PROTOCOL_METHODS == ["adopt_runs", "apply", "brokers", "claims", "close",
                                "failure_code", "live_brokers", "load", "queued_jobs"]


@pytest.mark.parametrize("store", STORES, ids=lambda cls: cls.__name__)
@pytest.mark.parametrize("method", PROTOCOL_METHODS)
def test_each_store_has_each_protocol_method_with_its_signature(store, method):
    assert inspect.signature(getattr(store, method)) == inspect.signature(getattr(Store, method))


@pytest.mark.parametrize("store", STORES, ids=lambda cls: cls.__name__)
@pytest.mark.parametrize("record_type", RECORD_HANDLERS, ids=lambda cls: cls.__name__)
def test_each_store_writes_each_record_type_with_one_method_taking_the_record(store, record_type):
    writer = getattr(STORES[store], RECORD_HANDLERS[record_type])
    params = list(inspect.signature(writer).parameters.values())
    assert [(p.name, p.annotation) for p in params] == [("self", inspect.Parameter.empty),
                                                        ("record", record_type.__name__)]
