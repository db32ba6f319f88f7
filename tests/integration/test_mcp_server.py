"""``python -m client mcp`` driven as a host drives it (the SDK's stdio client), against a
real broker, beside ordinary Python sessions."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import stat
import subprocess
import time

import pytest

from client.autostart import PID_FILE

from .conftest import ROOT, child_env, unique
from .mcp_helpers import call, mcp_client, run, server_command

pytestmark = pytest.mark.timeout(120)


def flags(bus, *extra: str) -> tuple[str, ...]:
    return ("--endpoint", bus.endpoint, "--group", bus.group, *extra)


async def collect_inbox(session, want: set[str], seen: list[str], timeout: float = 15.0) -> None:
    """Call a harmless tool until the ``inbox`` fields carried every id in ``want``."""
    deadline = time.monotonic() + timeout
    while not want <= set(seen):
        assert time.monotonic() < deadline, f"inbox carried only {seen} of {want}"
        result, _ = await call(session, "intercom", action="groups")
        seen += [m["id"] for m in result["inbox"]]


def test_tools_are_intercom_and_wait_plus_respond_and_invoke_for_an_agent(bus, home):
    async def names(*extra: str) -> list[str]:
        async with mcp_client(home, unique("m"), *flags(bus, *extra)) as session:
            listed = await session.list_tools()
            schemas = {tool.name: tool.input_schema for tool in listed.tools}
            assert schemas["intercom"]["properties"]["action"]["enum"][0] == "list"
            return sorted(schemas)

    assert run(names()) == ["intercom", "wait"]
    assert run(names("--agent", "coder", "--channel", f"remote:{unique('c')}")) == [
        "intercom", "invoke", "respond", "wait"]


def test_intercom_lists_and_sends_between_the_mcp_session_and_a_python_session(bus, home):
    peer = bus.connect("peer")
    name = unique("m")

    async def scenario():
        async with mcp_client(home, name, *flags(bus)) as session:
            listed, error = await call(session, "intercom", action="list")
            assert not error and [row["name"] for row in listed["sessions"]] == ["peer"]
            sent, error = await call(session, "intercom", action="send", to="peer",
                                     message="hello from mcp")
            assert not error and sent["ok"] and sent["inbox"] == []
            got = await asyncio.to_thread(peer.receive, 10)
            assert got["message"] == "hello from mcp" and got["fromName"] == name
            # The answer is the JSON a Python caller gets, plus the inbox field.
            assert set(sent) - {"inbox"} == set(peer.intercom(action="send", to=name,
                                                              message="x"))

    run(scenario())


def test_a_message_is_handed_over_exactly_once_by_wait_or_by_inbox(bus, home):
    peer = bus.connect("peer")
    name = unique("m")

    async def scenario():
        async with mcp_client(home, name, *flags(bus, "--no-push")) as session:
            first = peer.intercom(action="send", to=name, message="one")["messageId"]
            waited, error = await call(session, "wait", timeout_s=15)
            assert not error and [m["id"] for m in waited["messages"]] == [first]
            message = waited["messages"][0]
            assert message["message"] == "one" and message["fromName"] == "peer"
            assert {"id", "from", "fromName", "message", "attachments", "sentAt",
                    "expectsReply"} <= set(message)
            later = [peer.intercom(action="send", to=name, message=f"m{i}")["messageId"]
                     for i in range(3)]
            seen: list[str] = []
            await collect_inbox(session, set(later), seen)
            assert seen == later                      # in order, none twice
            again, _ = await call(session, "wait", timeout_s=0.3)
            assert again["messages"] == []
            status, _ = await call(session, "intercom", action="status")
            assert status["inbox"] == []

    run(scenario())


async def progress_of(session, tool: str, arguments: dict) -> tuple[list[float], dict]:
    """The progress reports one call with a progress token got, and its result."""
    reports: list[float] = []

    async def progress(done: float, total: float | None, message: str | None) -> None:
        reports.append(done)

    result = await asyncio.wait_for(session.call_tool(tool, arguments,
                                                      progress_callback=progress), 30)
    return reports, json.loads(result.content[0].text)


def test_wait_and_ask_end_at_their_timeouts_and_report_progress_when_asked(bus, home):
    # One server takes the three calls in turn (a server process costs 2-3 s of CPU).
    bus.connect("silent")

    async def scenario():
        async with mcp_client(home, unique("m"), *flags(bus)) as session:
            started = time.monotonic()
            result, error = await call(session, "wait", timeout_s=0.5)
            assert (result, error) == ({"ok": True, "messages": []}, False)
            assert time.monotonic() - started >= 0.5

            reports, result = await progress_of(session, "wait", {"timeout_s": 6})
            assert result == {"ok": True, "messages": []}
            assert reports and all(0 < done <= 6.5 for done in reports)

            reports, result = await progress_of(session, "intercom", {
                "action": "ask", "to": "silent", "message": "?", "timeout": 6})
            assert result["code"] == "ask_timeout"
            assert reports

    run(scenario())


BAD_CALLS = [
    ("intercom", {"action": "shout"}, "invalid_params"),
    ("intercom", {"action": "send", "message": "no target"}, "missing_param"),
    ("intercom", {"action": "send", "to": "peer", "message": 5}, "invalid_params"),
    ("intercom", {"action": "send", "to": "peer", "message": "x" * (2 << 20)}, "message_too_large"),
    ("intercom", {"action": "list", "color": "red"}, "invalid_params"),
    ("wait", {"timeout_s": 301}, "invalid_params"),
    ("wait", {"timeout_s": "soon"}, "invalid_params"),
    ("teleport", {}, "unknown_tool"),
]


def test_bad_input_is_a_tool_error_with_the_bus_code_and_the_server_keeps_serving(bus, home):
    # One server takes every bad call in turn (a server process each cost 2-3 s of CPU):
    # each is refused with its code, and the server answers a good call after each.
    bus.connect("peer")

    async def scenario():
        async with mcp_client(home, unique("m"), *flags(bus)) as session:
            for tool, arguments, code in BAD_CALLS:
                result, error = await call(session, tool, **arguments)
                assert error and not result["ok"] and result["code"] == code, (tool, result)
                assert result["error"] and result["inbox"] == [], (tool, result)
                listed, error = await call(session, "intercom", action="list")
                assert not error and listed["ok"], (tool, arguments, listed)

    run(scenario())


def test_the_server_exits_and_leaves_the_bus_when_the_host_closes_stdin(bus, home):
    watcher = bus.connect("watcher")
    name = unique("m")
    proc = start_raw_server(bus, home, name)
    try:
        answer = proc.initialized
        assert answer["id"] == 1 and "claude/channel" in answer["result"]["capabilities"]["experimental"]
        names = [row["name"] for row in watcher.intercom(action="list")["sessions"]]
        assert name in names
        proc.stdin.close()
        assert proc.wait(15) == 0
        assert proc.stdout.read() == b""           # nothing but JSON-RPC, and no more of it
        names = [row["name"] for row in watcher.intercom(action="list")["sessions"]]
        assert name not in names
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def test_a_restarted_server_with_the_same_name_gets_its_session_id_back(bus, home):
    name = unique("m")

    async def session_id() -> str:
        async with mcp_client(home, name, *flags(bus)) as session:
            status, _ = await call(session, "intercom", action="status")
            return status["sessionId"]

    first = run(session_id())
    history = home / "data" / "mcp" / f"{name}.jsonl"
    assert stat.S_IMODE(os.stat(history).st_mode) == 0o600
    assert run(session_id()) == first


def test_with_no_endpoint_the_server_starts_the_data_directory_broker(home):
    async def scenario():
        async with mcp_client(home, unique("m")) as session:
            status, error = await call(session, "intercom", action="status")
            assert not error and status["connected"]
            return int((home / "data" / PID_FILE).read_text())

    pid = None
    try:
        pid = run(scenario())
        assert b"broker" in open(f"/proc/{pid}/cmdline", "rb").read()
    finally:
        if pid is not None:
            os.kill(pid, signal.SIGKILL)


def test_no_broker_at_an_explicit_endpoint_refuses_to_start_at_once(home):
    started = time.monotonic()
    proc = subprocess.run(server_command("m", "--endpoint", f"ipc://{home}/nobody.sock"),
                          cwd=ROOT, stdin=subprocess.DEVNULL, capture_output=True, timeout=30,
                          env=child_env(home, INTERCOM_DATA_DIR=str(home / "data")))
    assert proc.returncode != 0 and proc.stdout == b""
    lines = proc.stderr.decode().splitlines()
    assert len(lines) == 1 and "no_broker" in lines[0], lines
    assert time.monotonic() - started < 10


def test_a_push_tells_of_each_message_and_is_no_receipt(bus, home):
    peer = bus.connect("peer")
    name = unique("m")

    async def scenario():
        pushes: asyncio.Queue = asyncio.Queue()
        async with mcp_client(home, name, *flags(bus), pushes=pushes) as session:
            sent = peer.intercom(action="send", to=name, message="ping")["messageId"]
            push = await asyncio.wait_for(pushes.get(), 15)
            assert "peer" in push.content and "ping" in push.content
            assert push.meta["message_id"] == sent and push.meta["from_name"] == "peer"
            seen: list[str] = []
            await collect_inbox(session, {sent}, seen)
            assert seen == [sent]

    run(scenario())


def test_a_reply_without_reply_to_answers_the_newest_message_the_model_was_shown(bus, home):
    first_asker, second_asker = bus.connect("first"), bus.connect("second")
    name = unique("m")

    async def scenario():
        pushes: asyncio.Queue = asyncio.Queue()
        async with mcp_client(home, name, *flags(bus), pushes=pushes) as session:
            first = asyncio.create_task(asyncio.to_thread(
                first_asker.intercom, action="ask", to=name, message="first?", timeout=30))
            shown, _ = await call(session, "wait", timeout_s=15)
            assert [m["message"] for m in shown["messages"]] == ["first?"]
            await asyncio.wait_for(pushes.get(), 15)
            second = asyncio.create_task(asyncio.to_thread(
                second_asker.intercom, action="ask", to=name, message="second?", timeout=30))
            # Taken off the bus (its push came), not yet shown to the model.
            push = await asyncio.wait_for(pushes.get(), 15)
            assert "second?" in push.content
            replied, error = await call(session, "intercom", action="reply", message="to first")
            assert not error, replied
            answer = await asyncio.wait_for(first, 15)
            assert answer["ok"] and answer["message"] == "to first"
            ask = replied["inbox"][0]
            await call(session, "intercom", action="reply", replyTo=ask["id"], message="to second")
            assert (await asyncio.wait_for(second, 15))["message"] == "to second"

    run(scenario())


def test_the_server_exits_when_stdin_closes_during_an_ask(bus, home):
    bus.connect("silent")
    proc = subprocess.Popen(server_command(unique("m"), *flags(bus)), cwd=ROOT,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL,
                            env=child_env(home, INTERCOM_DATA_DIR=str(home / "data")))
    try:
        lines = [
            {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": "2025-06-18", "capabilities": {},
                "clientInfo": {"name": "test", "version": "0"}}},
            {"jsonrpc": "2.0", "method": "notifications/initialized"},
            {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
                "name": "intercom", "arguments": {"action": "ask", "to": "silent",
                                                  "message": "?", "timeout": 600}}}]
        proc.stdin.write(b"".join((json.dumps(line) + "\n").encode() for line in lines))
        proc.stdin.flush()
        assert json.loads(proc.stdout.readline())["id"] == 1
        proc.stdin.close()
        assert proc.wait(15) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def start_raw_server(bus, home, name: str, *extra: str, stderr=subprocess.DEVNULL
                     ) -> subprocess.Popen:
    """A server process spoken to in raw JSON-RPC lines, initialized (flags ``extra``
    besides the bus's; ``stderr`` where its stderr goes)."""
    proc = subprocess.Popen(server_command(name, *flags(bus, *extra)), cwd=ROOT,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr,
                            env=child_env(home, INTERCOM_DATA_DIR=str(home / "data")))
    hello = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "test", "version": "0"}}}
    proc.stdin.write((json.dumps(hello) + "\n").encode())
    proc.stdin.flush()
    answer = json.loads(proc.stdout.readline())
    assert answer["id"] == 1, answer
    proc.initialized = answer
    return proc


