"""The error table is complete: each code has a retry rule, advice, and a known side."""

from __future__ import annotations

from pathlib import Path

import pytest

from schemas.error_help import HELP
from schemas.errors import CLASSES, ERRORS, LOCAL, REDIRECTS, RETRY_RULES, BusError

ROOT = Path(__file__).resolve().parents[2]


def test_every_code_has_advice_and_no_advice_is_for_a_code_that_does_not_exist():
    assert set(HELP) == set(ERRORS)
    assert all(text.strip() for text in HELP.values())


def test_every_code_says_whether_a_retry_may_help_with_a_declared_rule():
    assert {spec.retry for spec in ERRORS.values()} <= set(RETRY_RULES)


def test_the_redirects_are_the_refusals_whose_reply_names_an_endpoint():
    named = {code for code in ERRORS
             if "endpoint" in BusError(code, endpoint="tcp://127.0.0.1:1").reply()}
    assert named == REDIRECTS == {"run_elsewhere", "run_moving"}


@pytest.mark.parametrize("code", sorted(LOCAL))
def test_no_broker_module_raises_a_code_a_client_gives_itself(code):
    quoted = f'"{code}"'
    assert LOCAL <= set(ERRORS)
    offenders = [str(path.relative_to(ROOT)) for path in (ROOT / "broker").rglob("*.py")
                 if quoted in path.read_text()]
    assert offenders == []


def test_every_code_belongs_to_a_declared_class():
    assert {spec.kind for spec in ERRORS.values()} <= set(CLASSES)
