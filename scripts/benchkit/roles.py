"""The role registry: what ``bench.py --role NAME --role-args JSON`` runs.

Every measuring process is a fresh interpreter re-executing bench.py with those
arguments (:meth:`benchkit.procs.Harness.spawn_role`); :func:`run_role` looks the name
up in ``ROLES`` and calls it with the JSON arguments as keywords. New process kinds
are written in :mod:`benchkit.baselines`, :mod:`benchkit.bus_roles` or beside their
section (:mod:`benchkit.scaling`, :mod:`benchkit.scaling_departure`) and registered
here.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path
from typing import Callable

from benchkit.baselines import (
    role_raw_apsw_insert,
    role_raw_ask_probe,
    role_raw_ask_responder,
    role_raw_echo_probe,
    role_raw_forwarder,
    role_raw_receiver,
    role_raw_sender,
)
from benchkit.bus_roles import (
    role_bus_ask_probe,
    role_bus_ask_responder,
    role_bus_durable_sender,
    role_bus_list_probe,
    role_bus_receiver,
    role_bus_sender,
)
from benchkit.profiling import ThreadProfiles
from benchkit.role_io import run_reporting
from benchkit.scaling import (
    role_scaling_host,
    role_scaling_list_probe,
    role_scaling_register_host,
)
from benchkit.scaling_departure import role_scaling_observer

ROLES: dict[str, Callable[..., None]] = {
    "raw_forwarder": role_raw_forwarder,
    "raw_receiver": role_raw_receiver,
    "raw_sender": role_raw_sender,
    "raw_echo_probe": role_raw_echo_probe,
    "bus_receiver": role_bus_receiver,
    "bus_sender": role_bus_sender,
    "bus_list_probe": role_bus_list_probe,
    "raw_ask_responder": role_raw_ask_responder,
    "raw_ask_probe": role_raw_ask_probe,
    "bus_ask_responder": role_bus_ask_responder,
    "bus_ask_probe": role_bus_ask_probe,
    "bus_durable_sender": role_bus_durable_sender,
    "raw_apsw_insert": role_raw_apsw_insert,
    "scaling_host": role_scaling_host,
    "scaling_register_host": role_scaling_register_host,
    "scaling_list_probe": role_scaling_list_probe,
    "scaling_observer": role_scaling_observer,
}


def run_role(name: str, args_json: str) -> int:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    profile_dir = os.environ.get("BENCH_PROFILE_DIR")
    profiles = ThreadProfiles() if profile_dir else None
    try:
        return run_reporting(lambda: ROLES[name](**json.loads(args_json)))
    finally:
        if profiles is not None:
            profiles.dump(Path(profile_dir) / f"{name}-{os.getpid()}.prof")


