"""``python -m client mcp``: one MCP server over stdio is one bus session.

An MCP host (Claude Code, Codex, ...) starts this process and speaks JSON-RPC on its
stdin and stdout (the official SDK's low-level server; stdout carries nothing else,
logs go to stderr). The bus session is opened before serving (a broker that cannot be
reached is refused with one line on stderr and exit status 2) and closed when the
host closes stdin; the process then exits, so no orphan holds the session or takes
its mail.

Delivery (see :mod:`client.mcp_inbox`): a thread takes every inbound message off the
session as it comes; each is handed to the model exactly once, by ``wait`` or in the
``inbox`` field of any other tool's result, or by a host's hook (``python -m client
hook``, answered over a local socket: :mod:`client.mcp_hooks`). The handed-over list
is taken as the very last step of a handler (no await after it), so a cancelled call
hands nothing over. Unless ``--no-push``, each arrival is also pushed as
``notifications/claude/channel`` (declared as the experimental capability
``claude/channel``); a push is not a receipt.

Tool calls that block (``intercom`` and the others run on worker threads; ``wait``
on the event loop) report ``notifications/progress`` every PROGRESS_S when the
request carried a progress token.

Receipts: the session says ``keepUntil: "seen"``, and a message is reported seen
(:meth:`client.session.Session.mark_seen`) only once a tool result carried it. So
what this process took off the bus and never handed over stays in the broker's
keeping when it exits, however it exits (stdin closed, SIGTERM, SIGKILL), and goes to
the next server process of the same name: it takes the id back from the history file
(waiting out the liveness window once if the old process's session still looks alive,
see :func:`connect`), and the broker sends it everything not seen. If none comes
within the broker's reclaim window, the senders are told ``undelivered``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Awaitable, Callable, Literal

import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

from schemas.errors import error_reply
from schemas.limits import LIVENESS_S, WAIT_TIMEOUT_S
from schemas.paths import ensure_data_dir
from schemas.welcome import HOLDER_LIVE
from schemas.tools import INTERCOM_SCHEMA, INVOKE_SCHEMA, RESPOND_SCHEMA, WAIT_SCHEMA, validate

from .connecting import Client
from .history import named_history_path, read_identity
from .mcp_hooks import HookDesk, open_hook_listener
from .mcp_inbox import Handover, push_for
from .session import ConnectError, Session

CHANNEL_CAPABILITY = "claude/channel"
CHANNEL_METHOD = "notifications/claude/channel"
PROGRESS_S = 5.0          # progress at least this often on a long call (hosts ask for <= 10 s)
RECEIVE_POLL_S = 0.25     # the receiving thread looks for the stop flag this often
RECLAIM_MARGIN_S = 0.5    # past the liveness window: the broker's sweep runs in between
_log = logging.getLogger("intercom.mcp")


class ChannelNotification(types.Notification[dict[str, Any], Literal["notifications/claude/channel"]]):
    """A push: ``{"content", "meta"}`` (see :func:`client.mcp_inbox.push_for`)."""

    method: Literal["notifications/claude/channel"] = CHANNEL_METHOD


def history_path(name: str, override: str | None) -> Path:
    """Where the server keeps its history (identity entries with the reclaim secret):
    ``--history-file``, else :func:`~client.history.named_history_path`."""
    if override:
        return Path(override).expanduser()
    path = named_history_path(name)
    ensure_data_dir(path.parent)
    return path


def tool_list(with_agent: bool) -> list[types.Tool]:
    schemas = [INTERCOM_SCHEMA, WAIT_SCHEMA] + ([RESPOND_SCHEMA, INVOKE_SCHEMA] if with_agent else [])
    return [types.Tool(name=s["title"], description=s["description"],
                       input_schema={k: v for k, v in s.items() if k not in ("title", "description")})
            for s in schemas]


class Bridge:
    """The tools, the hand-over and the pushes of one server process (event-loop side)."""

    def __init__(self, session: Session, *, push: bool, with_agent: bool) -> None:
        self.session = session
        self.handover = Handover()
        self.push = push
        self.tools = tool_list(with_agent)
        self._calls: dict[str, Callable[[Any, dict], Awaitable[dict]]] = {
            "intercom": self._intercom, "wait": self._wait}
        if with_agent:
            self._calls.update(respond=self._respond, invoke=self._invoke)
        self._arrival = asyncio.Event()
        self._pushes: asyncio.Queue[dict] = asyncio.Queue()
        self._peer: Any = None               # the host connection, for pushes
        self._peer_known = asyncio.Event()
        self._threads = ThreadPoolExecutor(max_workers=32, thread_name_prefix="mcp-call")
        self._stop = threading.Event()
        self._room = threading.Event()       # clear while the hand-over is full
        self._room.set()
        self.hooks = HookDesk(session, held=self.handover.__len__, hand_over=self._hand_over)

    # -- arrivals (the receiving thread hands each message to the loop) --------------

    def receive_forever(self, loop: asyncio.AbstractEventLoop) -> None:
        while not self._stop.is_set():
            if not self._room.wait(RECEIVE_POLL_S):
                continue
            msg = self.session.receive(RECEIVE_POLL_S)
            if msg is not None:
                loop.call_soon_threadsafe(self._arrived, msg)

    def _arrived(self, msg: dict) -> None:
        if self.handover.arrived(msg):
            if self.handover.full:
                self._room.clear()
            self._arrival.set()
            if self.push:
                self._pushes.put_nowait(push_for(msg))

    async def send_pushes(self) -> None:
        await self._peer_known.wait()
        while True:
            params = await self._pushes.get()
            await self._peer.send_notification(ChannelNotification(params=params))

    def know_peer(self, ctx: Any) -> None:
        # The per-request session proxy whose standalone channel reaches the host.
        if self._peer is None:
            self._peer = ctx.session
            self._peer_known.set()

    # -- the MCP handlers --------------------------------------------------------------

    async def on_initialized(self, ctx: Any, params: Any) -> None:
        self.know_peer(ctx)

    async def list_tools(self, ctx: Any, params: Any) -> types.ListToolsResult:
        self.know_peer(ctx)
        return types.ListToolsResult(tools=self.tools)

    async def call_tool(self, ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        self.know_peer(ctx)
        self.hooks.tool_called()
        call = self._calls.get(params.name)
        if call is None:
            result = error_reply("unknown_tool", tool=params.name,
                                 tools=", ".join(sorted(self._calls)))
        else:
            result = await call(ctx, dict(params.arguments or {}))
        if not (params.name == "wait" and result.get("ok")):
            # Last step, no await after it: what is taken here reaches the model.
            # (wait's own answer hands its messages over in ``messages``.)
            result = {**result, "inbox": self._hand_over()}
        text = json.dumps(result, ensure_ascii=False, default=str)
        return types.CallToolResult(content=[types.TextContent(text=text)],
                                    is_error=not result.get("ok"))

    # -- the tools ---------------------------------------------------------------------

    async def _wait(self, ctx: Any, args: dict) -> dict:
        problem = validate(WAIT_SCHEMA, args)
        if problem:
            return error_reply("invalid_params", detail=problem)
        timeout = float(args.get("timeout_s", WAIT_TIMEOUT_S))
        started = time.monotonic()
        deadline = started + timeout
        while not len(self.handover) and (left := deadline - time.monotonic()) > 0:
            self._arrival.clear()
            try:
                await asyncio.wait_for(self._arrival.wait(), min(left, PROGRESS_S))
            except asyncio.TimeoutError:
                await ctx.session.report_progress(time.monotonic() - started, timeout, "waiting")
        return {"ok": True, "messages": self._hand_over()}

    def _hand_over(self, max_chars: int | None = None) -> list[dict]:
        """THE hand-over (tool results, wait, host hooks: :mod:`client.mcp_hooks`)."""
        taken = self.handover.take(max_chars)
        if not self.handover.full:
            self._room.set()
        if taken:
            # In a tool result from here on: seen, with everything that came before.
            self.session.mark_seen(taken[-1]["id"])
        return taken

    async def _intercom(self, ctx: Any, args: dict) -> dict:
        current = self.handover.current
        if (args.get("action") == "reply" and current is not None
                and not {"replyTo", "to"} & set(args)):
            # The model's current turn is the newest message it was shown, not the
            # newest this process took off the bus (the session's own idea of it).
            args["replyTo"] = current["id"]
        return await self._blocking(ctx, lambda: self.session.intercom(**args))

    async def _respond(self, ctx: Any, args: dict) -> dict:
        problem = validate(RESPOND_SCHEMA, args)
        if problem:
            return error_reply("invalid_params", detail=problem)
        return await self._blocking(ctx, lambda: self.session.respond(**args))

    async def _invoke(self, ctx: Any, args: dict) -> dict:
        problem = validate(INVOKE_SCHEMA, args)
        if problem:
            return error_reply("invalid_params", detail=problem)
        return await self._blocking(ctx, lambda: self.session.invoke(**args))

    async def _blocking(self, ctx: Any, call: Callable[[], dict]) -> dict:
        """Run a blocking session call on a worker thread, reporting progress meanwhile."""
        started = time.monotonic()
        future = asyncio.get_running_loop().run_in_executor(self._threads, call)
        while True:
            done, _ = await asyncio.wait({future}, timeout=PROGRESS_S)
            if done:
                return future.result()
            await ctx.session.report_progress(time.monotonic() - started, None, "waiting for the bus")

    def stop(self) -> None:
        self._stop.set()
        self._threads.shutdown(wait=False, cancel_futures=True)


async def serve(session: Session, *, push: bool, with_agent: bool,
                name: str | None = None) -> None:
    """Serve MCP on stdio until the host closes stdin; with ``name``, answer the host
    hooks of that name too (:mod:`client.mcp_hooks`)."""
    bridge = Bridge(session, push=push, with_agent=with_agent)
    server = Server("intercom", version="0.1.0", on_list_tools=bridge.list_tools,
                    on_call_tool=bridge.call_tool,
                    instructions="You are a session on the Intercom bus. Messages to you "
                                 "arrive in the 'inbox' field of every tool result, "
                                 "from the wait tool, or from the host's hooks when "
                                 "installed; each is shown to you once.")
    server.add_notification_handler("notifications/initialized", types.NotificationParams,
                                    bridge.on_initialized)
    options = server.create_initialization_options(
        experimental_capabilities={CHANNEL_CAPABILITY: {}})
    loop = asyncio.get_running_loop()
    receiver = threading.Thread(target=bridge.receive_forever, args=(loop,), daemon=True,
                                name="mcp-receive")
    receiver.start()
    pusher = asyncio.create_task(bridge.send_pushes())
    listener = None
    try:
        if name is not None:
            try:
                listener = await open_hook_listener(name, bridge.hooks)
            except OSError as exc:
                _log.warning("no host hooks for %r: %s", name, exc)
        async with stdio_server() as (read_stream, write_stream):
            await server.run(read_stream, write_stream, options)
    finally:
        if listener is not None:
            await listener.close()
        pusher.cancel()
        bridge.stop()
        await asyncio.to_thread(receiver.join, 2 * RECEIVE_POLL_S + 1.0)


def capabilities(args: Any) -> dict[str, Any]:
    """What this server's list row says about how its messages reach the model: every
    tool result carries the inbox (``steer``), pushes unless ``--no-push``; ``hooks``
    turns true once a host hook takes its mail."""
    return {"host": "mcp", "push": not args.no_push, "steer": True, "hooks": False}


def guard(args: Any) -> bool | dict[str, float]:
    """The flood and loop guard of this server's session (see schemas.attention): on by
    default, with the defaults or the bounds ``--guard-*`` give; off with ``--no-guard``."""
    if getattr(args, "no_guard", False):
        return False
    bounds = {"perMinute": getattr(args, "guard_per_minute", None),
              "exchanges": getattr(args, "guard_exchanges", None),
              "pauseS": getattr(args, "guard_pause_s", None)}
    return {key: value for key, value in bounds.items() if value is not None} or True


def connect(args: Any) -> Session:
    """The server's session, under the id its history file names when it can have it.

    A host that killed the previous server process (Claude Code does) and started this
    one at once finds that process's session still live at the broker until its
    liveness window passes: the broker then gives a fresh id, and what it kept for the
    old one would never reach this process. So once, when the id was refused because a
    live session holds it, this waits out that window and asks again; a second server of
    the same name that really runs beside this one keeps the fresh id (as before), and
    says so in one warning line on stderr. Raises ConnectError, OSError, ValueError."""
    path = history_path(args.name, args.history_file)
    identity = read_identity(path)

    def open_session() -> Session:
        return Client.connect(name=args.name, endpoint=args.endpoint, group=args.group,
                              agent=args.agent, channel=args.channel, identity=identity,
                              history_file=path, keep_until="seen",
                              capabilities=capabilities(args), inbound=args.inbound,
                              guard=guard(args))

    session = open_session()
    if identity is None or session.welcome.get("reclaimed") is not False or \
            session.welcome.get("reason") != HOLDER_LIVE:
        return session
    wait_s = float(session.welcome.get("livenessS") or LIVENESS_S) + RECLAIM_MARGIN_S
    held = identity.get("sessionId")
    session.close()
    time.sleep(wait_s)      # the broker's liveness window: the old holder's silence ends it
    session = open_session()
    if session.welcome.get("reclaimed") is False and session.welcome.get("reason") == HOLDER_LIVE:
        _log.warning("another MCP server named %r is running (it holds session %s): this "
                     "one is a new session, %s, and a send to the name %r is now refused as "
                     "ambiguous; give each server its own --name", args.name, held,
                     session.id, args.name)
    return session


def main(args: Any) -> int:
    """The ``mcp`` subcommand: returns the exit status."""
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    if args.channel is not None and args.agent is None:
        print("client mcp: --channel needs --agent", file=sys.stderr)
        return 2
    try:
        session = connect(args)
    except ConnectError as exc:
        print(f"client mcp: {exc.code}: {exc}", file=sys.stderr)
        return 2
    except (OSError, ValueError) as exc:
        print(f"client mcp: {exc}", file=sys.stderr)
        return 2
    try:
        asyncio.run(serve(session, push=not args.no_push, with_agent=args.agent is not None,
                          name=args.name))
    except KeyboardInterrupt:
        pass
    finally:
        session.close()
    return 0
