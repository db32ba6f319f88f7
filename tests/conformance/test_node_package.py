"""The Node client's own tests (``node --test`` in clients/node), so the one test
command of the README runs them too."""

from __future__ import annotations

import os
import re
import signal
import subprocess

import pytest

from .conftest import NODE_DIR
from .runner import driver_env

RUN_S = 280.0


@pytest.mark.timeout(300)
def test_the_node_clients_own_tests_pass(node_ready):
    # Its own process group: node --test runs each file in a child, and the files start
    # brokers; if the run overstays, the whole group goes, not only the parent.
    proc = subprocess.Popen([node_ready, "--test"], cwd=NODE_DIR, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=driver_env(),
                            start_new_session=True)
    try:
        stdout, stderr = proc.communicate(timeout=RUN_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        stdout, stderr = proc.communicate()
        pytest.fail(f"node --test ran past {RUN_S:g} s:\n{stdout[-6000:]}\n{stderr[-2000:]}")
    report = stdout[-8000:] + stderr[-3000:]
    assert proc.returncode == 0, report
    assert re.search(r"^# fail 0$", stdout, re.M), report
    assert re.search(r"^# pass [1-9]\d*$", stdout, re.M), report
