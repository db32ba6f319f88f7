"""A control connection for the command line's looks (``stats``, ``top``), and what a
failed look exits with.

Exit codes: 0 the look answered, 1 the broker refused it, 2 the command line was
wrong (bad CURVE keys), 3 no broker answered.
"""

from __future__ import annotations

import argparse

from schemas.names import CONTROL

from . import keys
from .connecting import Client
from .session import ConnectError, Session

OK, REFUSED, USAGE, NO_BROKER = 0, 1, 2, 3
INTERRUPTED = 130                 # Ctrl-C, as a shell reports SIGINT
UNREACHED = frozenset({"no_broker", "broker_unavailable", "broker_start_failed"})


class LookFailed(Exception):
    """The look could not be made; ``code`` is the exit code, the message says why."""

    def __init__(self, code: int, text: str) -> None:
        super().__init__(text)
        self.code = code


def open_look(args: argparse.Namespace, name: str) -> Session:
    """A control connection to ``args.endpoint`` (the CLI's common options); no broker
    is started for it. Raises LookFailed."""
    try:
        curve = (keys.from_directory(args.curve_dir, args.curve_client)
                 if getattr(args, "curve_dir", None) else keys.resolve())
    except ValueError as exc:
        raise LookFailed(USAGE, str(exc)) from None
    extra = {} if curve is None else {"curve_server_key": curve.server_key,
                                      "curve_public_key": curve.public_key,
                                      "curve_secret_key": curve.secret_key}
    try:
        return Client.connect(name=name, endpoint=args.endpoint, kind=CONTROL,
                              group=getattr(args, "as_group", None), auto_start=False, **extra)
    except ConnectError as exc:
        raise LookFailed(exit_code(exc.code), str(exc)) from None


def exit_code(code: str | None) -> int:
    """The exit code of a refusal or failure with error ``code``."""
    return NO_BROKER if code in UNREACHED else REFUSED
