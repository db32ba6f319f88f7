"""What ``python -m client hook`` prints for a host, and the pure rules behind it
(client.host_hooks), plus where the hook finds its server (client.hook_socket)."""

from __future__ import annotations

import json
import shlex

import pytest

from client.hook_socket import MAX_SOCKET_PATH_BYTES, hook_socket_path
from client.host_hooks import (EVENTS, HOOK_TIMEOUT_S, MAX_STOP_BLOCKS, StopBlocks,
                               hook_output, install_block, messages_text, parse_payload,
                               request_for)

pytestmark = pytest.mark.timeout(10)


def msg(i: int) -> dict:
    return {"id": f"m{i}", "from": "s-1", "fromName": "alice", "message": f"text {i}",
            "attachments": [], "sentAt": 1.0, "expectsReply": i % 2 == 0}


def carried(text: str) -> dict:
    """The JSON after the one sentence of a hook's text."""
    sentence, _, rest = text.partition("\n")
    assert "intercom tool" in sentence and "reply" in sentence
    return json.loads(rest)


def test_a_stop_with_messages_blocks_with_them_as_the_wait_tool_gives_them():
    messages = [msg(1), msg(2)]
    output = hook_output("Stop", {"ok": True, "block": True, "messages": messages})
    assert set(output) == {"decision", "reason"} and output["decision"] == "block"
    assert carried(output["reason"]) == {"ok": True, "messages": messages}
    assert output["reason"].startswith("Intercom: 2 new messages for you")


def test_a_stop_the_server_lets_through_prints_nothing():
    assert hook_output("Stop", {"ok": True, "block": False, "messages": []}) is None
    assert hook_output("Stop", {"ok": True, "block": False, "messages": [msg(1)]}) is None


@pytest.mark.parametrize("event", ["UserPromptSubmit", "SessionStart"])
def test_a_prompt_or_a_session_start_adds_the_messages_as_context(event):
    output = hook_output(event, {"ok": True, "block": False, "messages": [msg(1)]})
    assert output == {"hookSpecificOutput": {"hookEventName": event,
                                             "additionalContext": messages_text([msg(1)])}}
    assert carried(output["hookSpecificOutput"]["additionalContext"])["messages"] == [msg(1)]
    assert messages_text([msg(1)]).startswith("Intercom: 1 new message for you")


@pytest.mark.parametrize("answer", [None, {}, {"ok": False, "error": "x"},
                                   {"ok": True, "messages": []},
                                   {"ok": True, "messages": "junk"}])
def test_no_server_or_nothing_waiting_prints_nothing_for_any_event(answer):
    for event in EVENTS:
        assert hook_output(event, answer) is None


def test_an_event_not_of_ours_prints_nothing_and_asks_nothing():
    assert hook_output("PreToolUse", {"ok": True, "block": True, "messages": [msg(1)]}) is None
    assert request_for("PreToolUse", {}) is None


@pytest.mark.parametrize("data", [b"", b"garbage", b"[1, 2]", b"\xff\xfe", b"null"])
def test_stdin_that_is_not_a_json_object_counts_as_empty(data):
    assert parse_payload(data) == {}


def test_the_request_passes_stop_hook_active_and_nothing_of_the_prompt():
    payload = {"session_id": "abc", "transcript_path": "/t.jsonl", "cwd": "/w",
               "hook_event_name": "Stop", "stop_hook_active": True, "prompt": "secret"}
    assert request_for("Stop", payload) == {"event": "Stop", "stopHookActive": True}
    assert request_for("UserPromptSubmit", {"prompt": "secret"}) == {
        "event": "UserPromptSubmit", "stopHookActive": None}
    assert request_for("Stop", {"stop_hook_active": "yes"})["stopHookActive"] is None


def test_stops_are_blocked_at_most_max_times_in_a_row_then_let_through():
    stops = StopBlocks()
    assert [stops.may_block(True, True) for _ in range(MAX_STOP_BLOCKS + 1)] == \
        [True] * MAX_STOP_BLOCKS + [False]
    assert stops.may_block(True, True)          # the stop let through started the count again
    assert MAX_STOP_BLOCKS < 8                  # below Claude Code's own cap


