"""``python -m client`` reading the bus: aligned tables by default, the raw answer with
``--json``, shared flags before or after the subcommand, and the operator's views
(``list --all``, ``runs``). Each call is a real child process against a real broker."""

from __future__ import annotations

import os
import pty
import re
import subprocess

import pytest

from .cli_helpers import CLI, run_cli
from .conftest import ROOT, child_env, drain_events, unique

ESCAPE = "\x1b["


def cli(bus, home, *args: str, **kwargs):
    return run_cli(home, "--endpoint", bus.endpoint, "--as-group", bus.group, *args, **kwargs)


def columns(line: str) -> list[str]:
    return re.split(r"\s{2,}", line.strip())


def test_list_prints_a_table_with_the_id_first_then_status_and_working_directory(bus, tmp_path):
    alice = bus.connect("alice", cwd="/srv/work/alpha")
    bob = bus.connect("bob", cwd="/srv/work/beta")
    assert bob.set_status("thinking")["ok"]
    ran = cli(bus, tmp_path, "list")
    assert (ran.code, ran.err) == (0, ""), ran
    header, *rows = ran.lines
    assert columns(header) == ["ID", "STATUS", "CWD", "NAME", "REACH", "GROUPS", "CONNECTED"]
    assert [columns(row)[:6] for row in rows] == [
        [alice.id, "idle", "/srv/work/alpha", "alice", "python", bus.group],
        [bob.id, "thinking", "/srv/work/beta", "bob", "python", bus.group]]
    assert all(re.fullmatch(r"now|\d+s ago", columns(row)[6]) for row in rows), rows
    starts = {header.index(name) for name in ("STATUS", "CWD", "NAME")}
    assert all(row[i - 2:i] == "  " and row[i] != " " for row in rows for i in starts), ran.out
    assert ESCAPE not in ran.out                    # not a terminal: no colour


def test_list_json_prints_the_raw_answer(bus, tmp_path):
    alice = bus.connect("alice")
    ran = cli(bus, tmp_path, "list", "--json")
    assert ran.code == 0, ran
    answer = ran.json()
    assert answer["ok"] is True and answer["self"]["kind"] == "control"
    assert [(s["id"], s["name"]) for s in answer["sessions"]] == [(alice.id, "alice")]


@pytest.mark.parametrize("order", ["before", "after"])
def test_shared_flags_are_taken_before_or_after_the_subcommand(bus, tmp_path, order):
    bus.connect("alice")
    flags = ["--endpoint", bus.endpoint, "--as-group", bus.group, "--json"]
    args = [*flags, "list"] if order == "before" else ["list", *flags]
    ran = run_cli(tmp_path, *args)
    assert ran.code == 0, ran
    assert [s["name"] for s in ran.json()["sessions"]] == ["alice"]


def test_groups_prints_each_group_with_its_size_and_a_mark_on_the_own_one(bus, tmp_path):
    other = unique("o")
    bus.connect("alice")
    bus.connect("bob", group=other)
    bus.connect("carol", group=other)
    rows = {columns(line)[0]: columns(line)[1:] for line in cli(bus, tmp_path, "groups").lines}
    assert rows["GROUP"] == ["SESSIONS", "MEMBER"]
    assert rows[bus.group] == ["1", "*"] and rows[other] == ["2"]


def test_status_prints_aligned_pairs(bus, tmp_path):
    bus.connect("alice")
    ran = cli(bus, tmp_path, "--name", "console", "status")
    assert ran.code == 0, ran
    pairs = dict(columns(line) for line in ran.lines)
    assert pairs["connected"] == "yes" and pairs["name"] == "console"
    assert pairs["groups"] == bus.group and pairs["visible"] == "1 sessions"
    assert pairs["routing"] == "single-node, 0 other brokers live"
    assert len({line.index(value) for line in ran.lines
                for value in [columns(line)[1]]}) == 1     # values start in one column


def test_reading_announces_nothing_to_the_sessions_it_lists(bus, tmp_path):
    watcher = bus.connect("watcher")
    drain_events(watcher)
    for command in ("list", "groups", "status"):
        assert cli(bus, tmp_path, command).code == 0
    assert drain_events(watcher) == []
    assert [s["name"] for s in watcher.intercom(action="list")["sessions"]] == []


def test_version_names_the_package_and_the_protocol(tmp_path):
    ran = run_cli(tmp_path, "--version")
    assert ran.code == 0 and re.fullmatch(r"intercom-bus \S+ \(protocol \d+\)\n", ran.out), ran


