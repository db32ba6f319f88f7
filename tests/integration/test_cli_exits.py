"""How ``python -m client`` ends: exit 3 at once when no broker is there (and none is
started), quietly with 0 when its reader closes the pipe, with 130 at Ctrl-C, never
with a traceback. Real child processes, real pipes, real signals."""

from __future__ import annotations

import os
import select
import signal
import subprocess

import pytest

from .cli_helpers import CLI, Running, run_cli
from .conftest import ROOT, child_env, stop_process

NO_BROKER_ARGS = [["list"], ["groups"], ["status"], ["list", "--all"], ["runs"],
                  ["sessions", "--agent", "kai"], ["send", "bob", "hi"], ["ask", "bob", "hi"],
                  ["tail"], ["stats"]]


@pytest.mark.parametrize("args", NO_BROKER_ARGS, ids=lambda a: " ".join(a))
def test_no_broker_at_the_endpoint_is_exit_3_with_one_line_within_about_a_second(short_tmp, args):
    # The interpreter's start and imports, measured now: the machine may be busy.
    start = run_cli(short_tmp, "--version").seconds
    ran = run_cli(short_tmp, "--endpoint", f"ipc://{short_tmp}/none.sock", *args)
    assert (ran.code, ran.out) == (3, ""), ran
    (line,) = ran.err.splitlines()
    assert line.startswith("no_broker: ") and "python -m broker" in line
    # About a second past the start (a broker still binding gets that long); far
    # less than the connect timeout a listening broker would get.
    assert ran.seconds - start < 1.0 + 1.5, f"took {ran.seconds:.1f} s, starting {start:.1f} s"


def test_a_command_never_starts_a_broker_at_the_default_endpoint(short_tmp):
    ran = run_cli(short_tmp, "send", "bob", "hi")
    assert ran.code == 3 and ran.err.startswith("no_broker: "), ran
    data = short_tmp / ".intercom"
    assert not (data / "broker.sock").exists() and not (data / "broker.pid").exists()


def test_a_wrong_pub_endpoint_is_exit_3_with_a_line_instead_of_a_silent_wait(bus, short_tmp):
    missing = run_cli(short_tmp, "tail", "--pub-endpoint", f"ipc://{short_tmp}/none.sock")
    assert missing.code == 3 and missing.err.startswith("client: nothing publishes at"), missing
    # The broker's ROUTER socket is there, but it is no PUB socket: no handshake.
    router = run_cli(short_tmp, "tail", "--pub-endpoint", bus.endpoint)
    assert router.code == 3 and "nothing publishes at" in router.err, router
    assert len(router.err.splitlines()) == 1 and router.seconds < 10


def test_list_into_a_closed_pipe_ends_quietly_with_0(bus, short_tmp):
    for n in range(3):
        bus.connect(f"s{n}")
    lister = subprocess.Popen([*CLI, "--endpoint", bus.endpoint, "--as-group", bus.group, "list"],
                              cwd=ROOT, env=child_env(short_tmp), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE)
    head = subprocess.run(["head", "-c", "0"], stdin=lister.stdout, timeout=30)   # | head -0
    lister.stdout.close()       # head is gone: only the pipe's reading end was ours
    err = lister.stderr.read().decode()
    lister.stderr.close()
    assert (lister.wait(30), head.returncode, err) == (0, 0, "")


def test_tail_into_a_pipe_closed_by_its_reader_ends_quietly_with_0(bus, short_tmp):
    # Read on this thread (no reader thread may hold the pipe while it is closed).
    tail = subprocess.Popen([*CLI, "--endpoint", bus.endpoint, "tail", "--json"], cwd=ROOT,
                            env=child_env(short_tmp), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    try:
        warm = bus.connect("warm")
        statuses, got = ("thinking", "idle"), b""
        for n in range(150):
            assert warm.set_status(statuses[n % 2])["ok"]
            if select.select([tail.stdout], [], [], 0.1)[0]:
                got = os.read(tail.stdout.fileno(), 65536)
                break
        assert b"presence_update" in got, "tail printed nothing within 15 s"
        tail.stdout.close()           # the reader goes away (what | head does after its lines)
        for n in range(100):          # the next lines find the pipe closed
            assert warm.set_status(statuses[n % 2])["ok"]
            if tail.poll() is not None:
                break
        assert tail.wait(30) == 0
        assert tail.stderr.read() == b""
    finally:
        stop_process(tail, signal.SIGKILL)
        tail.stderr.close()


def test_ctrl_c_ends_tail_with_130_and_no_traceback(bus, short_tmp):
    tail = Running(short_tmp, "--endpoint", bus.endpoint, "tail")
    try:
        _until_a_line(tail, bus.connect("warm"))
        code, err = tail.interrupt()
        assert (code, err) == (130, "")
    finally:
        tail.close()


def test_ctrl_c_during_an_ask_ends_with_130_and_the_ask_goes_with_it(bus, short_tmp):
    alice = bus.connect("alice")
    ask = Running(short_tmp, "--endpoint", bus.endpoint, "--as-group", bus.group,
                  "ask", "alice", "still there?")
    try:
        assert alice.receive(timeout=20)["message"] == "still there?"
        assert len(alice.intercom(action="pending")["pending"]) == 1
        code, err = ask.interrupt()
        assert (code, err) == (130, "")
        assert alice.intercom(action="pending")["pending"] == []
    finally:
        ask.close()


def _until_a_line(tail: Running, session, timeout: float = 15.0) -> None:
    """PUB/SUB is a slow joiner: change ``session``'s status until the tail prints."""
    statuses = ("thinking", "idle")
    for n in range(int(timeout / 0.1)):
        assert session.set_status(statuses[n % 2])["ok"]
        if tail.reader.next_line(0.1) is not None:
            return
    raise AssertionError(f"tail printed nothing within {timeout:g} s")


def test_a_misspelled_flag_before_the_command_is_what_the_error_names(short_tmp):
    ran = run_cli(short_tmp, "--endpiont", "x", "list")
    assert (ran.code, ran.out) == (2, ""), ran
    last = ran.err.splitlines()[-1]
    assert last == "python -m client: error: unrecognized arguments: --endpiont (before the command)"
    # A flag it does take, even shortened as argparse allows, still works there.
    shortened = run_cli(short_tmp, "--endp", f"ipc://{short_tmp}/none.sock", "list")
    assert shortened.code == 3 and shortened.err.startswith("no_broker: "), shortened


@pytest.mark.parametrize("flag", ["--channel", "--group"])
def test_tail_of_an_empty_channel_or_group_is_refused_at_once(bus, short_tmp, flag):
    # With a broker there: the tail would otherwise wait for a topic nothing is sent under.
    ran = run_cli(short_tmp, "--endpoint", bus.endpoint, "tail", flag, "", timeout=30)
    assert (ran.code, ran.out) == (2, ""), ran
    assert ran.err.splitlines()[-1].endswith(f"argument {flag}: must not be empty"), ran
