"""Which store ``--db`` names, and the snapshot a starting broker restores from it.

A ``postgresql://`` (or ``postgres://``) URL is the PostgreSQL store; anything else
is the path of a SQLite file. The PostgreSQL module (and psycopg with it) is imported
only when a URL asks for it: it is an optional extra.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from broker.core.kernel.records import Snapshot
from broker.store import Store, StoreOpenError
from broker.store.urls import is_postgres



def open_store(db: str | Path, synchronous: str = "FULL", owner: str | None = None,
               endpoint: str = "", schema: str | None = None) -> tuple[Store, Snapshot]:
    """Open the store ``db`` names and read everything it keeps: the store and its snapshot.

    ``synchronous``: SQLite's mode; ``schema``: the bus's PostgreSQL schema (else the
    URL's ``?schema=``, else ``intercom``). ``owner``: the starting broker's id, which
    takes the runs no live broker owns (see :meth:`broker.store.Store.load`); a lease
    row of its predecessor on ``endpoint`` whose process is gone does not count as live.

    Raises StoreOpenError (one line naming the database and what to do) for a database
    that cannot be used; the store is closed again then. ValueError for an unknown
    ``synchronous`` mode (a caller's bug)."""
    if is_postgres(db):
        try:
            from broker.store import postgres as kind
        except ImportError as exc:
            raise StoreOpenError(f"the PostgreSQL store needs psycopg ({exc}); install it with "
                                 "pip install 'intercom-bus[postgres]', or start with a SQLite "
                                 "--db path") from None
        store = kind.connect(str(db), schema)
    else:
        from broker.store import sqlite as kind
        store = kind.connect(db, synchronous)
    try:
        if owner is None:
            return store, store.load()
        gone = [row.broker_id for row in store.brokers(time.time())
                if row.endpoint == endpoint and not _process_alive(row.pid)]
        return store, store.load(owner, gone)
    except kind.LOAD_ERRORS as exc:
        store.close()
        raise StoreOpenError(kind.open_problem(str(db), exc)) from None


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:          # another user's process: alive
        return True
    return True
