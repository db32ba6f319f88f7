"""Per-agent settings the broker reads: ``<data dir>/agents/<agent>/config/*.toml``.

Two files per agent, both TOML with top-level keys only:

* ``agent.toml``: ``ownerId = "<channel id>"``, the channel respond's ``owner`` reaches;
* ``tools.toml``: ``invoke = true|false`` (default false), whether the agent may invoke.

A session never asserts these: the broker reads them at start and again on SIGHUP and
hands the core one :class:`AgentSettings` per agent directory.

Invariant (as for the intercom config, :mod:`schemas.config`): a file is applied
entirely or not at all. Bad TOML, an unknown key or one value of the wrong type
rejects that file whole with one problem string naming it, and that file's defaults
apply. A missing file is not an error. Directories whose name is not a safe agent
name are skipped with a problem string.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable

from .limits import MAX_AGENT_CHARS, MAX_CHANNEL_CHARS
from .names import CHANNEL_PLATFORMS

AGENT_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,%d}" % (MAX_AGENT_CHARS - 1))


def safe_agent_name(name: object) -> bool:
    """1..128 characters of [A-Za-z0-9._-], not starting with '.' (a directory name)."""
    return isinstance(name, str) and AGENT_NAME.fullmatch(name) is not None


def channel_problem(channel: object) -> bool:
    """True when ``channel`` is not ``<platform>:<rest>`` with a known platform."""
    if not isinstance(channel, str) or not 0 < len(channel) <= MAX_CHANNEL_CHARS:
        return True
    platform, colon, rest = channel.partition(":")
    return not (colon and rest and platform in CHANNEL_PLATFORMS)


@dataclass(frozen=True, slots=True)
class AgentSettings:
    owner_id: str | None = None     # agent.toml ownerId
    invoke: bool = False            # tools.toml invoke
    # delivery.toml none: channels this agent's respond outputs are not sent to (a send
    # filter: respond still answers sent, as the configured path completed)
    no_delivery: frozenset[str] = frozenset()


DEFAULT_SETTINGS = AgentSettings()


class _Reject(Exception):
    pass


def _channel(value: object) -> str:
    if channel_problem(value):
        raise _Reject
    return value  # type: ignore[return-value]


def _channels(value: object) -> frozenset[str]:
    if not isinstance(value, list) or len(value) > 1024:
        raise _Reject
    return frozenset(_channel(item) for item in value)


def _boolean(value: object) -> bool:
    if not isinstance(value, bool):
        raise _Reject
    return value


# file name -> {key: (what it must be, check, AgentSettings field)}
FILES: dict[str, dict[str, tuple[str, Callable[[object], Any], str]]] = {
    "agent.toml": {"ownerId": ("a channel id such as \"discord:123\"", _channel, "owner_id")},
    "tools.toml": {"invoke": ("true or false", _boolean, "invoke")},
    "delivery.toml": {"none": ("a list of channel ids such as [\"discord:123\"]", _channels,
                               "no_delivery")},
}


class AgentConfigError(ValueError):
    """A settings file is unusable; the message names the first problem."""


def parse_file(name: str, data: dict[str, Any]) -> dict[str, Any]:
    """The AgentSettings fields file ``name`` sets. Raises AgentConfigError."""
    table = FILES[name]
    values = {}
    for key, raw in data.items():
        spec = table.get(key)
        if spec is None:
            raise AgentConfigError(f"unknown key {key!r} (known: {', '.join(table)})")
        expects, check, field = spec
        try:
            values[field] = check(raw)
        except _Reject:
            raise AgentConfigError(f"key {key!r} must be {expects}, got {raw!r:.80}") from None
    return values


def load_agent(config_dir: Path) -> tuple[AgentSettings, list[str]]:
    """One agent's settings from its ``config`` directory, and a problem per rejected file."""
    settings, problems = DEFAULT_SETTINGS, []
    for name in FILES:
        path = config_dir / name
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            continue
        except (OSError, UnicodeDecodeError) as exc:
            problems.append(f"agent config {path}: cannot read ({exc}); its defaults used")
            continue
        import tomllib  # here, not at the top: most starts read no agent file, and it costs ~8 ms
        try:
            settings = replace(settings, **parse_file(name, tomllib.loads(text)))
        except tomllib.TOMLDecodeError as exc:
            problems.append(f"agent config {path}: invalid TOML ({exc}); its defaults used")
        except AgentConfigError as exc:
            problems.append(f"agent config {path}: {exc}; its defaults used")
    return settings, problems


def load_agents(agents_dir: Path) -> tuple[dict[str, AgentSettings], list[str]]:
    """Every agent directory under ``agents_dir``: name -> settings, and the problems.

    Never raises for a bad file; a missing ``agents_dir`` means no agents."""
    found: dict[str, AgentSettings] = {}
    problems: list[str] = []
    try:
        entries = sorted(p for p in agents_dir.iterdir() if p.is_dir())
    except (FileNotFoundError, NotADirectoryError):
        return found, problems
    except OSError as exc:
        return found, [f"agent config {agents_dir}: cannot list ({exc}); no agent settings"]
    for entry in entries:
        if not safe_agent_name(entry.name):
            problems.append(f"agent config {entry}: not a safe agent name; skipped")
            continue
        found[entry.name], more = load_agent(entry / "config")
        problems += more
    return found, problems
