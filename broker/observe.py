"""What the shell tells about the broker: its own figures, the metrics endpoint, the log.

Once a second (:meth:`Observer.refresh`) the shell measures what only it can (the
database file's size, commit latency, writes waiting for the persistence worker, its
pid and frame counts) and hands it to the engine as a
:class:`~broker.core.kernel.inputs.ShellFigures`, so a ``stats`` answer holds the
store's side too; with ``--metrics-port`` it also hands the metrics endpoint a fresh
snapshot (see :mod:`broker.metrics`). After each round it logs what the core noted
(:meth:`Observer.log_notes`): sessions opening and leaving, refusals, brokers gone or
linked, adoptions, one line each at info level; at debug level also one line per
request (:meth:`Observer.log_requests`).
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Any

from broker.core.kernel.inputs import ShellFigures

from .startup import StartupError

REFRESH_S = 1.0


def store_file_bytes(db_path: Path) -> int | None:
    """The database file and its WAL, in bytes; None when there is no such file (a
    store that is not a file)."""
    total, found = 0, False
    for suffix in ("", "-wal"):
        try:
            total += os.stat(f"{db_path}{suffix}").st_size
            found = True
        except OSError:
            continue
    return total if found else None


class Observer:
    """The shell's figures, its metrics endpoint (if any) and its log of the core's notes."""

    def __init__(self, log, db_path: Path, metrics_port: int | None = None) -> None:
        """Raises StartupError when the metrics endpoint cannot serve (the port is
        taken, or the ``metrics`` extra is not installed)."""
        self.log = log
        self.db_path = db_path
        self.started_at = time.time()
        self.due = 0.0
        self.debug = log.is_enabled_for(logging.DEBUG)
        self.exporter = None
        if metrics_port is not None:
            self.exporter = _exporter(metrics_port)
            log.info("metrics_serving", url=f"http://127.0.0.1:{self.exporter.port}/metrics")

    def refresh(self, engine, worker, now: float, frames_in: int, frames_out: int) -> None:
        """Hand the engine (and the metrics endpoint) the figures as of now; ``worker``
        is the persistence worker (broker.persistence)."""
        self.due = now + REFRESH_S
        commits = worker.commit_times.snapshot()
        engine.handle(ShellFigures(
            pid=os.getpid(), started_at=self.started_at, frames_in=frames_in,
            frames_out=frames_out, store_file_bytes=store_file_bytes(self.db_path),
            commit_p50_s=commits.p50_s, commit_p99_s=commits.p99_s, commits=worker.commits,
            pending_records=worker.pending))
        if self.exporter is not None:
            from .metrics import Snapshot
            self.exporter.publish(Snapshot(engine.figures(now, top=1), commits))

    def log_notes(self, notes: list[tuple[str, dict[str, Any]]]) -> None:
        info = self.log.info
        for event, fields in notes:
            info(event, **fields)

    def log_requests(self, identity: bytes, envs: list) -> None:
        """One debug line per request of a frame (only called when ``debug``)."""
        for env in envs:
            if env.__class__ is dict:
                self.log.debug("request", kind=env.get("k"), id=env.get("id"),
                               action=env.get("action") or env.get("op"),
                               connection=identity.hex())

    def close(self) -> None:
        if self.exporter is not None:
            self.exporter.close()


def _exporter(port: int):
    """The metrics endpoint on 127.0.0.1:``port``. Raises StartupError."""
    try:
        from .metrics import Exporter   # the optional 'metrics' extra
    except ImportError:
        raise StartupError("--metrics-port needs prometheus_client: pip install "
                           "'intercom-bus[metrics]'") from None
    try:
        return Exporter(port)
    except OSError as exc:
        raise StartupError(f"cannot serve metrics on 127.0.0.1:{port}: "
                           f"{exc.strerror or exc}") from None
