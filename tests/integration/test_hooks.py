"""``python -m client hook``, run as Claude Code and Codex run it (the documented JSON on
stdin, a subprocess), against a real ``python -m client mcp`` server driven by the
MCP SDK's client, on a real broker: each message goes to the model once, by a hook or
by a tool result, and a hook never breaks the host's turn."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time

import pytest

from client.hook_socket import hook_socket_path
from client.host_hooks import MAX_STOP_BLOCKS

from .conftest import ROOT, child_env, unique
from .mcp_helpers import bus_flags, call, mcp_client, run

pytestmark = pytest.mark.timeout(120)

# The input each host documents for each event (Claude Code's hooks reference; Codex's
# codex-rs/hooks/schema/generated/*.command.input.schema.json).
CLAUDE_COMMON = {"session_id": "abc123", "cwd": "/home/user/project",
                 "transcript_path": "/home/user/.claude/projects/project/abc123.jsonl",
                 "permission_mode": "default"}
CLAUDE_STOP = {**CLAUDE_COMMON, "hook_event_name": "Stop", "stop_hook_active": False}
CLAUDE_PROMPT = {**CLAUDE_COMMON, "hook_event_name": "UserPromptSubmit",
                 "prompt": "what is new?"}
CLAUDE_START = {**CLAUDE_COMMON, "hook_event_name": "SessionStart", "source": "startup",
                "model": "claude-sonnet-4-5"}
CODEX_STOP = {"session_id": "0199a213-81c0-7800-8aa1-bbab2a035a53", "turn_id": "turn-1",
              "transcript_path": None, "cwd": "/home/user/project", "hook_event_name": "Stop",
              "model": "gpt-5-codex", "permission_mode": "default", "stop_hook_active": False,
              "last_assistant_message": "Done."}


def flags(bus) -> tuple[str, ...]:
    return bus_flags(bus, "--no-push")


def hook(home, event: str, name: str, stdin: dict | bytes) -> tuple[int, str, str]:
    """Run the hook as a host does: (exit status, stdout, stderr)."""
    data = stdin if isinstance(stdin, bytes) else json.dumps(stdin).encode()
    done = subprocess.run([sys.executable, "-m", "client", "hook", event, "--name", name],
                          input=data, capture_output=True, cwd=ROOT, timeout=30,
                          env=child_env(home, INTERCOM_DATA_DIR=str(home / "data")))
    return done.returncode, done.stdout.decode(), done.stderr.decode()


async def ahook(home, event: str, name: str, stdin: dict | bytes) -> tuple[int, str, str]:
    return await asyncio.to_thread(hook, home, event, name, stdin)


def carried(text: str) -> list[dict]:
    """The messages a hook's text carries (after its one sentence)."""
    return json.loads(text.partition("\n")[2])["messages"]


async def until_output(home, event: str, name: str, stdin: dict, timeout: float = 15.0) -> dict:
    """Run the hook until it prints something (the server holds a message only once its
    receiving thread took it off the session): that output."""
    deadline = time.monotonic() + timeout
    while True:
        status, out, err = await ahook(home, event, name, stdin)
        assert status == 0 and "Traceback" not in err, err
        if out:
            return json.loads(out)
        assert time.monotonic() < deadline, f"{event} never printed anything"


