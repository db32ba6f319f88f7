"""What a subcommand of ``python -m client`` is: a name, its arguments, and what it runs.

A command module defines :class:`Command` values; the table of every subcommand is
:data:`client.cli.registry.COMMANDS`, in one file. To add a subcommand, write a module
with its ``Command`` (or a tuple of them) and add it to that table: the parser, the
shared flags (``--endpoint``, ``--json``, ...) before or after the subcommand, the
exit codes and the quiet Ctrl-C and closed-pipe handling come with it.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Callable

from .context import Cli


def no_arguments(parser: argparse.ArgumentParser) -> None:
    """For a command that takes only the shared flags."""


@dataclass(frozen=True, slots=True)
class Command:
    name: str
    help: str                                          # one line, in ``--help``
    run: Callable[[Cli], int]                          # returns the exit code (see context)
    add_arguments: Callable[[argparse.ArgumentParser], None] = no_arguments
    description: str | None = None                     # the subcommand's ``--help`` text
    shared_flags: bool = True                          # takes --endpoint, --json, ... too
