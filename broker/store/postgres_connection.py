"""The PostgreSQL store's one connection: the URL it comes from, how it is opened, how
it is opened again after the server went away, and what its failures mean.

The persistence worker is the store's only user, one batch at a time, so the pool
is one connection (:class:`Connection`): it is opened on demand and dropped when it
breaks. Once it broke (or could not be opened), the server is known to be down: a
:class:`~broker.store.postgres_liveness.Reconnector` opens a new one in the
background, an attempt at most every :data:`RECONNECT_S` after a failed one, and
until it has one every use fails at once (:class:`ServerGone`), so a durable request
is answered ``store_unavailable`` without waiting on a server that is not there. The
first use after a loss waits up to :data:`FIRST_WAIT_S` for the first attempt (a
server that restarted meanwhile costs no write); the first use after the
reconnector succeeded gets the new connection. A call on a connection (a batch, a
read) is cut after :data:`CALL_LIMIT_S` (:class:`~broker.store.postgres_liveness.CallLimit`),
so a server whose packets are dropped mid-call costs a bounded wait, not the kernel's.

Invariants:

* the URL a person sees has its password masked
  (:func:`broker.store.urls.display_url`), in every message and log line;
* every connection has the bus's schema as its ``search_path`` and the adapters
  below, whoever opened it;
* text goes through :func:`escape_text` on the way in and :func:`unescape_text` on
  the way out: PostgreSQL text cannot hold a NUL character, which a message may, and
  a batch must not fail because one sender wrote one. A backslash is doubled and a
  NUL becomes ``\\0``, so only text with either is stored differently.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
from psycopg.types.string import StrDumperUnknown, TextLoader

from broker.store.postgres_liveness import CallLimit, Reconnector

CONNECT_TIMEOUT_S = 3        # libpq's minimum is 2; a refused port fails at once anyway
RECONNECT_S = 0.5            # pause after a failed reconnect attempt before the next
FIRST_WAIT_S = 0.5           # the first use after a loss waits this long for a reconnect
CALL_LIMIT_S = 4.0           # a call (a batch, a read) still running then is cut: well
                             # under a client's 10 s, well over a healthy commit
LOCK_TIMEOUT_MS = 1000       # a row another broker's transaction holds longer is unavailable
# A server that stops answering on an open TCP connection is given up on after this
# long (libpq's TCP options; ignored on unix sockets, where the kernel tells at once).
TCP_USER_TIMEOUT_MS = 5000

_ESCAPED = re.compile(r"\\(.)", re.S)

# Failures of the server or the network rather than of the records: a later retry
# may succeed (a lock held past LOCK_TIMEOUT_MS, a serialization or deadlock
# rollback, a standby that cannot write, a server shutting down or unreachable).
UNAVAILABLE_ERRORS = (psycopg.OperationalError, psycopg.InterfaceError,
                      psycopg.errors.TransactionRollback,
                      psycopg.errors.ReadOnlySqlTransaction)


class ServerGone(psycopg.OperationalError):
    """The connection is lost and the next attempt to open it is not due yet."""


def lock_key(text: str) -> int:
    """A signed 64-bit advisory-lock key for ``text``."""
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big", signed=True)


def escape_text(text: str) -> str:
    if "\\" not in text and "\x00" not in text:
        return text
    return text.replace("\\", "\\\\").replace("\x00", "\\0")


def unescape_text(text: str) -> str:
    if "\\" not in text:
        return text
    return _ESCAPED.sub(lambda m: "\x00" if m[1] == "0" else m[1], text)


class _TextDumper(StrDumperUnknown):
    def dump(self, obj: str):
        return super().dump(escape_text(obj))


class _TextLoader(TextLoader):
    def load(self, data) -> str:
        return unescape_text(super().load(data))


def open_connection(url: str, schema: str, connect_timeout: int = CONNECT_TIMEOUT_S
                    ) -> psycopg.Connection:
    """A new connection on the bus's ``schema`` (which need not exist yet: a
    search_path naming a missing schema is simply empty). Raises psycopg errors."""
    conn = psycopg.connect(
        url, autocommit=True, connect_timeout=connect_timeout,
        application_name="intercom-broker",
        options=f"-c search_path={schema} -c lock_timeout={LOCK_TIMEOUT_MS}",
        keepalives=1, keepalives_idle=5, keepalives_interval=2, keepalives_count=2,
        tcp_user_timeout=TCP_USER_TIMEOUT_MS)
    conn.adapters.register_dumper(str, _TextDumper)
    conn.adapters.register_loader("text", _TextLoader)
    return conn


class Connection:
    """The store's connection, opened again in the background after a loss (see the
    module docstring). One thread uses it at a time."""

    def __init__(self, url: str, schema: str, conn: psycopg.Connection) -> None:
        self.url = url
        self.schema = schema
        self._conn: psycopg.Connection | None = conn
        self._reconnector: Reconnector | None = None    # running while the server is down
        self._limit = CallLimit()
        self._closed = False
        self.reconnects = 0

    @property
    def down(self) -> bool:
        """Whether the server is known to be down (a reconnect is being tried)."""
        return self._reconnector is not None

    def get(self) -> psycopg.Connection:
        """The open connection. Raises ServerGone while none can be had (the server is
        known to be down, or the first reconnect attempt after a loss failed)."""
        conn = self._conn
        if conn is not None and not conn.broken and not conn.closed:
            return conn
        self.drop()
        if self._closed:
            raise ServerGone("the PostgreSQL store is closed")
        reconnector = self._reconnector
        wait_s = 0.0
        if reconnector is None:
            reconnector = self._reconnector = Reconnector(self._open, RECONNECT_S)
            wait_s = FIRST_WAIT_S
        conn = reconnector.take(wait_s)
        if conn is None:
            why = reconnector.error
            raise ServerGone("the PostgreSQL server cannot be reached"
                             + (f" ({_one_line(why)})" if why is not None else "")
                             + "; trying again in the background")
        self._reconnector = None
        self._conn = conn
        self.reconnects += 1
        return conn

    @contextmanager
    def bounded(self, conn: psycopg.Connection, seconds: float | None = CALL_LIMIT_S
                ) -> Iterator[psycopg.Connection]:
        """Run the body as one call on ``conn`` (from :meth:`get`), cut past ``seconds``
        (None: not bounded). A cut call raises psycopg's OperationalError with ``conn``
        broken; drop it after the block, not inside it."""
        if seconds is None:
            yield conn
            return
        with self._limit.bounded(conn.pgconn.socket, seconds):
            yield conn

    @property
    def cuts(self) -> int:
        """Calls cut at their limit so far."""
        return self._limit.cuts

    def drop(self) -> None:
        """Forget the connection (after a failure that may have broken it)."""
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except psycopg.Error:
                pass

    def close(self) -> None:
        """Close for good: no reconnect, the background threads end."""
        self._closed = True
        if self._reconnector is not None:
            self._reconnector.stop()
            self._reconnector = None
        self._limit.close()
        self.drop()

    def _open(self) -> psycopg.Connection:
        return open_connection(self.url, self.schema)


def _one_line(exc: BaseException) -> str:
    lines = [" ".join(line.split()) for line in str(exc).splitlines() if line.strip()]
    return "; ".join(lines[:2]) if lines else type(exc).__name__
