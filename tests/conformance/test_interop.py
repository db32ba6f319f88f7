"""Interop: the same scenarios with their actors alternating between the Python and
the Node client, so each asks the other and the reverse, on a broker whose backlog
bound is past 2**53 (the welcome's ``backlogBytes`` must arrive exact in both)."""

from __future__ import annotations

import pytest

from .runner import load
from .runner import run_scenario
from .test_scenarios import SCENARIOS

INTEROP = [path for path in SCENARIOS if load(path).get("interop")]
BIG = [path for path in SCENARIOS if load(path).get("broker") == "big"]
MIXED = [["python", "node"], ["node", "python"]]
cases = [(path, kinds) for path in INTEROP for kinds in MIXED]
cases += [(path, [kind]) for path in BIG for kind in ("python", "node")]


@pytest.mark.parametrize("path, kinds", cases,
                         ids=[f"{path.stem}-{'-asks-'.join(kinds)}" for path, kinds in cases])
def test_interop(path, kinds, big_bus, node_ready):
    run_scenario(load(path), kinds, big_bus.variables)
