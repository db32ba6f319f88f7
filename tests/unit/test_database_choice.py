"""Which database a broker opens: --db, else $INTERCOM_DB, else the config file's
``db``, else <data-dir>/intercom.db; a postgresql:// URL selects PostgreSQL."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.__main__ import database_from, parse_args
from schemas.config import ConfigError, parse_config

URL = "postgresql://bus@db.example:5432/intercom"


def chosen(argv: list[str], config: dict, monkeypatch, env: str | None = None):
    if env is None:
        monkeypatch.delenv("INTERCOM_DB", raising=False)
    else:
        monkeypatch.setenv("INTERCOM_DB", env)
    return database_from(parse_args(argv), parse_config(config), Path("/data"))


def test_the_flag_beats_the_environment_which_beats_the_config_file(monkeypatch):
    assert chosen(["--db", URL], {"db": "/c.db"}, monkeypatch, env="/e.db") == URL
    assert chosen([], {"db": "/c.db"}, monkeypatch, env=URL) == URL
    assert chosen([], {"db": URL}, monkeypatch) == URL
    assert chosen([], {}, monkeypatch) == Path("/data/intercom.db")


def test_a_path_is_a_sqlite_file_and_a_url_stays_text(monkeypatch):
    assert chosen(["--db", "~/bus.db"], {}, monkeypatch) == Path("~/bus.db").expanduser()
    assert chosen(["--db", URL + "?schema=blue"], {}, monkeypatch) == URL + "?schema=blue"


def test_the_config_files_db_must_be_text_or_null():
    assert parse_config({"db": None}).db is None
    with pytest.raises(ConfigError, match="'db'"):
        parse_config({"db": 5})


def test_a_schema_named_for_a_sqlite_database_stops_the_start_in_one_line(tmp_path, capsys,
                                                                          monkeypatch):
    from broker.__main__ import main
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("INTERCOM_DB", raising=False)
    assert main(["--data-dir", str(tmp_path / "data"), "--db-schema", "blue"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("broker: ") and "--db-schema" in err[0], err
