"""What ``--db`` names: a SQLite file, or a PostgreSQL database and the bus's schema in
it; and how such a URL is shown to a person (password masked). Plain text work, no
driver: the broker reads these before it knows whether psycopg is installed."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

POSTGRES_SCHEMES = ("postgresql://", "postgres://")
DEFAULT_SCHEMA = "intercom"

_SCHEMA_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")
_PASSWORD = re.compile(r"(?<=://)([^/@:]*):([^/@]*)@")


def is_postgres(db: str | Path) -> bool:
    """Whether ``db`` names a PostgreSQL database rather than a SQLite file."""
    return isinstance(db, str) and db.startswith(POSTGRES_SCHEMES)


def display_url(url: str) -> str:
    """``url`` with its password masked, for messages and logs."""
    masked = _PASSWORD.sub(lambda m: f"{m[1]}:***@", url)
    scheme, netloc, path, query, fragment = urlsplit(masked)
    if "password" not in query:
        return masked
    pairs = [(k, "***" if k == "password" else v) for k, v in parse_qsl(query, keep_blank_values=True)]
    return urlunsplit((scheme, netloc, path, urlencode(pairs, safe="*"), fragment))


def database_name(db: str | Path) -> str:
    """``db`` as a person may see it (a URL's password masked)."""
    return display_url(db) if is_postgres(db) else str(db)


def split_url(url: str, schema: str | None = None) -> tuple[str, str]:
    """The URL libpq connects with (``schema`` removed) and the bus's schema name:
    ``schema`` when given, else the URL's ``?schema=``, else :data:`DEFAULT_SCHEMA`.

    Raises ValueError for a schema name that is not a plain lowercase identifier."""
    scheme, netloc, path, query, fragment = urlsplit(url)
    pairs = parse_qsl(query, keep_blank_values=True)
    named = [v for k, v in pairs if k == "schema"]
    chosen = schema or (named[-1] if named else DEFAULT_SCHEMA)
    if not _SCHEMA_NAME.fullmatch(chosen) or chosen.startswith("pg_"):
        raise ValueError(f"schema name {chosen!r} must be lowercase letters, digits and _ "
                         "(at most 63, not starting with a digit or pg_)")
    rest = urlencode([(k, v) for k, v in pairs if k != "schema"])
    return urlunsplit((scheme, netloc, path, rest, fragment)), chosen
