"""How the command line lays text out (client.cli.tables): times as "3m ago", aligned
columns whatever the colour, colour only when asked."""

from __future__ import annotations

import io
import re

import pytest

from client.cli.tables import Style, ago, cell, pairs, table, wants_colour

NOW = 1_800_000_000.0


@pytest.mark.parametrize("seconds, text", [
    (0.2, "now"), (-5, "now"), (1, "1s ago"), (59.9, "59s ago"), (60, "1m ago"),
    (3 * 60 + 59, "3m ago"), (2 * 3600 + 1, "2h ago"), (3 * 86400, "3d ago"),
])
def test_a_time_reads_as_its_distance_back_in_its_largest_unit(seconds, text):
    assert ago(NOW - seconds, NOW) == text


@pytest.mark.parametrize("then", [None, "yesterday", True, float("nan")])
def test_an_unknown_time_is_a_dash(then):
    assert ago(then, NOW) == "-"


def test_cells_are_one_line_with_lists_joined_and_absent_values_dashed():
    assert [cell(v) for v in (None, [], ["a", "b"], True, False, "two\nlines", 3)] == \
        ["-", "-", "a,b", "yes", "", "two lines", "3"]


def test_columns_align_on_the_plain_text_and_the_last_one_is_not_padded():
    rows = [["a0000001", "idle", "/w"], ["b2", "thinking", "/work/long/path"]]
    plain = table(["ID", "STATUS", "CWD"], rows)
    assert plain == ["ID        STATUS    CWD",
                     "a0000001  idle      /w",
                     "b2        thinking  /work/long/path"]
    painted = table(["ID", "STATUS", "CWD"], rows, Style(True),
                    lambda column, text: ("green",) if column == 1 else ())
    assert [strip(line) for line in painted] == plain
    assert "\x1b[32midle\x1b[0m" in painted[1] and "\x1b[1mID\x1b[0m" in painted[0]


def test_pairs_align_their_values():
    assert pairs([("name", "cli"), ("home group", "team")]) == ["name        cli",
                                                                "home group  team"]


def test_colour_only_for_a_terminal_and_never_with_no_color(monkeypatch):
    class Terminal(io.StringIO):
        def isatty(self):
            return True

    monkeypatch.delenv("NO_COLOR", raising=False)
    assert wants_colour(Terminal()) and not wants_colour(io.StringIO())
    assert not wants_colour(Terminal(), refused=True)
    monkeypatch.setenv("NO_COLOR", "1")
    assert not wants_colour(Terminal())
    assert Style(False)("x", "red") == "x"


def strip(line: str) -> str:
    return re.sub(r"\x1b\[[0-9;]*m", "", line)
