"""What a person is told when the PostgreSQL store cannot be used at start: one line
that names the database (password masked) and says what to do."""

from __future__ import annotations

import psycopg
from psycopg import errors

from broker.store import SchemaError
from broker.store.urls import display_url

OTHER = "or start with another --db"


def open_problem(url: str, exc: BaseException) -> str:
    """One line for a person: what is wrong with the database at ``url`` and what to do."""
    where = display_url(url)
    reason = _first_line(exc)
    if isinstance(exc, SchemaError):
        return f"{exc} (database {where}); start a newer broker, {OTHER}"
    if isinstance(exc, ValueError) and not isinstance(exc, psycopg.Error):
        return f"bad PostgreSQL database {where}: {reason}; {OTHER}"
    if isinstance(exc, errors.InsufficientPrivilege):
        return (f"the user of {where} may not create or use the bus's schema ({reason}); "
                f"grant it CREATE on the database or make it the schema's owner, {OTHER}")
    if isinstance(exc, psycopg.OperationalError):
        # libpq gives no SQLSTATE for a refused connection: its text says which.
        if "database" in reason and "does not exist" in reason:
            return (f"the database of {where} does not exist ({reason}); create it "
                    f"(createdb, or CREATE DATABASE as its owner), {OTHER}")
        if any(word in reason for word in ("password", "authentication", "role")):
            return (f"PostgreSQL at {where} refused the login ({reason}); check the user and "
                    f"its password (in the URL, $PGPASSWORD or ~/.pgpass), {OTHER}")
        if "FATAL" in reason:
            return f"PostgreSQL at {where} refused the connection ({reason}); {OTHER}"
        return (f"cannot reach PostgreSQL at {where} ({reason}); start the server or check "
                f"the host, port and network, {OTHER}")
    return f"cannot use PostgreSQL database {where} ({reason}); {OTHER}"


def _first_line(exc: BaseException) -> str:
    """The error's text on one line (libpq's messages run over several, and repeat the
    host and port the URL names already)."""
    text = str(exc).rpartition(" failed: ")[2] if "connection failed" in str(exc) else str(exc)
    lines = [" ".join(line.split()) for line in text.splitlines() if line.strip()]
    return "; ".join(lines[:2]) if lines else type(exc).__name__
