"""Session history: what a runtime records so a reopened session knows who it was.

Entries are JSON-ready dicts with a ``type``, as the intercom specification names
them:

* ``intercom_session_identity``: the session got an id (at connect, and again if a
  broker restart gave it another). It holds ``sessionId``, ``reclaimSecret`` (the
  secret that takes the id back: keep it as private as the runtime's own history),
  ``name``, ``atomicSessionId``, ``brokerId`` and ``at``. Pass it back as
  ``Client.connect(identity=entry)`` to reopen the session under the same id.
* ``intercom_sent``: a send, ask or reply this session made, with its answer.
* ``intercom_received``: a message this session took with ``receive()``, and the
  reply an ask of this session got (``replyTo``: the ask's message id).
* ``respond``: an output this session posted with ``respond()``: ``content`` is the
  text actually sent (a draft's exact text when sent by reference, with its id in
  ``draft``), ``channel``, ``attachments``, ``final`` and the broker's ``result``.

Entries go to a callable (``history=``), to a JSON-lines file (``history_file=``,
appended, mode 0600), or both. A sink that raises loses that entry, never the call.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Callable
from urllib.parse import quote

from schemas.paths import data_dir

IDENTITY, SENT, RECEIVED = "intercom_session_identity", "intercom_sent", "intercom_received"
RESPONDED = "respond"
_log = logging.getLogger("intercom.client")


class History:
    def __init__(self, sink: Callable[[dict], None] | None = None,
                 path: str | os.PathLike | None = None) -> None:
        self._sink = sink
        self._path = Path(path).expanduser() if path is not None else None
        self._lock = threading.Lock()
        # Whether entries go anywhere: callers skip building them when not (hot paths).
        self.enabled = sink is not None or path is not None

    def record(self, kind: str, **fields: Any) -> None:
        if not self.enabled:
            return
        entry = {"type": kind, **fields}
        entry.setdefault("at", time.time())
        if self._sink is not None:
            try:
                self._sink(dict(entry))
            except Exception:     # the runtime's sink must not break the tool call
                _log.exception("history sink failed for a %s entry", kind)
        if self._path is not None:
            line = json.dumps(entry, ensure_ascii=False, default=str) + "\n"
            with self._lock:
                fd = os.open(self._path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
                try:
                    os.write(fd, line.encode())
                finally:
                    os.close(fd)


def named_history_path(name: str, environ: Mapping[str, str] = os.environ) -> Path:
    """Where ``python -m client mcp --name NAME`` keeps its history by default:
    ``<data dir>/mcp/<NAME>.jsonl`` (the name quoted, so any session name is one file
    name and two names never share a file)."""
    return data_dir(environ) / "mcp" / f"{quote(name, safe='')}.jsonl"


def read_identity(path: str | os.PathLike) -> dict | None:
    """The last ``intercom_session_identity`` entry of a JSON-lines history file."""
    found = None
    try:
        with open(Path(path).expanduser(), encoding="utf-8") as lines:
            for line in lines:
                try:
                    entry = json.loads(line)
                except ValueError:
                    continue
                if isinstance(entry, dict) and entry.get("type") == IDENTITY:
                    found = entry
    except FileNotFoundError:
        return None
    return found
