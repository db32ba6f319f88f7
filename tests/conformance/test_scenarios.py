"""Every scenario file, run on each client alone through its driver, and the interop
ones with their actors alternating between the two clients (see README.md).

The same files pass for the Python and the Node client; a third language needs only
a driver in drivers/ and an entry in runner.DRIVERS. The module's broker has a
backlog bound past 2**53, so a welcome's ``backlogBytes`` shows whether a client
decodes 64-bit integers exactly (exact_values.json).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from .runner import load, run_scenario

SCENARIOS = sorted((Path(__file__).parent / "scenarios").glob("*.json"))
SHARED = [path for path in SCENARIOS if load(path).get("broker", "shared") == "shared"]
OWN = [path for path in SCENARIOS if load(path).get("broker") == "own"]
CLIENTS = ["python", "node"]
MIXED = [(path, kinds) for path in SHARED if load(path).get("interop")
         for kinds in (["python", "node"], ["node", "python"])]


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("path", SHARED, ids=lambda path: path.stem)
def test_scenario(path, client, module_bus, node_ready):
    run_scenario(load(path), [client], module_bus.variables)


@pytest.mark.parametrize("path, kinds", MIXED,
                         ids=[f"{path.stem}-{'-asks-'.join(kinds)}" for path, kinds in MIXED])
def test_interop(path, kinds, module_bus, node_ready):
    """Python asks Node and the reverse: the first actor on the first client."""
    run_scenario(load(path), kinds, module_bus.variables)


@pytest.mark.timeout(90)
@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("path", OWN, ids=lambda path: path.stem)
def test_scenario_with_its_own_broker(path, client, own_bus, node_ready):
    run_scenario(load(path), [client], own_bus.variables, restart=own_bus.restart)
