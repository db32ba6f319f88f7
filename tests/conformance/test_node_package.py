"""The Node client's own tests (``node --test`` in clients/node), so the one test
command of the README runs them too."""

from __future__ import annotations

import re
import subprocess

import pytest

from .conftest import NODE_DIR
from .runner import driver_env


@pytest.mark.timeout(300)
def test_the_node_clients_own_tests_pass(node_ready):
    done = subprocess.run([node_ready, "--test"], cwd=NODE_DIR, capture_output=True, text=True,
                          timeout=280, env=driver_env())
    report = done.stdout[-8000:] + done.stderr[-3000:]
    assert done.returncode == 0, report
    assert re.search(r"^# fail 0$", done.stdout, re.M), report
    assert re.search(r"^# pass [1-9]\d*$", done.stdout, re.M), report
