"""Every scenario file, run once on each client through its driver (see README.md).

The same files pass for the Python and the Node client; a third language needs only
a driver in drivers/ and an entry in runner.DRIVERS.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from .runner import load, run_scenario

SCENARIOS = sorted((Path(__file__).parent / "scenarios").glob("*.json"))
SHARED = [path for path in SCENARIOS if load(path).get("broker", "shared") == "shared"]
# "big" scenarios need the broker of test_interop.py, which runs them on each client too.
OWN = [path for path in SCENARIOS if load(path).get("broker") == "own"]
CLIENTS = ["python", "node"]


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("path", SHARED, ids=lambda path: path.stem)
def test_scenario(path, client, module_bus, node_ready):
    run_scenario(load(path), [client], module_bus.variables)


@pytest.mark.timeout(90)
@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("path", OWN, ids=lambda path: path.stem)
def test_scenario_with_its_own_broker(path, client, own_bus, node_ready):
    run_scenario(load(path), [client], own_bus.variables, restart=own_bus.restart)
