"""``stats`` and ``top``: the broker's own figures, once, watched, or full screen.

The views themselves are :mod:`client.stats_view` and :mod:`client.top`; this module
registers them as commands, so they take the shared flags (``--endpoint``,
``--json``, ``--curve-dir``, ...) before or after their name like every other.
"""

from __future__ import annotations

import argparse

from .. import stats_view, top
from .command import Command
from .context import Cli


def _stats_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--watch", action="store_true", help="ask again every second until Ctrl-C")
    parser.add_argument("--top", type=int, metavar="N",
                        help="rows of each largest-first list (default: the broker's, 10)")


def _top_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rows", type=int, default=top.TOP_ROWS, metavar="N",
                        help=f"rows per table (default {top.TOP_ROWS})")


def _stats(cli: Cli) -> int:
    return stats_view.run(cli.args, cli.out)


def _top(cli: Cli) -> int:
    return top.run(cli.args)


COMMANDS = (
    Command("stats", "what the broker holds and does (sessions, runs, queues, backlogs, "
            "refusals, the store), read on a control connection", _stats, _stats_arguments),
    Command("top", "a live full-screen view of the broker (q quits)", _top, _top_arguments),
)
