"""Driving ``python -m client mcp`` as an MCP host does: the official SDK's stdio client
and ClientSession against the real server process, which talks to a real broker."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any, AsyncIterator

from .conftest import ROOT, child_env

CHANNEL_METHOD = "notifications/claude/channel"


@functools.cache
def sdk() -> SimpleNamespace:
    """The MCP SDK, imported on first use: building its pydantic models costs about a
    second of CPU, which every xdist worker would otherwise pay at collection whether or
    not it runs an MCP test. The SDK is in the ``test`` extra, so a missing one fails."""
    import mcp_types
    from mcp.client.extension import NotificationBinding
    from mcp.client.session import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client
    from pydantic import BaseModel

    class ChannelParams(BaseModel):
        content: str
        meta: dict[str, Any]

    return SimpleNamespace(types=mcp_types, NotificationBinding=NotificationBinding,
                           ClientSession=ClientSession, StdioServerParameters=StdioServerParameters,
                           stdio_client=stdio_client, ChannelParams=ChannelParams)


def server_command(name: str, *extra: str) -> list[str]:
    return [sys.executable, "-m", "client", "mcp", "--name", name, *extra]


def bus_flags(bus, *extra: str) -> tuple[str, ...]:
    """A server's flags for the test's broker and group (``bus`` fixture), then ``extra``."""
    return ("--endpoint", bus.endpoint, "--group", bus.group, *extra)


def server_params(home: Path, name: str, *extra: str, **env: str):
    command = server_command(name, *extra)
    return sdk().StdioServerParameters(command=command[0], args=command[1:], cwd=str(ROOT),
                                 env=child_env(home, INTERCOM_DATA_DIR=str(home / "data"), **env))


@contextlib.asynccontextmanager
async def mcp_client(home: Path, name: str, *extra: str,
                     pushes: asyncio.Queue | None = None) -> AsyncIterator[Any]:
    """An initialized SDK client session with the server ``name`` (flags ``extra``);
    the pushes it gets (ChannelParams) go to ``pushes``."""
    mcp = sdk()

    async def pushed(params) -> None:
        if pushes is not None:
            pushes.put_nowait(params)

    bindings = [mcp.NotificationBinding(method=CHANNEL_METHOD, params_type=mcp.ChannelParams, handler=pushed)]
    with open(home / f"{name}.stderr", "a") as errlog:
        async with mcp.stdio_client(server_params(home, name, *extra), errlog=errlog) as (read, write):
            async with mcp.ClientSession(read, write, notification_bindings=bindings) as session:
                await asyncio.wait_for(session.initialize(), 30)
                yield session


async def call(session, tool: str, timeout: float = 30.0, **arguments: Any
               ) -> tuple[dict, bool]:
    """One tool call: (the result's JSON, isError)."""
    result = await asyncio.wait_for(session.call_tool(tool, arguments), timeout)
    (content,) = result.content
    assert isinstance(content, sdk().types.TextContent)
    return json.loads(content.text), result.is_error


def run(scenario, timeout: float = 60.0) -> Any:
    """Run an async scenario with an overall deadline."""
    return asyncio.run(asyncio.wait_for(scenario, timeout))
