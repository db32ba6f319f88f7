"""Shared pieces of the benchmark scripts ``scripts/bench.py`` and ``scripts/load_sessions.py``.

One idea per module:

``procs``            parent side: spawn child processes, the ready/go handshake, stop by
                     PID (SIGTERM, then SIGKILL), broker start helpers, /proc readers
``role_io``          child side: JSON-line events on stdout, waiting for ``go``, the
                     receiver clock
``baselines``        raw pyzmq forwarder/relay and raw apsw loop roles
``bus_roles``        our client's sender/receiver/asker/responder/durable roles
``roles``            the role registry and ``run_role`` (what ``bench.py --role`` runs)
``profiling``        cProfile of role processes (all threads) and its printout
``config``           bench.py settings, derived from its command line
``report``           result rows, the table printer, percentiles and medians
``live_sections``    bench.py sections ``throughput``, ``latency`` and ``ask``
``durable_section``  bench.py section ``durable`` and the sticky rows check
``peers_section``    bench.py section ``peers`` (``--peers``): the same workloads on NATS
``nats_roles``       the NATS roles, run by the NATS venv's interpreter
``scaling``          bench.py section ``scaling`` (costs at a small and a large size):
                     parts ``stages`` and ``runs`` and their roles
``scaling_departure``  its part ``departure`` (mass SIGKILL) and the observer role
``scaling_common``   constants and helpers both scaling modules share
``load_worker``      load_sessions.py worker role: holds its share of the sessions
``load_observers``   load_sessions.py watcher (presence events) and status prober
``load_run``         load_sessions.py run state: broker, workers, rows, problems, table
``load_phases``      load_sessions.py phases: connect, latency, fan-out, presence, close
``tree_compare``     bench_store.py ``--tree DIR``: durable sends, another checkout's
                     brokers against this one's, interleaved, and the after/before table

Roles run in fresh interpreters: the parent re-executes an entry point
(``BENCH_SCRIPT`` or ``LOAD_SCRIPT``) with ``--role NAME --role-args JSON``. Heavy
imports (zmq, msgpack, apsw, client) stay inside the functions that need them.
"""

from __future__ import annotations

import sys
from pathlib import Path

SCRIPTS_DIR = Path(__file__).resolve().parent.parent
ROOT = SCRIPTS_DIR.parent
BENCH_SCRIPT = SCRIPTS_DIR / "bench.py"
LOAD_SCRIPT = SCRIPTS_DIR / "load_sessions.py"

# Roles import broker, client and schemas from the project root.
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
