"""Driving ``python -m client mcp`` as an MCP host does: the official SDK's stdio client
and ClientSession against the real server process, which talks to a real broker."""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
from pathlib import Path
from typing import Any, AsyncIterator

import pytest

pytest.importorskip("mcp")

import mcp_types as types  # noqa: E402
from mcp.client.extension import NotificationBinding  # noqa: E402
from mcp.client.session import ClientSession  # noqa: E402
from mcp.client.stdio import StdioServerParameters, stdio_client  # noqa: E402
from pydantic import BaseModel  # noqa: E402

from .conftest import ROOT, child_env  # noqa: E402

CHANNEL_METHOD = "notifications/claude/channel"


class ChannelParams(BaseModel):
    content: str
    meta: dict[str, Any]


def server_command(name: str, *extra: str) -> list[str]:
    return [sys.executable, "-m", "client", "mcp", "--name", name, *extra]


def server_params(home: Path, name: str, *extra: str, **env: str) -> StdioServerParameters:
    command = server_command(name, *extra)
    return StdioServerParameters(command=command[0], args=command[1:], cwd=str(ROOT),
                                 env=child_env(home, INTERCOM_DATA_DIR=str(home / "data"), **env))


@contextlib.asynccontextmanager
async def mcp_client(home: Path, name: str, *extra: str,
                     pushes: asyncio.Queue | None = None) -> AsyncIterator[ClientSession]:
    """An initialized SDK client session with the server ``name`` (flags ``extra``);
    the pushes it gets (ChannelParams) go to ``pushes``."""
    async def pushed(params: ChannelParams) -> None:
        if pushes is not None:
            pushes.put_nowait(params)

    bindings = [NotificationBinding(method=CHANNEL_METHOD, params_type=ChannelParams, handler=pushed)]
    with open(home / f"{name}.stderr", "a") as errlog:
        async with stdio_client(server_params(home, name, *extra), errlog=errlog) as (read, write):
            async with ClientSession(read, write, notification_bindings=bindings) as session:
                await asyncio.wait_for(session.initialize(), 30)
                yield session


async def call(session: ClientSession, tool: str, timeout: float = 30.0, **arguments: Any
               ) -> tuple[dict, bool]:
    """One tool call: (the result's JSON, isError)."""
    result = await asyncio.wait_for(session.call_tool(tool, arguments), timeout)
    (content,) = result.content
    assert isinstance(content, types.TextContent)
    return json.loads(content.text), result.is_error


def run(scenario, timeout: float = 60.0) -> Any:
    """Run an async scenario with an overall deadline."""
    return asyncio.run(asyncio.wait_for(scenario, timeout))
