"""What a client in another language needs from ``schemas``, as one JSON document.

The Node client (``clients/node``) reads ``clients/node/src/schemas.json``, made by
``python -m schemas.bundle clients/node/src/schemas.json``: the protocol version,
the limits, every error code with its text template (Python ``str.format``
syntax: ``{name}``, ``{name!r}``, ``{name:g}``), the redirect codes, group rules,
session kinds and the tool parameter JSON Schemas. Nothing is retyped on the other
side; a unit test keeps the committed file equal to :func:`bundle`.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from . import limits
from .errors import ERRORS, REDIRECTS
from .groups import DEFAULT_GROUP, ENV_GROUP_VARS, RESERVED_GROUPS
from .names import SESSION_KINDS
from .tools import ATTACHMENT_SCHEMA, TOOL_SCHEMAS


def bundle() -> dict[str, Any]:
    """The JSON-ready document (see the module docstring)."""
    return {
        "protocolVersion": limits.PROTOCOL_VERSION,
        "limits": {name: value for name, value in vars(limits).items()
                   if name.isupper() and isinstance(value, (int, float))},
        "errors": {code: spec.text for code, spec in ERRORS.items()},
        "redirects": sorted(REDIRECTS),
        "groups": {"default": DEFAULT_GROUP, "reserved": sorted(RESERVED_GROUPS),
                   "envVars": list(ENV_GROUP_VARS)},
        "sessionKinds": list(SESSION_KINDS),
        "tools": {**TOOL_SCHEMAS, "attachment": ATTACHMENT_SCHEMA},
    }


def describe() -> str:
    return json.dumps(bundle(), indent=1, ensure_ascii=False) + "\n"


if __name__ == "__main__":
    if len(sys.argv) > 1:
        Path(sys.argv[1]).write_text(describe(), encoding="utf-8")
    else:
        sys.stdout.write(describe())
