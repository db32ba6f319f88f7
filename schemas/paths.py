"""Where the broker lives by default, shared so a client finds the broker it started.

The data directory is ``$INTERCOM_DATA_DIR`` or ``~/.intercom`` (created with mode
0700: its ipc sockets are the only door to the broker). ``$INTERCOM_ENDPOINT`` and
``$INTERCOM_PUB_ENDPOINT`` override the two sockets for broker and clients alike.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path


def data_dir(environ: Mapping[str, str] = os.environ) -> Path:
    configured = environ.get("INTERCOM_DATA_DIR")
    return Path(configured).expanduser() if configured else Path.home() / ".intercom"


def ensure_data_dir(path: Path) -> Path:
    """Create ``path`` (mode 0700) if needed and tighten it if it is open to others."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    if path.stat().st_mode & 0o077:
        path.chmod(0o700)
    return path


def router_endpoint(environ: Mapping[str, str] = os.environ, base: Path | None = None) -> str:
    return environ.get("INTERCOM_ENDPOINT") or f"ipc://{(base or data_dir(environ)) / 'broker.sock'}"


def pub_endpoint(environ: Mapping[str, str] = os.environ, base: Path | None = None) -> str:
    return environ.get("INTERCOM_PUB_ENDPOINT") or f"ipc://{(base or data_dir(environ)) / 'presence.sock'}"


def database_path(base: Path) -> Path:
    return base / "intercom.db"
