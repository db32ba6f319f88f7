"""Config file lookup, defaults and whole-file rejection (schemas/config.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from schemas.config import (
    CONFIG_FIELDS,
    DEFAULT_CONFIG,
    Config,
    ConfigError,
    config_paths,
    load_config,
    parse_config,
)
from schemas.limits import ASK_TIMEOUT_S, MAX_PENDING_ASKS

FULL = {
    "brokerCommand": "bun",
    "brokerArgs": [],
    "confirmSend": True,
    "replyHint": False,
    "status": "researching",
    "group": "review",
    "maxPendingAsks": 3,
    "askTimeout": 90,
}


def write(path: Path, content: object) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    return path


def atomic(home: Path) -> Path:
    return config_paths(home)[0]


def legacy(home: Path) -> Path:
    return config_paths(home)[1]


def test_paths_are_atomic_then_legacy(tmp_path):
    assert config_paths(tmp_path) == [
        tmp_path / ".atomic/agent/intercom/config.json",
        tmp_path / ".pi/agent/intercom/config.json",
    ]


def test_defaults_match_documented_values():
    assert DEFAULT_CONFIG == Config(
        brokerCommand="npx", brokerArgs=("--no-install", "tsx"), confirmSend=False,
        replyHint=True, status=None, group="default",
        maxPendingAsks=MAX_PENDING_ASKS, askTimeout=ASK_TIMEOUT_S,
    )


def test_field_table_covers_every_field_with_its_default():
    assert {name: spec.default for name, spec in CONFIG_FIELDS.items()} == vars(DEFAULT_CONFIG)


def test_no_file_gives_defaults_without_error(tmp_path):
    assert load_config(home=tmp_path) == (DEFAULT_CONFIG, None)


def test_atomic_file_is_read(tmp_path):
    write(atomic(tmp_path), {"group": "alpha"})
    config, error = load_config(home=tmp_path)
    assert error is None
    assert config.group == "alpha"


def test_legacy_file_is_read_when_atomic_absent(tmp_path):
    write(legacy(tmp_path), {"group": "old"})
    config, error = load_config(home=tmp_path)
    assert error is None
    assert config.group == "old"


def test_atomic_file_wins_over_legacy(tmp_path):
    write(atomic(tmp_path), {"group": "new"})
    write(legacy(tmp_path), {"group": "old", "confirmSend": True})
    config, error = load_config(home=tmp_path)
    assert error is None
    assert config == Config(group="new")


def test_invalid_atomic_file_does_not_fall_back_to_legacy(tmp_path):
    bad = write(atomic(tmp_path), "{nope")
    write(legacy(tmp_path), {"group": "old"})
    config, error = load_config(home=tmp_path)
    assert config == DEFAULT_CONFIG
    assert str(bad) in error


def test_invalid_json_rejects_whole_file_and_names_path(tmp_path):
    bad = write(atomic(tmp_path), '{"group": "alpha",')
    config, error = load_config(home=tmp_path)
    assert config == DEFAULT_CONFIG
    assert str(bad) in error
    assert "JSON" in error


@pytest.mark.parametrize("field, value", [
    ("confirmSend", "yes"),
    ("replyHint", 1),
    ("brokerCommand", ""),
    ("brokerCommand", 7),
    ("brokerArgs", [1]),
    ("brokerArgs", "tsx"),
    ("status", 5),
    ("group", ""),
    ("group", "   "),
    ("group", "auto"),
    ("group", "True"),
    ("group", "g" * 129),
    ("maxPendingAsks", 0),
    ("maxPendingAsks", True),
    ("maxPendingAsks", 2.5),
    ("askTimeout", -1),
    ("askTimeout", 0),
    ("askTimeout", False),
    ("askTimeout", "600"),
])
def test_one_bad_field_rejects_whole_file(tmp_path, field, value):
    bad = write(atomic(tmp_path), {"confirmSend": True, "status": "busy", field: value})
    config, error = load_config(home=tmp_path)
    assert config == DEFAULT_CONFIG
    assert str(bad) in error
    assert repr(field) in error


def test_infinite_ask_timeout_rejects_file(tmp_path):
    write(atomic(tmp_path), '{"askTimeout": Infinity}')
    config, error = load_config(home=tmp_path)
    assert config == DEFAULT_CONFIG
    assert "askTimeout" in error


def test_unknown_field_rejects_whole_file(tmp_path):
    write(atomic(tmp_path), {"group": "alpha", "colour": "blue"})
    config, error = load_config(home=tmp_path)
    assert config == DEFAULT_CONFIG
    assert "colour" in error


@pytest.mark.parametrize("content", [[1, 2], "just text", 42, None])
def test_non_object_json_rejects_file(tmp_path, content):
    bad = write(atomic(tmp_path), content)
    config, error = load_config(home=tmp_path)
    assert config == DEFAULT_CONFIG
    assert str(bad) in error


def test_explicit_missing_path_is_an_error(tmp_path):
    missing = tmp_path / "nowhere.json"
    config, error = load_config(missing)
    assert config == DEFAULT_CONFIG
    assert str(missing) in error


def test_explicit_path_ignores_home_files(tmp_path):
    write(atomic(tmp_path), {"group": "home"})
    chosen = write(tmp_path / "other.json", {"group": "chosen"})
    assert load_config(chosen, home=tmp_path) == (Config(group="chosen"), None)


def test_unreadable_path_is_reported_not_raised(tmp_path):
    atomic(tmp_path).mkdir(parents=True)   # a directory where the file should be
    config, error = load_config(home=tmp_path)
    assert config == DEFAULT_CONFIG
    assert str(atomic(tmp_path)) in error


def test_non_utf8_file_is_reported_not_raised(tmp_path):
    path = atomic(tmp_path)
    path.parent.mkdir(parents=True)
    path.write_bytes(b'{"status": "\xff"}')
    config, error = load_config(home=tmp_path)
    assert config == DEFAULT_CONFIG
    assert error is not None


def test_full_valid_file_sets_every_field(tmp_path):
    write(atomic(tmp_path), FULL)
    assert load_config(home=tmp_path) == (Config(
        brokerCommand="bun", brokerArgs=(), confirmSend=True, replyHint=False,
        status="researching", group="review", maxPendingAsks=3, askTimeout=90.0,
    ), None)


def test_group_is_trimmed():
    assert parse_config({"group": "  team  "}).group == "team"


def test_ask_timeout_is_stored_as_float():
    config = parse_config({"askTimeout": 30})
    assert config.askTimeout == 30.0 and isinstance(config.askTimeout, float)


def test_null_status_means_no_status():
    assert parse_config({"status": None}).status is None


def test_parse_config_raises_config_error_for_non_object():
    with pytest.raises(ConfigError):
        parse_config(["group", "alpha"])


def test_parse_config_reports_first_problem_in_file_order():
    with pytest.raises(ConfigError, match="confirmSend"):
        parse_config({"confirmSend": "yes", "group": ""})
