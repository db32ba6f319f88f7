"""Starting a broker when a client finds none at the default endpoint.

Only the default endpoint (no endpoint given, no ``$INTERCOM_ENDPOINT``) is started
on demand: an explicit endpoint names a broker someone runs on purpose. The broker
runs detached (a session of its own, stdin and stdout on /dev/null, working directory
the data directory) and stops by itself :data:`IDLE_EXIT_S` after its last session
left (``--exit-when-idle``, see :mod:`broker.idle`).

The command is the config's ``brokerCommand`` and ``brokerArgs``, then ``-m broker``
and the flags. The default pair (``npx``, ``["--no-install", "tsx"]``) names the
reference implementation's runtime; here ``npx`` means this Python
(``sys.executable``, no PATH lookup) and those default arguments mean none. So
``{"brokerArgs": ["-X", "dev"]}`` runs this Python with them, and
``{"brokerCommand": "/opt/py/bin/python3", "brokerArgs": []}`` another Python.

Files in the data directory:

* ``broker.spawn.lock``: an flock held while one client starts the broker and waits
  for its socket; concurrent first clients wait for it, find the broker listening,
  and start none (exactly one broker per data directory);
* ``broker.pid``: the serving broker's pid (the broker writes it once bound and
  removes it as it stops);
* ``broker.log``: the broker's stderr (its JSON log lines), appended, mode 0600.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Iterator

from schemas.config import DEFAULT_CONFIG, Config
from schemas.errors import error_text
from schemas.paths import ensure_data_dir

from . import reach
from .session import ConnectError

IDLE_EXIT_S = 5.0
LOCK_FILE, PID_FILE, LOG_FILE = "broker.spawn.lock", "broker.pid", "broker.log"
_POLL_S = 0.02


def broker_command(config: Config, base: Path, config_path: str | os.PathLike | None = None
                   ) -> list[str]:
    """The argv that starts a broker for data directory ``base`` (see the module doc)."""
    command = sys.executable if config.brokerCommand == DEFAULT_CONFIG.brokerCommand \
        else config.brokerCommand
    args = [] if config.brokerArgs == DEFAULT_CONFIG.brokerArgs else list(config.brokerArgs)
    flags = ["--data-dir", str(base), "--exit-when-idle", f"{IDLE_EXIT_S:g}",
             "--pid-file", str(base / PID_FILE)]
    if config_path is not None:
        flags += ["--config", os.fspath(config_path)]
    return [command, *args, "-m", "broker", *flags]


def ensure_broker(endpoint: str, base: Path, config: Config, timeout: float,
                  config_path: str | os.PathLike | None = None) -> None:
    """Return once a broker listens at ``endpoint`` (the default one of data directory
    ``base``), starting it unless another client did. Raises ConnectError
    (``broker_start_failed``) when none listens within ``timeout``."""
    deadline = time.monotonic() + timeout
    base = ensure_data_dir(base)
    log = base / LOG_FILE
    command = broker_command(config, base, config_path)
    with _spawn_lock(base / LOCK_FILE, deadline, log):
        if reach.nobody_listens(endpoint, 0.0) is None:
            return                # started by a client that held the lock first
        proc = _spawn(command, base, log)
        while reach.nobody_listens(endpoint, 0.0) is not None:
            if proc.poll() is not None:
                # Refused: maybe a broker nobody started through this lock took the
                # endpoint meanwhile (it says so in the log); it may still be binding.
                if reach.nobody_listens(endpoint) is None:
                    return
                raise _failed(f"{command[0]} exited with status {proc.returncode}: "
                              f"{_last_line(log)}", log)
            if time.monotonic() >= deadline:
                raise _failed(f"it did not listen at {endpoint} within {timeout:g} s", log)
            time.sleep(_POLL_S)   # a poll for the socket to appear, not a settle


@contextlib.contextmanager
def _spawn_lock(path: Path, deadline: float, log: Path) -> Iterator[None]:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise _failed(f"another client has held {path} too long", log) from None
                time.sleep(_POLL_S)   # another client is starting the broker
        yield
    finally:
        os.close(fd)              # releases the lock


def _spawn(command: list[str], base: Path, log: Path) -> subprocess.Popen:
    log_fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=log_fd, cwd=base, start_new_session=True)
    except OSError as exc:
        raise _failed(f"cannot run {command[0]}: {exc.strerror or exc}", log) from None
    finally:
        os.close(log_fd)
    # Reaped when it exits, so it never lingers as a zombie of this process.
    threading.Thread(target=proc.wait, name="intercom-broker-reaper", daemon=True).start()
    return proc


def _last_line(log: Path) -> str:
    try:
        with open(log, "rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - 4096))
            lines = [line for line in f.read().decode(errors="replace").splitlines() if line.strip()]
    except OSError:
        return "no log"
    return lines[-1].strip() if lines else "nothing logged"


def _failed(detail: str, log: Path) -> ConnectError:
    return ConnectError("broker_start_failed",
                        error_text("broker_start_failed", detail=detail, log=log))