def test_what_a_killed_server_took_and_never_showed_reaches_the_next_server_of_its_name(
        bus, home):
    peer = bus.connect("peer")
    name = unique("m")
    first = start_raw_server(bus, home, name, "--no-push")
    try:
        ids = [peer.intercom(action="send", to=name, message=f"m{n}")["messageId"]
               for n in range(3)]
        deadline = time.monotonic() + 15
        # Taken off the bus by the server (its client read them), shown to no model.
        while {peer.receipt(i)["state"] for i in ids} != {"read"}:
            assert time.monotonic() < deadline, [peer.receipt(i) for i in ids]
            time.sleep(0.05)
    finally:
        first.kill()             # as Claude Code ends its servers: no stdin close, no bye
        first.wait(10)

    async def scenario():
        # Started at once: the killed process's session is still live at the broker.
        async with mcp_client(home, name, *flags(bus, "--no-push")) as session:
            waited, error = await call(session, "wait", timeout_s=20)
            assert not error and [m["id"] for m in waited["messages"]] == ids
            mine = peer.intercom(action="send", to=name, message="later")["messageId"]
            await collect_inbox(session, {mine}, [])
            sent, _ = await call(session, "intercom", action="send", to="peer", message="hi")
            assert peer.receive(5)["id"] == sent["messageId"]
            deadline = time.monotonic() + 10
            while True:
                status, error = await call(session, "intercom", action="status",
                                           messageId=sent["messageId"])
                if status.get("state") == "seen" or time.monotonic() > deadline:
                    break
                await asyncio.sleep(0.05)
            assert not error and status["state"] == "seen" and status["toName"] == "peer"
            unknown, error = await call(session, "intercom", action="status", messageId=ids[0])
            assert error and unknown["code"] == "unknown_message"

    run(scenario())
    deadline = time.monotonic() + 10
    while {peer.receipt(i)["state"] for i in ids} != {"seen"}:
        assert time.monotonic() < deadline, [peer.receipt(i) for i in ids]
        time.sleep(0.05)


