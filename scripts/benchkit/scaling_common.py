"""What the ``scaling`` section's two modules share (:mod:`benchkit.scaling`,
:mod:`benchkit.scaling_departure`).

The timing constants (``LIVENESS_S``, ``SETTLE_S``), the note every row's large vs
small reading starts with (``NOTE``), and the helpers on both sides: reading JSON
commands on stdin and connecting a session (child side), asking a long-lived role
and adding a scaling row (parent side).
"""

from __future__ import annotations

import json
import sys
from typing import Any, Iterator

from benchkit.procs import Proc
from benchkit.report import Results, Row

LIVENESS_S = 3.0          # schemas.limits.LIVENESS_S, the client's promise
# register_run is answered before its row is committed: let the store catch up
# before timing list, so the figure is about the runs hosted, not the commits.
SETTLE_S = 1.0
NOTE = "ours = large size, baseline = small size of the same run; ratio = large / small"

# =====================================================================================
# Child side
# =====================================================================================


def commands() -> Iterator[dict]:
    """JSON commands on stdin, one a line, until EOF or ``{"cmd": "stop"}``."""
    for line in sys.stdin:
        if not line.strip():
            continue
        cmd = json.loads(line)
        if cmd.get("cmd") == "stop":
            return
        yield cmd


def open_session(name: str, endpoint: str, **kwargs: Any):
    """A client session at ``endpoint`` (``Client.connect``, 20 s timeout)."""
    from client import Client

    return Client.connect(name=name, endpoint=endpoint, timeout=20, **kwargs)


# =====================================================================================
# Parent side
# =====================================================================================


def ask(proc: Proc, event: str, timeout: float, **cmd: Any) -> dict:
    """Send one command line to a long-lived role and wait for its answer."""
    proc.tell(json.dumps(cmd))
    return proc.expect(event, timeout)


def row(results: Results, label: str, unit: str, large: list[float], small: list[float],
        note: str = "") -> None:
    results.add(Row("scaling", label, unit, large, small, note=note))
