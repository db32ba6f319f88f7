"""The PostgreSQL store's one connection: the URL it comes from, how it is opened, how
it is opened again after the server went away, and what its failures mean.

The persistence worker is the store's only user, one batch at a time, so the pool
is one connection (:class:`Connection`): it is opened on demand, dropped when it
breaks, and opened again at the next use, at most once per :data:`RECONNECT_S`;
between attempts a use fails at once (:class:`ServerGone`), so a durable request is
answered ``store_unavailable`` without waiting on a server that is not there.

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
import time

import psycopg
from psycopg.types.string import StrDumperUnknown, TextLoader

CONNECT_TIMEOUT_S = 3        # libpq's minimum is 2; a refused port fails at once anyway
RECONNECT_S = 0.5            # a lost server is tried again at most this often
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
    """The store's connection, opened again on demand after a loss (see the module
    docstring). One thread uses it at a time."""

    def __init__(self, url: str, schema: str, conn: psycopg.Connection) -> None:
        self.url = url
        self.schema = schema
        self._conn: psycopg.Connection | None = conn
        self._next_attempt = 0.0
        self.reconnects = 0

    def get(self) -> psycopg.Connection:
        """The open connection. Raises ServerGone while none can be had yet, psycopg's
        OperationalError when opening one fails now."""
        conn = self._conn
        if conn is not None and not conn.broken and not conn.closed:
            return conn
        self.drop()
        now = time.monotonic()
        if now < self._next_attempt:
            raise ServerGone("the PostgreSQL connection is lost; trying again shortly")
        self._next_attempt = now + RECONNECT_S
        self._conn = open_connection(self.url, self.schema)
        self.reconnects += 1
        return self._conn

    def drop(self) -> None:
        """Forget the connection (after a failure that may have broken it)."""
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except psycopg.Error:
                pass

    def close(self) -> None:
        self.drop()
        self._next_attempt = float("inf")     # closed for good: no reconnect
