"""A control connection for the command line's looks (``stats``, ``top``), and what a
failed look exits with.

The connection is the one every command opens (:meth:`client.cli.context.Cli.connect`),
so a look that cannot be made ends as theirs do: one line ``code: text`` on stderr
(``no_broker: ...``, ``unknown_host: ...``) and their exit codes: 0 the look answered,
1 the broker refused it, 2 the command line was wrong (bad CURVE keys, an endpoint
that cannot work), 3 no broker answered.
"""

from __future__ import annotations

import argparse

from .cli.context import INTERRUPTED, NO_BROKER, OK, REFUSED, USAGE, Cli, exit_code
from .session import Session

__all__ = ["INTERRUPTED", "NO_BROKER", "OK", "REFUSED", "USAGE", "exit_code", "open_look",
           "refusal_line"]


def open_look(args: argparse.Namespace, name: str) -> Session:
    """A control connection named ``name`` to ``args.endpoint`` (the CLI's shared
    flags); no broker is started for it. Raises :class:`~client.cli.context.Exit`."""
    return Cli(args).connect(name=name)


def refusal_line(answer: dict) -> str:
    """The one line a refused look prints, as every command prints a refusal."""
    return f"{answer.get('code', 'error')}: {answer.get('error', '')}"
