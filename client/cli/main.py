"""``python -m client``: the command line for people and scripts.

Subcommands come from one table (:data:`client.cli.registry.COMMANDS`); ``mcp`` (one
MCP stdio server per bus session, :mod:`client.mcp_server`) is built here, with its
own flags, as it always was. The shared flags (:func:`add_shared_flags`) are
accepted before or after the subcommand: the top-level parser holds their defaults
and each subcommand's copy is ``SUPPRESS``ed, so it only overrides what was given.

Every command runs on a control connection (see :mod:`client.cli.context` for the
connection and the exit codes) and never starts a broker. Ctrl-C ends with 130 and
a closed stdout (``| head``) with 0, both without a traceback.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys

from schemas.attention import GUARD_EXCHANGES, GUARD_PAUSE_S, GUARD_PER_MINUTE, INBOUND_POLICIES
from schemas.limits import PROTOCOL_VERSION

from .context import INTERRUPTED, OK, USAGE, Cli, Exit
from .registry import COMMANDS

PACKAGE = "intercom-bus"


def version() -> str:
    from importlib import metadata      # here: its import costs every other command ~60 ms

    try:
        number = metadata.version(PACKAGE)
    except metadata.PackageNotFoundError:
        number = "unknown"
    return f"{PACKAGE} {number} (protocol {PROTOCOL_VERSION})"


def add_shared_flags(parser: argparse.ArgumentParser, suppress: bool) -> None:
    """The flags every command takes, with their defaults (``suppress``: none, for a
    subcommand's copy)."""
    def default(value):
        return argparse.SUPPRESS if suppress else value

    if suppress:
        parser = parser.add_argument_group("shared options (also before the command)")
    parser.add_argument("--endpoint", default=default(None),
                        help="broker ROUTER endpoint (default $INTERCOM_ENDPOINT, else the "
                        "data directory's); no broker is ever started for a command")
    parser.add_argument("--name", default=default("cli"),
                        help="the connection's name, shown to those who get its messages")
    parser.add_argument("--as-group", default=default(None),
                        help="the connection's home group (what it sees and sends to)")
    parser.add_argument("--curve-dir", default=default(None),
                        help="CURVE keys made by 'python -m broker keys' (default: "
                        "$INTERCOM_CURVE_* keys, else no CURVE)")
    parser.add_argument("--curve-client", default=default("client"),
                        help="which client key pair under CURVE_DIR/clients (default: client)")
    parser.add_argument("--operator-key", action="store_true", default=default(False),
                        help="with --curve-dir: connect with the broker's own key pair, as "
                        "its operator (list --all, runs from another host)")
    parser.add_argument("--json", action="store_true", default=default(False),
                        help="print the broker's raw answer as JSON")
    parser.add_argument("--no-color", action="store_true", default=default(False),
                        help="no colour even on a terminal (also: $NO_COLOR)")


def build_parser() -> argparse.ArgumentParser:
    # As it was started: the ``intercom`` console script, or ``python -m client``.
    prog = "intercom" if os.path.basename(sys.argv[0]) == "intercom" else "python -m client"
    parser = argparse.ArgumentParser(prog=prog, description="Intercom bus client.")
    parser.add_argument("--version", action="version", version=version())
    add_shared_flags(parser, suppress=False)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in COMMANDS:
        p = sub.add_parser(command.name, help=command.help,
                           description=command.description or command.help)
        command.add_arguments(p)
        if command.shared_flags:
            add_shared_flags(p, suppress=True)
    _add_mcp(sub)
    return parser


def _add_mcp(sub) -> None:
    p_mcp = sub.add_parser("mcp", help="serve MCP over stdio: this process is one bus session")
    p_mcp.add_argument("--name", required=True, help="the session's name")
    p_mcp.add_argument("--endpoint", default=argparse.SUPPRESS, help="broker ROUTER endpoint "
                       "(default: $INTERCOM_ENDPOINT, else the data directory's, started if none runs)")
    p_mcp.add_argument("--group", help="home group")
    p_mcp.add_argument("--agent", help="be a conversation of this agent (respond, invoke)")
    p_mcp.add_argument("--channel", help="with --agent: the conversation's channel id")
    p_mcp.add_argument("--history-file", help="history JSON lines (default <data dir>/mcp/NAME.jsonl)")
    p_mcp.add_argument("--no-push", action="store_true",
                       help="send no notifications/claude/channel pushes")
    p_mcp.add_argument("--inbound", choices=INBOUND_POLICIES, default=None,
                       help="the session's inbound gate at start: accept (default), hold "
                       "(messages wait for 'python -m client release') or refuse")
    guard = p_mcp.add_argument_group(
        "flood and loop guard", "on by default: bounds on the session's sends to any one "
        "other session (refused flood_guard or loop_guard, with retryAfterS)")
    guard.add_argument("--guard-per-minute", type=int, metavar="N",
                       help=f"messages to one session in any minute (default {GUARD_PER_MINUTE}; "
                       "0: no bound)")
    guard.add_argument("--guard-exchanges", type=int, metavar="N",
                       help="back-and-forth turns with one session with no person's prompt "
                       f"or pause between (default {GUARD_EXCHANGES}; 0: no bound)")
    guard.add_argument("--guard-pause-s", type=float, metavar="S",
                       help=f"this long with no message between two sessions starts their "
                       f"turns again (default {GUARD_PAUSE_S:g}; 0: only a prompt does)")
    guard.add_argument("--no-guard", action="store_true", help="no flood and loop guard")


def unknown_flag_before_command(parser: argparse.ArgumentParser, argv: list[str]) -> str | None:
    """The first option before the command that ``parser`` (the top level) does not
    take, or None. argparse would skip it and blame the next word as the command
    (``--endpiont x list``: "invalid choice: 'x'"); this names the flag instead."""
    takes = parser._option_string_actions          # every spelling -> its action
    at = 0
    while at < len(argv) and argv[at].startswith("-") and argv[at] != "--":
        flag, has_value, _ = argv[at].partition("=")
        if flag in takes:
            action = takes[flag]
        else:                          # argparse takes a unique prefix of a long flag
            prefixed = [known for known in takes
                        if flag.startswith("--") and known.startswith(flag)]
            if not prefixed:
                return flag
            if len(prefixed) > 1:
                return None            # ambiguous: argparse says so itself
            action = takes[prefixed[0]]
        at += 1 if has_value or action.nargs == 0 else 2
    return None


def run(argv: list[str] | None = None) -> int:
    """Parse and run one command; returns its exit code (raises Exit, SystemExit)."""
    parser = build_parser()
    words = sys.argv[1:] if argv is None else list(argv)
    unknown = unknown_flag_before_command(parser, words)
    if unknown is not None:
        parser.error(f"unrecognized arguments: {unknown} (before the command)")
    args = parser.parse_args(words)
    if args.command == "mcp":
        try:
            from ..mcp_server import main as serve_mcp   # the optional 'mcp' extra
        except ImportError as exc:
            if _ours(exc.name):
                raise                   # a bug of this package, not a missing extra
            raise Exit(USAGE, f"client mcp: the MCP server needs the MCP SDK ({exc}): "
                       f"pip install '{PACKAGE}[mcp]'") from None
        return serve_mcp(args)
    (command,) = [c for c in COMMANDS if c.name == args.command]
    return command.run(Cli(args))


def _ours(module: str | None) -> bool:
    """Whether ``module`` (an ImportError's ``name``) is of this package."""
    return (module or "").partition(".")[0] in ("client", "schemas", "broker")


def main(argv: list[str] | None = None) -> int:
    """:func:`run`, ending quietly: an :class:`Exit` prints its one line, Ctrl-C is
    130 and a closed stdout 0, never a traceback."""
    try:
        try:
            code = run(argv)
        except Exit as done:
            if done.line:
                print(done.line, file=sys.stderr)
            code = done.code
        sys.stdout.flush()        # a closed pipe shows here at the latest
        return code
    except KeyboardInterrupt:
        signal.signal(signal.SIGINT, signal.SIG_IGN)    # a second Ctrl-C while closing
        return INTERRUPTED
    except BrokenPipeError:
        _drop_stdout()
        return OK


def _drop_stdout() -> None:
    """Point stdout at /dev/null: the reader is gone, and the flush at exit would
    otherwise report the broken pipe again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass
