"""``python -m client`` acting on the bus: ``send`` and ``ask`` from a control connection
that nobody lists, and ``reply``, ``pending``, ``join`` and ``leave`` for the live
session ``--identity`` names. Each call is a real child process against a real broker."""

from __future__ import annotations

import re
import threading

import pytest

from .cli_helpers import run_cli
from .conftest import drain_events, unique

COMMANDS = ("list", "groups", "status", "sessions", "runs", "send", "ask", "reply", "pending",
            "join", "leave", "end-run", "tail", "mcp", "hook", "inbound", "held", "release",
            "drop")


def cli(bus, home, *args: str, **kwargs):
    return run_cli(home, "--endpoint", bus.endpoint, "--as-group", bus.group, *args, **kwargs)


def columns(line: str) -> list[str]:
    return re.split(r"\s{2,}", line.strip())


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_has_help(tmp_path, command):
    ran = run_cli(tmp_path, command, "--help")
    assert ran.code == 0 and ran.out.startswith(f"usage: python -m client {command}"), ran


# -- send and ask, as the command line itself ---------------------------------------------------

def test_send_delivers_and_the_command_line_is_never_seen(bus, tmp_path):
    alice, watcher = bus.connect("alice"), bus.connect("watcher")
    drain_events(watcher)
    drain_events(alice)
    ran = cli(bus, tmp_path, "--name", "console", "send", "alice", "the build is green")
    assert (ran.code, ran.out, ran.err) == (0, f"delivered to alice ({alice.id[:8]})\n", ""), ran
    msg = alice.receive(timeout=10)
    assert (msg["message"], msg["fromName"]) == ("the build is green", "console")
    assert drain_events(watcher) == [] and drain_events(alice) == []
    assert alice.intercom(action="send", to=msg["from"], message="hi?")["code"] == "target_not_found"
    # Its body says so, instead of telling the model to answer with a send that fails.
    assert msg["replyable"] is False and "cannot be answered" in msg["body"]


def test_send_dash_reads_the_message_from_stdin(bus, tmp_path):
    alice = bus.connect("alice")
    ran = cli(bus, tmp_path, "send", "alice", "-", stdin="two\nlines\n")
    assert ran.code == 0, ran
    assert alice.receive(timeout=10)["message"] == "two\nlines"


def test_send_to_a_pending_stage_from_the_runs_group_is_queued(bus, tmp_path):
    run_id = unique("run")
    host = bus.connect("host")
    assert host.register_run(run_id, [{"name": "build"}])["ok"]
    ran = run_cli(tmp_path, "--endpoint", bus.endpoint, "--as-group", f"workflow:{run_id}",
                  "send", f"workflow:{run_id}/build", "use the cache")
    assert (ran.code, ran.out) == (0, f"queued for workflow:{run_id}/build (position 1)\n"), ran
    (stage,) = host.intercom(action="list")["workflows"][0]["stages"]
    assert stage["queued"] == 1


def test_a_refused_send_is_one_line_with_code_and_text_and_exit_1(bus, tmp_path):
    ran = cli(bus, tmp_path, "send", "nobody-here", "hi")
    assert (ran.code, ran.out) == (1, ""), ran
    assert ran.err.startswith("target_not_found: No session you can see matches 'nobody-here'")
    assert len(ran.err.splitlines()) == 1
    raw = cli(bus, tmp_path, "send", "nobody-here", "hi", "--json")
    assert (raw.code, raw.err, raw.json()["code"]) == (1, "", "target_not_found")


def test_ask_waits_for_the_reply_and_prints_its_text(bus, tmp_path):
    alice = bus.connect("alice")
    asked = []

    def answer() -> None:
        msg = alice.receive(timeout=20)
        asked.append(msg)
        alice.intercom(action="reply", message="yes\nall green")

    responder = threading.Thread(target=answer)
    responder.start()
    ran = cli(bus, tmp_path, "ask", "alice", "ready?", "--timeout", "20")
    responder.join(30)
    assert (ran.code, ran.out, ran.err) == (0, "yes\nall green\n", ""), ran
    assert asked[0]["message"] == "ready?" and asked[0]["expectsReply"] is True


