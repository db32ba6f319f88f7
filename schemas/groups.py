"""Group names and home-group precedence, shared by broker and client.

A session always belongs to at least one group. Its home group (the one it starts in
and returns to on a bare ``leave``) is the first of, in order: the group given
explicitly for the stage/task/subagent, the group inherited from the launching
session (or the runtime-owned workflow invocation group), the environment
(``ATOMIC_INTERCOM_GROUP``, then legacy ``PI_INTERCOM_GROUP``), the config file's
``group``, and finally ``default``.
"""

from __future__ import annotations

from collections.abc import Mapping

from .errors import BusError
from .limits import MAX_GROUP_CHARS

DEFAULT_GROUP = "default"
RESERVED_GROUPS = frozenset({"true", "auto"})
ENV_GROUP_VARS = ("ATOMIC_INTERCOM_GROUP", "PI_INTERCOM_GROUP")
WORKFLOW_PREFIX = "workflow:"


def has_control_chars(text: str) -> bool:
    """Whether ``text`` holds a control character (a newline, an escape, DEL...): names
    people read in lists and tables never do."""
    return any(ord(c) < 32 or 127 <= ord(c) < 160 for c in text)


def clean_group(name: object) -> str:
    """Trim and check a group name a caller asked to join.

    Raises BusError(invalid_group | reserved_group).
    """
    if not isinstance(name, str) or not name.strip() or len(name.strip()) > MAX_GROUP_CHARS \
            or has_control_chars(name.strip()):
        raise BusError("invalid_group", limit=MAX_GROUP_CHARS)
    name = name.strip()
    if name.lower() in RESERVED_GROUPS:
        raise BusError("reserved_group", group=name)
    return name


def env_group(environ: Mapping[str, str]) -> str | None:
    """The group named by the environment, if any (Atomic's variable wins)."""
    for var in ENV_GROUP_VARS:
        value = environ.get(var, "").strip()
        if value:
            return value
    return None


def resolve_home_group(explicit: str | None = None, inherited: str | None = None,
                       env: str | None = None, config: str | None = None) -> str:
    """First non-empty candidate in precedence order, else ``default``."""
    for candidate in (explicit, inherited, env, config):
        if isinstance(candidate, str) and candidate.strip():
            return candidate.strip()
    return DEFAULT_GROUP
