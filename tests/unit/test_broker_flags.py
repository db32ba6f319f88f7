"""The broker's timing flags (``python -m broker``): parsed into the engine's Limits,
refused when out of range, and the liveness window told to clients in the welcome."""

from __future__ import annotations

import pytest

from broker.__main__ import limits_from, parse_args
from schemas.config import DEFAULT_CONFIG
from schemas.limits import ADOPT_GRACE_S, LEASE_S, LIVENESS_S

from .harness import Bus


def limits_of(*argv: str):
    return limits_from(parse_args(list(argv)), DEFAULT_CONFIG)


def test_without_flags_the_windows_are_the_documented_defaults():
    limits = limits_of()
    assert (limits.liveness_s, limits.adopt_grace_s, limits.host_lease_s) == \
        (LIVENESS_S, ADOPT_GRACE_S, LEASE_S)


def test_liveness_and_adoption_grace_flags_set_the_engines_windows():
    limits = limits_of("--liveness-s", "1.5", "--adopt-grace-s", "4")
    assert (limits.liveness_s, limits.adopt_grace_s) == (1.5, 4.0)


@pytest.mark.parametrize("argv", [("--liveness-s", "0.1"), ("--liveness-s", "x"),
                                  ("--adopt-grace-s", "0"), ("--adopt-grace-s", "-3")])
def test_a_window_out_of_range_stops_the_start_with_a_usage_error(argv, capsys):
    with pytest.raises(SystemExit) as stopped:
        parse_args(list(argv))
    assert stopped.value.code == 2
    assert argv[0] in capsys.readouterr().err


def test_the_welcome_tells_the_client_the_brokers_liveness_window():
    assert Bus(liveness_s=1.5).hello("alice")["livenessS"] == 1.5
    assert Bus().hello("alice")["livenessS"] == LIVENESS_S