def start_server_with_stderr(bus, home, name: str) -> subprocess.Popen:
    """A server process spoken to in raw JSON-RPC lines, initialized, its stderr a pipe."""
    return start_raw_server(bus, home, name, "--no-push", stderr=subprocess.PIPE)


def ended_stderr(proc: subprocess.Popen) -> list[str]:
    """Close the server's stdin (the host is done): its exit status must be 0; the lines
    it wrote on stderr."""
    proc.stdin.close()
    assert proc.wait(15) == 0
    return proc.stderr.read().decode().splitlines()


def test_a_second_server_of_a_name_that_runs_says_so_in_one_line(bus, home):
    peer = bus.connect("peer")
    name = unique("m")
    first = start_server_with_stderr(bus, home, name)
    second = third = None
    try:
        # It waits out the liveness window once (the first might be a dead process), then
        # runs beside the first on a fresh id, and says so.
        second = start_server_with_stderr(bus, home, name)
        refused = peer.intercom(action="send", to=name, message="which one?")
        assert refused["code"] == "ambiguous_target", refused
        (line,) = ended_stderr(second)
        assert f"another MCP server named {name!r} is running" in line, line
        assert "give each server its own --name" in line
        assert ended_stderr(first) == []
        # A server started at once after its predecessor was killed takes the id back
        # after the same wait, and has nothing to say.
        last = start_server_with_stderr(bus, home, name)
        last.kill()
        last.wait(10)
        third = start_server_with_stderr(bus, home, name)
        assert ended_stderr(third) == []
    finally:
        for proc in (first, second, third):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait(10)