def all_in_state(peer, ids: list[str], state: str, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while {peer.receipt(i)["state"] for i in ids} != {state}:
        assert time.monotonic() < deadline, [peer.receipt(i) for i in ids]
        time.sleep(0.05)           # polling the broker's answer, not a settle


def test_a_stop_blocks_with_the_waiting_messages_once_and_then_lets_the_turn_end(bus, home):
    peer = bus.connect("peer")
    name = unique("m")

    async def scenario():
        async with mcp_client(home, name, *flags(bus)) as session:
            ids = [peer.intercom(action="send", to=name, message=f"m{i}")["messageId"]
                   for i in range(2)]
            handed: list[dict] = []
            while len(handed) < len(ids):
                output = await until_output(home, "Stop", name, CLAUDE_STOP)
                assert output["decision"] == "block", output
                assert "intercom tool" in output["reason"].partition("\n")[0]
                handed += carried(output["reason"])
            assert [m["id"] for m in handed] == ids
            assert [m["message"] for m in handed] == ["m0", "m1"]
            # Handed over by the hook: neither a tool result nor wait carries them again.
            listed, _ = await call(session, "intercom", action="groups")
            assert listed["inbox"] == []
            waited, _ = await call(session, "wait", timeout_s=0.3)
            assert waited["messages"] == []
            # Nothing waits: the stop goes through, nothing printed, exit 0.
            assert (await ahook(home, "Stop", name, CLAUDE_STOP))[:2] == (0, "")
            # Codex's Stop input, and stdin that is not JSON: still exit 0, no traceback.
            assert (await ahook(home, "Stop", name, CODEX_STOP))[:2] == (0, "")
            status, out, err = await ahook(home, "Stop", name, b"\x00not json{")
            assert (status, out) == (0, "") and "Traceback" not in err
        return ids

    ids = run(scenario())
    all_in_state(peer, ids, "seen")      # a hook's hand-over is a receipt's "seen"


def test_a_tool_result_takes_what_waits_and_a_stop_then_has_nothing_to_block_for(bus, home):
    peer = bus.connect("peer")
    name = unique("m")

    async def scenario():
        async with mcp_client(home, name, *flags(bus)) as session:
            sent = peer.intercom(action="send", to=name, message="one")["messageId"]
            waited, _ = await call(session, "wait", timeout_s=15)
            assert [m["id"] for m in waited["messages"]] == [sent]
            assert (await ahook(home, "Stop", name, CLAUDE_STOP))[:2] == (0, "")

    run(scenario())


def test_stops_are_blocked_at_most_five_times_in_a_row(bus, home):
    peer = bus.connect("peer")
    name = unique("m")
    count = MAX_STOP_BLOCKS + 2
    # Each message is longer than one hook may carry: every block hands over one.
    text = "x" * 6000

    async def scenario():
        async with mcp_client(home, name, *flags(bus)) as session:
            ids = [peer.intercom(action="send", to=name, message=f"{i} {text}")["messageId"]
                   for i in range(count)]
            # The server's client has them all before the first stop.
            await asyncio.to_thread(all_in_state, peer, ids, "read")
            first = await until_output(home, "Stop", name, CLAUDE_STOP)
            outputs = [first]
            again = {**CLAUDE_STOP, "stop_hook_active": True}    # as the host says after a block
            for _ in range(MAX_STOP_BLOCKS):
                status, out, _ = await ahook(home, "Stop", name, again)
                outputs.append(json.loads(out) if out else None)
            blocked = [o for o in outputs if o is not None]
            assert len(blocked) == MAX_STOP_BLOCKS and outputs[-1] is None
            handed = [m["id"] for o in blocked for m in carried(o["reason"])]
            assert handed == ids[:MAX_STOP_BLOCKS]
            # What the bound left waits for the next route, and goes once.
            listed, _ = await call(session, "intercom", action="groups")
            assert [m["id"] for m in listed["inbox"]] == ids[MAX_STOP_BLOCKS:]

    run(scenario())


def test_a_prompt_and_a_session_start_add_the_waiting_messages_as_context(bus, home):
    peer = bus.connect("peer")
    name = unique("m")

    async def scenario():
        async with mcp_client(home, name, *flags(bus)) as session:
            for event, payload in (("UserPromptSubmit", CLAUDE_PROMPT),
                                   ("SessionStart", CLAUDE_START)):
                sent = peer.intercom(action="send", to=name, message=event)["messageId"]
                output = await until_output(home, event, name, payload)
                assert list(output) == ["hookSpecificOutput"]
                specific = output["hookSpecificOutput"]
                assert specific["hookEventName"] == event
                assert [m["id"] for m in carried(specific["additionalContext"])] == [sent]
            listed, _ = await call(session, "intercom", action="groups")
            assert listed["inbox"] == []
            assert (await ahook(home, "UserPromptSubmit", name, CLAUDE_PROMPT))[:2] == (0, "")
            assert socket.exists()

    socket = hook_socket_path(name, {"INTERCOM_DATA_DIR": str(home / "data")})
    run(scenario())
    assert not socket.exists()          # the server took its socket away as it stopped


def test_a_hook_takes_its_mail_and_the_session_then_says_hooks(bus, home):
    from client.session import Session

    if not hasattr(Session, "update_capabilities"):
        pytest.skip("Session.update_capabilities has not landed")
    observer = bus.connect("observer")
    name = unique("m")

    def hooks_capability() -> object:
        rows = observer.intercom(action="list")["sessions"]
        row = next((r for r in rows if r["name"] == name), {})
        return (row.get("capabilities") or {}).get("hooks")

    async def scenario():
        async with mcp_client(home, name, *flags(bus)):
            assert (await ahook(home, "Stop", name, CLAUDE_STOP))[:2] == (0, "")
            deadline = time.monotonic() + 15
            while await asyncio.to_thread(hooks_capability) is not True:
                assert time.monotonic() < deadline, "the list row never said hooks: true"
                await asyncio.sleep(0.05)      # polling the broker's answer

    run(scenario())


@pytest.mark.parametrize("event,payload", [("Stop", CLAUDE_STOP),
                                           ("UserPromptSubmit", CLAUDE_PROMPT),
                                           ("SessionStart", CLAUDE_START),
                                           ("Stop", b"garbage"), ("Stop", b"")])
def test_without_a_server_of_that_name_a_hook_prints_nothing_and_exits_0(home, event, payload):
    status, out, err = hook(home, event, unique("nobody"), payload)
    assert (status, out, err) == (0, "", "")


def test_the_install_command_prints_settings_that_run_these_hooks(home):
    for host in ("claude", "codex"):
        done = subprocess.run([sys.executable, "-m", "client", "hook", "install", "--host",
                               host, "--name", "rev iewer"], capture_output=True, text=True,
                              cwd=ROOT, timeout=30, env=child_env(home))
        assert done.returncode == 0, done.stderr
        settings = json.loads(done.stdout)
        assert sorted(settings["hooks"]) == ["SessionStart", "Stop", "UserPromptSubmit"]
        command = settings["hooks"]["Stop"][0]["hooks"][0]["command"]
        assert command.endswith(" hook Stop --name 'rev iewer'")
        assert done.stderr.startswith("# add this to ")
