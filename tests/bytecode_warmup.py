"""Fill the bytecode cache once, before the xdist workers start.

Each worker collects the whole suite: it imports every test module (which pytest
rewrites for its assertion messages, then compiles) and the broker, client and schema
modules they import. On a fresh clone nothing is cached, so every worker did all of that
work at the same moment: about 8 s of CPU each, 50 s for the run on this 2-core machine
(a cold run took 184 s, the same run warm 156 s). Here the controller does it once, in
three children that share the cores: two collect half of the suite each (writing the
rewritten test modules), one compiles the sources. The workers then start from the
cache. On a warm cache the children find everything compiled and take about 2 s.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

GUARD = "INTERCOM_TEST_WARMUP"          # set in the children: their conftest does not warm again


def warm(root: Path, timeout_s: float = 120.0) -> None:
    """Compile the sources and the rewritten test modules into the cache the workers and
    every child process use (``PYTHONPYCACHEPREFIX`` if set, else ``__pycache__``). A
    child that fails only costs the workers the work it would have saved: collection
    errors are reported by the run itself, so its output is not kept."""
    if os.environ.get(GUARD):
        return
    env = {**os.environ, GUARD: "1"}
    collect = [sys.executable, "-m", "pytest", "--collect-only", "-q", "-o", "addopts=",
               "-p", "no:cacheprovider", "-p", "no:xdist"]
    children = [
        collect + ["tests/unit"],
        collect + [str(path.relative_to(root)) for path in sorted((root / "tests").iterdir())
                   if path.is_dir() and path.name not in ("unit", "__pycache__")],
        [sys.executable, "-m", "compileall", "-q", "-j", "1", "broker", "client", "schemas", "scripts"],
    ]
    procs = [subprocess.Popen(argv, cwd=root, env=env, stdin=subprocess.DEVNULL,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
             for argv in children]
    for proc in procs:
        try:
            proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
