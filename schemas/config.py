"""The per-user intercom config file: where it lives, what it may hold, how it is read.

The file is a JSON object at ``~/.atomic/agent/intercom/config.json``; the legacy
``~/.pi/agent/intercom/config.json`` is consulted only when the Atomic file does not
exist. :data:`CONFIG_FIELDS` is the single table of accepted keys, their types and
defaults; validation and documentation both read from it.

Invariant: a config file is applied entirely or not at all. Bad JSON, a non-object,
an unknown key or one bad value discards the whole file, and the loader falls back
to :data:`DEFAULT_CONFIG` together with one error string naming the file and the
first problem found. A missing file is not an error.
"""

from __future__ import annotations

import json
import math
import os
import pathlib
import reprlib
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

from .bounds import BOUNDS, BY_FIELD
from .groups import DEFAULT_GROUP, RESERVED_GROUPS
from .limits import ASK_TIMEOUT_S, MAX_GROUP_CHARS, MAX_PENDING_ASKS

CONFIG_RELPATHS = (".atomic/agent/intercom/config.json", ".pi/agent/intercom/config.json")


@dataclass(frozen=True)
class Config:
    brokerCommand: str = "npx"
    brokerArgs: tuple[str, ...] = ("--no-install", "tsx")
    confirmSend: bool = False
    replyHint: bool = True
    status: str | None = None
    group: str = DEFAULT_GROUP
    maxPendingAsks: int = MAX_PENDING_ASKS
    askTimeout: float = ASK_TIMEOUT_S
    # The broker's resource bounds (schemas.bounds); a client ignores them.
    maxSessions: int = BY_FIELD["max_sessions"].default
    maxSessionsPerConnection: int = BY_FIELD["max_sessions_per_connection"].default
    maxNewSessionsPerSecond: int = BY_FIELD["max_new_sessions_per_second"].default
    maxBacklogBytes: int = BY_FIELD["max_backlog_bytes"].default
    maxRunsPerSession: int = BY_FIELD["max_runs_per_session"].default
    maxRunEntries: int = BY_FIELD["max_run_entries"].default
    maxRunBytes: int = BY_FIELD["max_run_bytes"].default
    maxStickyBytes: int = BY_FIELD["max_sticky_bytes"].default
    maxGroups: int = BY_FIELD["max_groups"].default
    maxConversations: int = BY_FIELD["max_conversations"].default
    # The broker's database: a SQLite path or a postgresql:// URL (--db and $INTERCOM_DB
    # win over it); a client ignores it.
    db: str | None = None


DEFAULT_CONFIG = Config()


class ConfigError(ValueError):
    """The config data is unusable; the message names the first problem."""


class _Reject(Exception):
    """Raised by a field check when a value does not fit."""


def _need(ok: bool, value: Any) -> Any:
    if not ok:
        raise _Reject
    return value


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _command(value: object) -> str:
    return _need(isinstance(value, str) and bool(value.strip()), value)


def _string_list(value: object) -> tuple[str, ...]:
    return tuple(_need(isinstance(value, list) and all(isinstance(v, str) for v in value), value))


def _boolean(value: object) -> bool:
    return _need(isinstance(value, bool), value)


def _optional_string(value: object) -> str | None:
    return _need(value is None or isinstance(value, str), value)


def _optional_text(value: object) -> str | None:
    return _need(value is None or (isinstance(value, str) and bool(value.strip())), value)


def _group(value: object) -> str:
    name = value.strip() if isinstance(value, str) else ""
    return _need(0 < len(name) <= MAX_GROUP_CHARS and name.lower() not in RESERVED_GROUPS, name)


def _positive_int(value: object) -> int:
    return _need(_is_int(value) and value >= 1, value)


def _positive_seconds(value: object) -> float:
    number = _is_int(value) or isinstance(value, float)
    return float(_need(number and math.isfinite(value) and value > 0, value))


@dataclass(frozen=True)
class FieldSpec:
    expects: str                      # human description of an acceptable value
    default: Any
    check: Callable[[object], Any]    # returns the cleaned value or raises _Reject


_CHECKS: dict[str, tuple[str, Callable[[object], Any]]] = {
    "brokerCommand": ("a non-empty string", _command),
    "brokerArgs": ("a list of strings", _string_list),
    "confirmSend": ("true or false", _boolean),
    "replyHint": ("true or false", _boolean),
    "status": ("a string or null", _optional_string),
    "group": (f"a group name (1-{MAX_GROUP_CHARS} chars, not "
              f"{'/'.join(sorted(RESERVED_GROUPS))})", _group),
    "maxPendingAsks": ("an integer >= 1", _positive_int),
    "askTimeout": ("a number of seconds > 0", _positive_seconds),
    **{bound.config: ("an integer >= 1", _positive_int) for bound in BOUNDS},
    "db": ("a SQLite file path or a postgresql:// URL, or null", _optional_text),
}

CONFIG_FIELDS: dict[str, FieldSpec] = {
    name: FieldSpec(expects, getattr(DEFAULT_CONFIG, name), check)
    for name, (expects, check) in _CHECKS.items()
}
assert list(CONFIG_FIELDS) == [f.name for f in fields(Config)], "field table and Config disagree"


def parse_config(data: object) -> Config:
    """Build a Config from decoded JSON; raise ConfigError at the first bad key."""
    if not isinstance(data, dict):
        raise ConfigError(f"expected a JSON object, got {type(data).__name__}")
    values: dict[str, Any] = {}
    for key, raw in data.items():
        spec = CONFIG_FIELDS.get(key)
        if spec is None:
            raise ConfigError(f"unknown field {reprlib.repr(key)} (known: {', '.join(CONFIG_FIELDS)})")
        try:
            values[key] = spec.check(raw)
        except _Reject:
            raise ConfigError(f"field {key!r} must be {spec.expects}, got {reprlib.repr(raw)}") from None
    return Config(**values)


def config_paths(home: str | os.PathLike | None = None) -> list[pathlib.Path]:
    """Candidate config files in lookup order: Atomic first, then legacy."""
    base = pathlib.Path(home) if home is not None else pathlib.Path.home()
    return [base / rel for rel in CONFIG_RELPATHS]


def load_config(path: str | os.PathLike | None = None,
                home: str | os.PathLike | None = None) -> tuple[Config, str | None]:
    """Read the config; return ``(config, error)``. Never raises for a bad file.

    With ``path`` only that file is read and its absence is an error. Without it the
    first existing file from :func:`config_paths` is used, and none at all means
    defaults with no error.
    """
    if path is not None:
        target = pathlib.Path(path)
    else:
        target = next((p for p in config_paths(home) if p.exists()), None)
        if target is None:
            return DEFAULT_CONFIG, None
    try:
        return parse_config(json.loads(target.read_text(encoding="utf-8"))), None
    except FileNotFoundError:
        problem = "file not found"
    except (OSError, UnicodeDecodeError) as exc:
        problem = f"cannot read file ({exc.__class__.__name__}: {exc})"
    except ConfigError as exc:
        problem = str(exc)
    except (ValueError, RecursionError) as exc:    # JSONDecodeError and decoder limits
        problem = f"invalid JSON ({exc})"
    return DEFAULT_CONFIG, f"intercom config {target}: {problem}; all defaults used"
