"""The commands that act: ``send``, ``ask``, ``reply``, ``pending``, ``join``, ``leave``.

Every one runs on a control connection, so the command line never shows up in
anyone's list and announces nothing:

* ``send`` and ``ask`` come from the connection itself (its name is ``--name``, its
  group ``--as-group``): an ask waits here for its reply and prints it. A plain send
  from here cannot be answered once the command has ended: use ``ask`` to wait.
* ``reply``, ``pending``, ``join`` and ``leave`` are about one session's own asks and
  memberships, and a one-shot command has none: they act for the live session that
  ``--identity`` names (its history file, or the name of a ``python -m client mcp``
  server, whose history is ``<data dir>/mcp/NAME.jsonl``), proved by the reclaim
  secret in that history. The session stays connected where it is; ``join`` and
  ``leave`` change its memberships and its client is told.

A message given as ``-`` is read from stdin (one trailing newline dropped).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from ..history import named_history_path, read_identity
from .command import Command
from .context import USAGE, Cli, Exit
from .views import answer_text, memberships, pending_view, replied, sent

_IDENTITY_HELP = ("the live session to act for: its history file (JSON lines with an "
                  "intercom_session_identity entry), or the --name of a 'python -m client "
                  "mcp' server")


def message_text(given: str) -> str:
    """The message as given, or stdin's whole text for ``-``."""
    if given != "-":
        return given
    text = sys.stdin.read()
    return text[:-1] if text.endswith("\n") else text


def identity(spec: str | None, action: str) -> dict:
    """The identity entry ``--identity`` names. Raises Exit(USAGE) without one."""
    if not spec:
        raise Exit(USAGE, f"client: {action} acts for a session: give --identity (its history "
                   "file, or the name of a 'python -m client mcp' server)")
    path = Path(spec).expanduser()
    if not path.is_file() and os.sep not in spec:
        path = named_history_path(spec)
    entry = read_identity(path) if path.is_file() else None
    if not entry or not entry.get("sessionId") or not entry.get("reclaimSecret"):
        raise Exit(USAGE, f"client: no intercom_session_identity entry in {path}")
    return entry


def _to_and_message(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("to", help="session id, name, 8-hex id prefix, or workflow path")
    parser.add_argument("message", help="the text, or - to read it from stdin")


def _ask_arguments(parser: argparse.ArgumentParser) -> None:
    _to_and_message(parser)
    parser.add_argument("--timeout", type=float, metavar="S",
                        help="seconds to wait for the reply (default: the config's askTimeout)")


def _acting(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--identity", metavar="FILE|NAME", help=_IDENTITY_HELP)


def _reply_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("message", help="the text, or - to read it from stdin")
    parser.add_argument("--reply-to", metavar="ID", help="the ask's message id (or its 8-hex "
                        "prefix); needed when several asks wait")
    parser.add_argument("--to", help="the asker, when it has a single ask waiting")
    _acting(parser)


def _join_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("group")
    _acting(parser)


def _leave_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("group", nargs="?", help="the membership to drop (none: back to the "
                        "home group alone)")
    _acting(parser)


def _run_id(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_id", metavar="RUN", help="the run's id (python -m client runs)")


def run_end_run(cli: Cli) -> int:
    with cli.connect() as session:
        answer = session.end_abandoned_run(cli.args.run_id)
    return cli.finish(answer, lambda a: [
        f"ended run {a.get('runId')}; {a.get('undeliverable', 0)} queued message(s) "
        f"reported undeliverable to their senders"])


def run_send(cli: Cli) -> int:
    message = message_text(cli.args.message)
    with cli.connect() as session:
        answer = session.intercom(action="send", to=cli.args.to, message=message)
    return cli.finish(answer, sent)


def run_ask(cli: Cli) -> int:
    message = message_text(cli.args.message)
    params = {"action": "ask", "to": cli.args.to, "message": message}
    if cli.args.timeout is not None:
        params["timeout"] = cli.args.timeout
    with cli.connect() as session:
        answer = session.intercom(**params)
    return cli.finish(answer, answer_text)


def run_reply(cli: Cli) -> int:
    entry = identity(cli.args.identity, "reply")
    params = {"action": "reply", "message": message_text(cli.args.message)}
    for key, value in (("replyTo", cli.args.reply_to), ("to", cli.args.to)):
        if value is not None:
            params[key] = value
    with cli.connect(act_for=entry) as session:
        answer = session.intercom(**params)
    return cli.finish(answer, replied)


def run_pending(cli: Cli) -> int:
    entry = identity(cli.args.identity, "pending")
    with cli.connect(act_for=entry) as session:
        answer = session.intercom(action="pending")
    return cli.finish(answer, lambda a: pending_view(a, cli.style))


def run_join(cli: Cli) -> int:
    entry = identity(cli.args.identity, "join")
    with cli.connect(act_for=entry) as session:
        answer = session.intercom(action="join", group=cli.args.group)
    return cli.finish(answer, memberships)


def run_leave(cli: Cli) -> int:
    entry = identity(cli.args.identity, "leave")
    params = {"action": "leave"} if cli.args.group is None else \
        {"action": "leave", "group": cli.args.group}
    with cli.connect(act_for=entry) as session:
        answer = session.intercom(**params)
    return cli.finish(answer, memberships)


COMMANDS = (
    Command("send", "send a message (fire and forget)", run_send, _to_and_message),
    Command("ask", "ask and wait for the reply; prints the reply's text", run_ask,
            _ask_arguments),
    Command("reply", "answer an ask made to the session --identity names", run_reply,
            _reply_arguments),
    Command("pending", "the asks waiting for the session --identity names", run_pending, _acting),
    Command("join", "add a membership to the session --identity names", run_join,
            _join_arguments),
    Command("leave", "drop a membership of the session --identity names", run_leave,
            _leave_arguments),
    Command("end-run", "end a workflow run whose host left and will not come back (for the "
            "broker's operator)", run_end_run, _run_id),
)