# -- the operator's views ---------------------------------------------------------------------

def test_list_all_shows_every_group_to_a_command_on_the_brokers_host(bus, tmp_path):
    elsewhere = unique("e")
    alice = bus.connect("alice")
    zed = bus.connect("zed", group=elsewhere)
    ran = cli(bus, tmp_path, "list", "--all")
    assert ran.code == 0, ran
    header, *rows = ran.lines
    assert columns(header) == ["ID", "STATUS", "CWD", "NAME", "REACH", "HOME", "BROKER",
                               "GROUPS", "CONNECTED"]
    mine = {columns(row)[0]: columns(row) for row in rows}
    assert mine[alice.id][3:7] == ["alice", "python", bus.group, "here"]
    assert mine[zed.id][3:7] == ["zed", "python", elsewhere, "here"]
    listed = cli(bus, tmp_path, "list")
    assert zed.id not in listed.out and alice.id in listed.out    # a member's view, as before


def test_runs_shows_every_run_with_its_stages_and_queued_counts(bus, tmp_path):
    run_id = unique("run")
    host = bus.connect("host", group=unique("h"))
    assert host.register_run(run_id, [{"name": "plan"}, {"name": "build"}])["ok"]
    queued = host.intercom(action="send", to=f"workflow:{run_id}/build", message="use the cache")
    assert queued["ok"] and queued["queued"], queued
    assert host.intercom(action="send", to=f"workflow:{run_id}/**", message="all")["queued"]
    ran = cli(bus, tmp_path, "runs")
    assert ran.code == 0, ran
    block = ran.out.split(f"run {run_id}", 1)[1].split("\n\n", 1)[0].splitlines()
    assert f"host {host.id}" in block[0]
    rows = [columns(line) for line in block[2:]]
    assert [row[:3] for row in rows] == [
        [f"workflow:{run_id}/plan", "PENDING", "1"],
        [f"workflow:{run_id}/build", "PENDING", "2"],
        [f"workflow:{run_id}/**", "future", "1"]]
    raw = cli(bus, tmp_path, "runs", "--json").json()
    (run,) = [r for r in raw["workflows"] if r["runId"] == run_id]
    assert [s["queued"] for s in run["stages"]] == [1, 2]


def test_a_terminal_gets_colour_and_no_color_turns_it_off(bus, tmp_path):
    bus.connect("alice")
    for extra, coloured in (({}, True), ({"NO_COLOR": "1"}, False)):
        leader, follower = pty.openpty()
        try:
            done = subprocess.run([*CLI, "--endpoint", bus.endpoint, "--as-group", bus.group,
                                   "list"], cwd=ROOT, env=child_env(tmp_path, **extra),
                                  stdout=follower, stderr=subprocess.PIPE, timeout=60)
            os.close(follower)
            follower = None
            out = _read_all(leader)
        finally:
            os.close(leader)
            if follower is not None:
                os.close(follower)
        assert done.returncode == 0, done.stderr
        assert ("\x1b[32midle\x1b[0m" in out) is coloured and (ESCAPE in out) is coloured, out
        assert "alice" in out


def _read_all(fd: int) -> str:
    chunks = []
    while True:
        try:
            chunk = os.read(fd, 65536)
        except OSError:          # EIO: the terminal's other side is closed, all was read
            break
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks).decode()


def test_list_of_a_group_nobody_is_in_says_so_and_names_the_group_it_may_mean(bus, tmp_path):
    member = bus.connect("member")
    typo = bus.group[:-1] + "x"                 # its last hex digit mistyped
    ran = cli(bus, tmp_path, "list", "--group", typo)
    assert (ran.code, ran.err) == (0, ""), ran
    # The closest name first (the module's other groups may follow it).
    (line,) = ran.lines
    assert line.startswith(f"no group {typo!r}: no connected session is in it "
                           f"(did you mean {bus.group}"), ran
    nothing = cli(bus, tmp_path, "list", "--group", "zz-nothing-like-it")
    assert nothing.lines == ["no group 'zz-nothing-like-it': no connected session is in it "
                             "(the groups command lists every group)"], nothing
    # The raw answer is left as the broker gave it; the real group lists its member.
    assert cli(bus, tmp_path, "list", "--group", typo, "--json").json()["sessions"] == []
    found = cli(bus, tmp_path, "list", "--group", bus.group)
    assert found.code == 0 and member.id in found.out, found
