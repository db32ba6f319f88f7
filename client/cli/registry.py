"""Every subcommand of ``python -m client``, in one table.

This is the registration point: a new subcommand is a :class:`~client.cli.command.Command`
in its own module, added to :data:`COMMANDS` here (``mcp`` is the one the parser
builds itself, see :mod:`client.cli.main`, as it keeps its own flags).
"""

from __future__ import annotations

from . import acts, gate, hook, reads, tail, watching
from .command import Command

COMMANDS: tuple[Command, ...] = (
    *reads.COMMANDS,
    *acts.COMMANDS,
    *gate.COMMANDS,
    tail.COMMAND,
    *watching.COMMANDS,
    hook.COMMAND,
)