def test_a_stop_is_blocked_only_when_messages_wait():
    stops = StopBlocks()
    assert not stops.may_block(False, False)
    assert stops.may_block(True, False)


def test_a_tool_call_a_prompt_or_a_stop_after_no_block_starts_the_count_again():
    stops = StopBlocks()
    for _ in range(MAX_STOP_BLOCKS):
        assert stops.may_block(True, True)
    stops.reset()                               # a tool call or a prompt
    assert stops.may_block(True, True)
    for _ in range(MAX_STOP_BLOCKS - 1):
        stops.may_block(True, True)
    assert stops.may_block(True, False)         # the host says this stop follows no block


def test_the_install_block_runs_every_event_with_the_name_quoted():
    block = install_block("/venv/bin/intercom", "my agent")
    assert list(block) == ["hooks"] and list(block["hooks"]) == list(EVENTS)
    for event, groups in block["hooks"].items():
        (group,) = groups
        (hook,) = group["hooks"]
        assert hook == {"type": "command", "timeout": HOOK_TIMEOUT_S,
                        "command": f"/venv/bin/intercom hook {event} --name 'my agent'"}
        assert shlex.split(hook["command"])[-2:] == ["--name", "my agent"]


def test_the_socket_is_beside_the_history_file_when_its_path_is_short(tmp_path):
    env = {"INTERCOM_DATA_DIR": str(tmp_path)}
    assert hook_socket_path("rev/iewer", env) == tmp_path / "mcp" / "rev%2Fiewer.sock"


def test_a_socket_path_too_long_becomes_a_short_one_both_sides_find(tmp_path):
    env = {"INTERCOM_DATA_DIR": str(tmp_path / ("d" * 120)), "XDG_RUNTIME_DIR": "/run/user/1"}
    path = hook_socket_path("reviewer", env)
    assert path == hook_socket_path("reviewer", dict(env))
    assert len(str(path).encode()) <= MAX_SOCKET_PATH_BYTES
    assert path.parent.as_posix() == "/run/user/1/intercom"
    assert path != hook_socket_path("coder", env)
    other_dir = {**env, "INTERCOM_DATA_DIR": str(tmp_path / ("e" * 120))}
    assert path != hook_socket_path("reviewer", other_dir)


def test_a_long_runtime_dir_falls_back_to_a_private_tmp_dir(tmp_path):
    env = {"INTERCOM_DATA_DIR": str(tmp_path / ("d" * 120)), "XDG_RUNTIME_DIR": "/" + "r" * 100}
    path = hook_socket_path("reviewer", env)
    assert len(str(path).encode()) <= MAX_SOCKET_PATH_BYTES
    assert path.parent.name.startswith("intercom-")


class Capabilities:
    """What a HookDesk tells its session: each update_capabilities call, in order."""

    def __init__(self) -> None:
        self.said: list[dict] = []

    def update_capabilities(self, **changes) -> None:
        self.said.append(changes)


def test_hooks_is_said_on_the_first_hook_and_unsaid_after_an_hour_without_one():
    from client.mcp_hooks import HOOKS_RECENT_S, HookDesk

    now = [0.0]
    session = Capabilities()
    desk = HookDesk(session, held=lambda: 0, hand_over=lambda limit: [], clock=lambda: now[0])
    stop = request_for("Stop", {"stop_hook_active": False})
    assert desk.answer(stop)["block"] is False
    desk.answer(stop)
    assert session.said == [{"hooks": True}]                 # once, not per hook
    now[0] = HOOKS_RECENT_S - 1
    desk.tool_called()
    assert session.said == [{"hooks": True}]
    now[0] = 2 * HOOKS_RECENT_S
    desk.tool_called()
    desk.tool_called()
    assert session.said == [{"hooks": True}, {"hooks": False}]
    desk.answer(stop)
    assert session.said[-1] == {"hooks": True}
