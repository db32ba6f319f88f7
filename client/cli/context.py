"""What every command of the command line shares: its output, its control connection,
and how an answer becomes an exit code.

Exit codes, one place (:class:`Exit` carries them out of a command):

* ``OK`` 0: done;
* ``REFUSED`` 1: the broker (or this side) refused; one line on stderr, ``code: text``
  (with ``--json``, the raw answer on stdout instead);
* ``USAGE`` 2: the command line is wrong (argparse's own code);
* ``NO_BROKER`` 3: no broker answered where the command looked, within about a
  second when nothing listens there (a command never starts a broker);
* ``INTERRUPTED`` 130: Ctrl-C. A closed stdout (``| head``) ends with 0.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any, Callable, TextIO

from schemas.names import CONTROL

from .. import keys
from ..connecting import Client
from ..keys import CurveKeys
from ..session import ConnectError, Session
from .tables import Style, wants_colour

OK, REFUSED, USAGE, NO_BROKER, INTERRUPTED = 0, 1, 2, 3, 130
# Codes that mean nobody (or nobody answering) is there, rather than a refusal.
UNREACHED = frozenset({"no_broker", "broker_unavailable", "unknown_host"})
# A broker that accepts the connection but says nothing for this long is not there.
CONNECT_TIMEOUT_S = 5.0


class Exit(Exception):
    """End the command with ``code``, after ``line`` (if any) on stderr."""

    def __init__(self, code: int, line: str | None = None) -> None:
        super().__init__(line or "")
        self.code = code
        self.line = line


def exit_code(code: str | None) -> int:
    """The exit code of an answer's error ``code``."""
    return NO_BROKER if code in UNREACHED else REFUSED


class Cli:
    """One command's run: its parsed ``args``, where it prints, and its connection."""

    def __init__(self, args: argparse.Namespace, out: TextIO | None = None,
                 err: TextIO | None = None) -> None:
        self.args = args
        self.out = out or sys.stdout
        self.err = err or sys.stderr
        self.json = bool(getattr(args, "json", False))
        self.style = Style(wants_colour(self.out, getattr(args, "no_color", False)))
        self._curve: CurveKeys | None | bool = False      # False: not resolved yet

    # -- output ---------------------------------------------------------------------

    def print(self, *lines: str) -> None:
        for line in lines:
            print(line, file=self.out)

    def now(self) -> float:
        return time.time()

    def finish(self, answer: dict[str, Any], render: Callable[[dict], list[str]]) -> int:
        """Print ``answer`` (raw with ``--json``, else as ``render`` lays it out) and
        return its exit code; a refusal is one line on stderr unless ``--json``."""
        if self.json:
            self.print(json.dumps(answer, indent=2, sort_keys=True, ensure_ascii=False))
        elif answer.get("ok"):
            self.print(*render(answer))
        if answer.get("ok"):
            return OK
        if not self.json:
            print(f"{answer.get('code', 'error')}: {answer.get('error', '')}", file=self.err)
        return exit_code(answer.get("code"))

    # -- the connection ---------------------------------------------------------------

    @property
    def curve(self) -> CurveKeys | None:
        """The CURVE keys to use (``--curve-dir``, with ``--operator-key`` the broker's
        own pair, else ``$INTERCOM_CURVE_*``, else none). Raises Exit(USAGE) for keys
        that cannot be read."""
        if self._curve is False:
            args = self.args
            try:
                self._curve = (keys.from_directory(args.curve_dir, args.curve_client,
                                                   args.operator_key)
                               if args.curve_dir else keys.resolve())
            except ValueError as exc:
                raise Exit(USAGE, f"client: {exc}") from None
        return self._curve

    def connect(self, act_for: dict | None = None, name: str | None = None) -> Session:
        """A control connection to the broker at ``--endpoint`` (or the default), never
        starting one. Raises Exit(NO_BROKER) when none answers, Exit(REFUSED) when it
        refuses the connection, Exit(USAGE) for an endpoint that cannot work."""
        args, curve = self.args, self.curve
        fields = {} if curve is None else {"curve_server_key": curve.server_key,
                                           "curve_public_key": curve.public_key,
                                           "curve_secret_key": curve.secret_key}
        try:
            return Client.connect(name=name or args.name, endpoint=args.endpoint,
                                  group=args.as_group, kind=CONTROL, auto_start=False,
                                  timeout=CONNECT_TIMEOUT_S, act_for=act_for, **fields)
        except ConnectError as exc:
            code = USAGE if exc.code == "invalid_endpoint" else exit_code(exc.code)
            raise Exit(code, f"{exc.code}: {exc}") from None
        except ValueError as exc:        # an endpoint that names no broker at all
            raise Exit(USAGE, f"client: {exc}") from None
