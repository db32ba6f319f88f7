"""The README's tour, run as a newcomer runs it: each Python block of it, verbatim, in a
process of its own against the data directory's broker (started on demand by the first
block), and every block twice, so the tour works on a data directory that has seen it."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from .conftest import ROOT, child_env
from .test_autostart import data_dir  # noqa: F401  (the fixture: a data dir, its brokers killed)

pytestmark = pytest.mark.timeout(120)


def tour_blocks() -> list[str]:
    text = (ROOT / "README.md").read_text()
    tour = text[text.index("## A five-minute tour"):]
    tour = tour[:tour.index("\n## ", 1)]
    return re.findall(r"```python\n(.*?)```", tour, re.S)


def test_the_tour_has_its_python_blocks():
    assert len(tour_blocks()) >= 2


def test_every_python_block_of_the_tour_runs_twice(data_dir):  # noqa: F811
    env = child_env(data_dir, INTERCOM_DATA_DIR=str(data_dir))
    for block in tour_blocks():
        for attempt in (1, 2):
            done = subprocess.run([sys.executable, "-c", block], cwd=ROOT, env=env,
                                  capture_output=True, text=True, timeout=60)
            assert done.returncode == 0, (attempt, block, done.stdout, done.stderr)