def test_ask_with_timeout_gives_up_with_ask_timeout(bus, tmp_path):
    bus.connect("alice")
    ran = cli(bus, tmp_path, "ask", "alice", "anyone?", "--timeout", "1")
    assert ran.code == 1 and ran.err.startswith("ask_timeout: No reply within 1 s"), ran


# -- reply, pending, join, leave for the session --identity names ------------------------------

def test_pending_and_reply_act_for_the_session_named_by_its_history(bus, tmp_path):
    history = tmp_path / "alice.jsonl"
    alice = bus.connect("alice", history_file=history)
    bob = bus.connect("bob")
    waiting = []
    asker = threading.Thread(target=lambda: waiting.append(
        bob.intercom(action="ask", to="alice", message="can you deploy?", timeout=20)))
    asker.start()
    alice.receive(timeout=10)
    pending = cli(bus, tmp_path, "pending", "--identity", str(history))
    assert pending.code == 0, pending
    header, row = pending.lines
    assert columns(header) == ["MESSAGE ID", "FROM", "ASKED", "KIND", "PREVIEW"]
    ask_id = columns(row)[0]
    assert columns(row)[1] == f"bob ({bob.id[:8]})" and row.endswith("can you deploy?")
    ran = cli(bus, tmp_path, "reply", "--identity", str(history), "--reply-to", ask_id[:8],
              "deploying now")
    asker.join(30)
    assert (ran.code, ran.out) == (0, f"replied to bob ({bob.id[:8]})\n"), ran
    assert waiting[0]["ok"] and waiting[0]["message"] == "deploying now"
    assert waiting[0]["from"] == alice.id
    assert alice.intercom(action="pending")["pending"] == []


def test_join_and_leave_change_the_named_sessions_memberships_and_its_client_follows(bus, tmp_path):
    ops = unique("ops")
    history = tmp_path / "alice.jsonl"
    alice = bus.connect("alice", history_file=history)
    ran = cli(bus, tmp_path, "join", ops, "--identity", str(history))
    assert (ran.code, ran.out) == (0, f"groups: {bus.group}, {ops}\n"), ran
    told = [e for e in drain_events(alice) if e["event"] == "memberships_changed"]
    assert [e["groups"] for e in told] == [[bus.group, ops]]
    assert alice.groups == [bus.group, ops]
    ran = cli(bus, tmp_path, "leave", "--identity", str(history))
    assert (ran.code, ran.out) == (0, f"groups: {bus.group}\n"), ran
    drain_events(alice)
    assert alice.groups == [bus.group]


@pytest.mark.parametrize("command, args", [("pending", []), ("reply", ["hi"]), ("join", ["g"]),
                                           ("leave", []), ("inbound", ["--policy", "hold"]),
                                           ("held", []), ("release", ["m1"]), ("drop", ["--all"])])
def test_acting_for_a_session_without_identity_is_a_usage_error(bus, tmp_path, command, args):
    ran = cli(bus, tmp_path, command, *args)
    assert ran.code == 2 and "--identity" in ran.err and len(ran.err.splitlines()) == 1, ran


def test_an_identity_whose_session_is_gone_is_refused(bus, tmp_path):
    history = tmp_path / "alice.jsonl"
    bus.connect("alice", history_file=history).close()
    ran = cli(bus, tmp_path, "pending", "--identity", str(history))
    assert ran.code == 1 and ran.err.startswith("act_for_refused:"), ran


# -- the operator ends a run whose host left ----------------------------------------------------

def test_end_run_ends_a_run_whose_host_left_and_never_one_with_a_host(bus, tmp_path):
    run_id = unique("r")
    host = bus.connect("host")
    assert host.register_run(run_id, stages=[{"name": "review"}])["ok"]
    assert host.intercom(action="send", to=f"workflow:{run_id}/review", message="later")["queued"]
    refused = cli(bus, tmp_path, "end-run", run_id)
    assert refused.code != 0 and "run_has_host" in refused.err, refused
    host.close()
    ran = cli(bus, tmp_path, "end-run", run_id)
    assert (ran.code, ran.out) == (0, f"ended run {run_id}; 1 queued message(s) reported "
                                      f"undeliverable to their senders\n"), ran
    again = bus.connect("newcomer")
    assert again.register_run(run_id, stages=[])["ok"]
    assert cli(bus, tmp_path, "end-run", unique("nope")).code != 0
