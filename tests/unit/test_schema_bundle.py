"""The JSON the Node client reads (clients/node/src/schemas.json) is exactly what
``python -m schemas.bundle`` makes from ``schemas``: nothing is retyped there."""

from __future__ import annotations

import json
from pathlib import Path

from schemas.bundle import bundle, describe
from schemas.errors import ERRORS

COMMITTED = Path(__file__).resolve().parents[2] / "clients" / "node" / "src" / "schemas.json"


def test_the_committed_bundle_is_current():
    assert COMMITTED.read_text(encoding="utf-8") == describe(), (
        "run: python -m schemas.bundle clients/node/src/schemas.json")


def test_the_bundle_holds_every_error_text_and_the_tool_schemas():
    data = json.loads(describe())
    assert data["errors"] == {code: spec.text for code, spec in ERRORS.items()}
    assert set(data["tools"]) >= {"intercom", "respond", "invoke", "attachment"}
    assert data == json.loads(json.dumps(bundle()))
