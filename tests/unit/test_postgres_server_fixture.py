"""The tests' PostgreSQL server is real or the tests that need it fail, saying why: a
machine without initdb/pg_ctl never skips them silently."""

from __future__ import annotations

import pytest

from tests import postgres_server
from tests.postgres_server import PostgresMissing, find_tool


def test_a_missing_postgresql_program_is_a_failure_that_says_what_to_install(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setattr(postgres_server, "SEARCHED", ["/nonexistent"])
    with pytest.raises(PostgresMissing, match="initdb was not found.*install PostgreSQL"):
        find_tool("initdb")


def test_the_shared_server_serves_and_each_schema_url_is_a_new_bus(postgres_server):
    with postgres_server.connect() as conn:
        assert conn.execute("SHOW fsync").fetchone() == ("on",)
    assert postgres_server.schema_url() != postgres_server.schema_url()
