"""docs/operations.md's configuration table, from :data:`schemas.config.CONFIG_FIELDS`."""

from __future__ import annotations

import json

from schemas.bounds import BOUNDS
from schemas.config import CONFIG_FIELDS

from .protocol_tables import cell

_BOUND_KEYS = {bound.config for bound in BOUNDS}


def describe_config() -> str:
    lines = ["| key | value | default |", "|---|---|---|"]
    for name, spec in CONFIG_FIELDS.items():
        if name in _BOUND_KEYS:
            continue
        default = list(spec.default) if isinstance(spec.default, tuple) else spec.default
        lines.append(f"| `{name}` | {cell(spec.expects)} | `{json.dumps(default)}` |")
    lines.append(f"| {', '.join(f'`{key}`' for key in sorted(_BOUND_KEYS))} | an integer >= 1 | "
                 "the broker's limits: see [Limits](#limits) |")
    return "\n".join(lines) + "\n"
