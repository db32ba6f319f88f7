"""The local socket between a host's hook command and the ``mcp`` server of its name.

The server (:mod:`client.mcp_hooks`) listens on a unix socket that
:func:`hook_socket_path` names and the hook command asks on it with :func:`ask`: one
JSON line each way. Both find the socket through that one function, from the session
name and the data directory alone (a server's ``--history-file`` does not move it).

Where: beside the server's history file, ``<data dir>/mcp/<NAME>.sock`` (the data
directory is private, mode 0700). A unix socket's path holds at most
:data:`MAX_SOCKET_PATH_BYTES`; a longer one is replaced by a short one named by a
digest of the long one, in a private directory of this user:
``$XDG_RUNTIME_DIR/intercom/`` or ``/tmp/intercom-<uid>/``. Such a directory that
another user owns, or that others may write to, is refused on both sides.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import stat
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .history import named_history_path

# sun_path is 108 bytes on Linux and 104 on macOS, the terminating NUL included.
MAX_SOCKET_PATH_BYTES = 103 if sys.platform == "darwin" else 107
ANSWER_LIMIT_BYTES = 64 << 20      # an answer longer than this is not one


def hook_socket_path(name: str, environ: Mapping[str, str] = os.environ) -> Path:
    """The socket of the ``mcp`` server named ``name`` (see the module docstring)."""
    beside = named_history_path(name, environ).with_suffix(".sock")
    if len(os.fsencode(beside)) <= MAX_SOCKET_PATH_BYTES:
        return beside
    digest = hashlib.sha256(os.fsencode(beside)).hexdigest()[:32]
    candidates = [Path(tempfile.gettempdir()) / f"intercom-{os.getuid()}"]
    if environ.get("XDG_RUNTIME_DIR"):
        candidates.insert(0, Path(environ["XDG_RUNTIME_DIR"]) / "intercom")
    for directory in candidates:
        path = directory / f"{digest}.sock"
        if len(os.fsencode(path)) <= MAX_SOCKET_PATH_BYTES:
            return path
    return Path("/tmp") / f"intercom-{os.getuid()}" / f"{digest[:16]}.sock"


def private_directory(path: Path, create: bool) -> bool:
    """Whether ``path`` is a directory of this user that nobody else may write to
    (created, mode 0700, when ``create`` and missing). Raises OSError only when
    creating fails."""
    if create:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return False
    return (stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid()
            and not info.st_mode & 0o022)


def ask(path: Path, request: dict[str, Any], timeout: float) -> dict[str, Any] | None:
    """Send ``request`` to the server at ``path`` and return its answer; None when no
    server answers there within ``timeout`` seconds, or it answers nonsense. Never
    raises for a missing, refusing, silent or dead server."""
    if not private_directory(path.parent, create=False):
        return None
    deadline = time.monotonic() + timeout
    received = bytearray()
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(timeout)
            sock.connect(str(path))
            sock.sendall(json.dumps(request).encode() + b"\n")
            while not received.endswith(b"\n") and len(received) < ANSWER_LIMIT_BYTES:
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                sock.settimeout(left)
                chunk = sock.recv(1 << 16)
                if not chunk:
                    break
                received += chunk
        answer = json.loads(received)
    except (OSError, ValueError):
        return None
    return answer if answer.__class__ is dict else None
