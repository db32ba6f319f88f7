"""The ``mcp`` server's side of the host hooks: it answers ``python -m client hook``.

The server is the one owner of the hand-over (:mod:`client.mcp_inbox`): a hook takes
its messages through the same ``Bridge._hand_over`` as ``wait`` and every tool
result, on the server's event loop, so a message goes to the model once whichever
route takes it, and is reported seen as it goes. The hook command reaches the server
over a unix socket (:mod:`client.hook_socket`): one JSON line each way, the request
of :func:`client.host_hooks.request_for`, the answer ``{"ok", "event", "block",
"messages"}``.

* ``Stop``: the server blocks the stop only while messages wait, at most
  :data:`~client.host_hooks.MAX_STOP_BLOCKS` times in a row
  (:class:`~client.host_hooks.StopBlocks`; a tool call starts the count again);
  otherwise it takes nothing, and the turn ends.
* ``UserPromptSubmit`` and ``SessionStart``: whatever waits goes, as context. A
  prompt is a person's input: once it is answered, the broker is told
  (``Session.human_input``, which starts the loop guard's counts again).
* Each take is bounded by :data:`~client.host_hooks.HOOK_TEXT_CHARS`.
* The first hook that reaches the server makes the session say ``hooks: true`` in its
  capabilities (``Session.update_capabilities``, fire and forget too); a tool call
  more than :data:`HOOKS_RECENT_S` after the last hook says ``hooks: false`` again.

A message is handed over when the answer is written to the socket: if the hook
process dies between that and printing it, the message is lost to the model although
reported seen (the window is the hook's own run, a few milliseconds).

Two servers of one name: the newest owns the socket (it replaces the file as it
starts); a server removes the file when it stops only if it is still its own. A
killed one leaves a dead file: a hook finds nobody there, as with no file.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path
from typing import Any, Callable

from schemas.paths import ensure_data_dir

from .history import named_history_path
from .hook_socket import hook_socket_path, private_directory
from .host_hooks import EVENTS, HOOK_TEXT_CHARS, HookEvent, StopBlocks
from .session import Session

REQUEST_LIMIT_BYTES = 1 << 16     # a hook's request is one short JSON line
REQUEST_TIMEOUT_S = 2.0           # a connection that says nothing for this long is closed
# ``hooks: true`` means a hook took this session's mail recently: a tool call this long
# after the last hook contact turns it off again (the hooks were removed, or the host
# no longer runs them).
HOOKS_RECENT_S = 3600.0


class HookDesk:
    """Answers the hooks of one server process (event-loop side): ``held`` counts the
    messages not handed over yet, ``hand_over(max_chars)`` is the server's one
    hand-over."""

    def __init__(self, session: Session, held: Callable[[], int],
                 hand_over: Callable[[int | None], list[dict]],
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.session = session
        self.held = held
        self.hand_over = hand_over
        self.stops = StopBlocks()
        self.clock = clock
        self.contacted_at: float | None = None    # the last hook's, while hooks: true

    def tool_called(self) -> None:
        self.stops.reset()
        if self.contacted_at is not None and self.clock() - self.contacted_at > HOOKS_RECENT_S:
            self.contacted_at = None
            self.session.update_capabilities(hooks=False)

    def answer(self, request: Any) -> dict[str, Any]:
        """The answer to one hook's request, taking what it hands over (no await here)."""
        event = _event_of(request)
        if event is None:
            return {"ok": False, "error": "not a hook request"}
        self._contact()
        if event.blocks:
            active = request.get("stopHookActive")
            block = self.stops.may_block(self.held() > 0, active if active.__class__ is bool
                                         else None)
        else:
            self.stops.reset()
            block = False
        messages = self.hand_over(HOOK_TEXT_CHARS) if block or not event.blocks else []
        return {"ok": True, "event": event.name, "block": block, "messages": messages}

    def answered(self, request: Any) -> None:
        """After the answer went out: a prompt is a person's input."""
        event = _event_of(request)
        if event is not None and event.human_input:
            self.session.human_input()           # fire and forget: no wait on the loop

    def _contact(self) -> None:
        if self.contacted_at is None:
            self.session.update_capabilities(hooks=True)
        self.contacted_at = self.clock()


def _event_of(request: Any) -> HookEvent | None:
    name = request.get("event") if request.__class__ is dict else None
    return EVENTS.get(name) if name.__class__ is str else None


class HookListener:
    """The server's socket; :meth:`close` stops it and removes the file if still its own."""

    def __init__(self, server: asyncio.AbstractServer, path: Path, identity: tuple[int, int]):
        self.server = server
        self.path = path
        self._identity = identity

    async def close(self) -> None:
        self.server.close()
        await self.server.wait_closed()
        try:
            info = os.lstat(self.path)
            if (info.st_dev, info.st_ino) == self._identity:
                os.unlink(self.path)
        except FileNotFoundError:
            pass


async def open_hook_listener(name: str, desk: HookDesk) -> HookListener:
    """Listen for the hooks of the server ``name`` at :func:`hook_socket_path`,
    replacing the socket of an older server of that name. Raises OSError when the
    socket cannot be made (its directory not private, a bind that fails)."""
    path = hook_socket_path(name)
    if path.parent == named_history_path(name).parent:
        ensure_data_dir(path.parent)
    if not private_directory(path.parent, create=True):
        raise OSError(f"{path.parent} is not a private directory of this user")

    async def serve_one(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            line = await asyncio.wait_for(reader.readline(), REQUEST_TIMEOUT_S)
            try:
                request = json.loads(line)
            except ValueError:
                request = None
            answer = desk.answer(request)
            writer.write(json.dumps(answer, ensure_ascii=False, default=str).encode() + b"\n")
            await writer.drain()
            desk.answered(request)
        except (OSError, asyncio.TimeoutError, asyncio.LimitOverrunError, ValueError):
            pass
        finally:
            writer.close()

    try:
        path.unlink()                      # the newest server of a name owns its socket
    except FileNotFoundError:
        pass
    server = await asyncio.start_unix_server(serve_one, path=str(path), limit=REQUEST_LIMIT_BYTES)
    os.chmod(path, 0o600)
    info = os.lstat(path)
    return HookListener(server, path, (info.st_dev, info.st_ino))

