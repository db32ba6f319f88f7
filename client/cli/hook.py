"""``hook``: the command an agent host runs at its hook events, and the settings for it.

* ``hook EVENT --name NAME`` (EVENT: ``Stop``, ``UserPromptSubmit``, ``SessionStart``)
  reads the host's JSON from stdin, asks the ``mcp`` server named NAME for the
  messages that wait (over its local socket: no broker connection, no MCP SDK), and
  prints what the host expects (:mod:`client.host_hooks`). It exits 0 whatever
  happens, printing nothing when there is nothing to hand over, no server of that
  name runs or the server does not answer within ASK_TIMEOUT_S: a hook must never
  break the host's turn. Stdin that is not the host's JSON counts as ``{}``. A
  command line that names no event of ours or no server says so on stderr (the
  host's verbose log), still with 0.
* ``hook install --host claude|codex --name NAME`` prints the settings block to add to
  the host's settings (stdout: JSON; where it goes: one line on stderr). It edits no
  file.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import shlex
import shutil
import sys
import time
from pathlib import Path

from ..hook_socket import ask, hook_socket_path
from ..host_hooks import EVENTS, HOSTS, hook_output, install_block, parse_payload, request_for
from .command import Command
from .context import OK, USAGE, Cli, Exit

INSTALL = "install"
STDIN_TIMEOUT_S = 2.0      # the host writes its JSON at once; a stdin left open is not waited on
ASK_TIMEOUT_S = 2.0        # the server answers from its event loop, without the broker


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("event", metavar="EVENT", help=f"{', '.join(EVENTS)} (as the host names "
                        f"the event it runs the hook for), or {INSTALL}")
    parser.add_argument("--name", help="the --name of the 'python -m client mcp' server of this "
                        "host session")
    parser.add_argument("--host", choices=sorted(HOSTS), help=f"with {INSTALL}: the host whose "
                        "settings to print")


def read_stdin(timeout: float = STDIN_TIMEOUT_S) -> bytes:
    """Everything on stdin until its end, or what came within ``timeout``; nothing
    from a terminal or a closed stdin."""
    try:
        fd = sys.stdin.fileno()
        if os.isatty(fd):
            return b""
    except (AttributeError, OSError, ValueError):
        return b""
    data = bytearray()
    deadline = time.monotonic() + timeout
    try:
        while (left := deadline - time.monotonic()) > 0:
            if not select.select([fd], [], [], left)[0]:
                break
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                break
            data += chunk
    except OSError:
        pass
    return bytes(data)


def client_command() -> str:
    """How a host's shell starts this client: the ``intercom`` script beside this
    Python (what ``pip install`` made), else the one on PATH, else ``python -m client``
    with this Python; absolute, so the host's PATH does not matter."""
    beside = Path(sys.executable).parent / "intercom"
    script = str(beside) if beside.is_file() else shutil.which("intercom")
    if script:
        return shlex.quote(os.path.abspath(script))
    return f"{shlex.quote(sys.executable)} -m client"


def run_install(cli: Cli) -> int:
    args = cli.args
    if args.host is None or not args.name:
        raise Exit(USAGE, f"client hook {INSTALL}: give --host ({' or '.join(sorted(HOSTS))}) "
                   "and --name (the 'mcp' server's)")
    cli.print(json.dumps(install_block(client_command(), args.name), indent=2))
    print(f"# add this to {HOSTS[args.host].where}", file=cli.err)
    return OK


def run_event(cli: Cli) -> int:
    args = cli.args
    payload = parse_payload(read_stdin())
    request = request_for(args.event, payload)
    if request is None:
        print(f"client hook: {args.event!r} is not an event of ours ({', '.join(EVENTS)})",
              file=cli.err)
        return OK
    if not args.name:
        print("client hook: give --name (the 'mcp' server's)", file=cli.err)
        return OK
    # No answer (no server of that name runs here: the usual case for a session
    # without one) and nothing waiting look the same to the host: nothing printed.
    output = hook_output(args.event, ask(hook_socket_path(args.name), request, ASK_TIMEOUT_S))
    if output is not None:
        cli.print(json.dumps(output))          # ASCII: whatever the host's locale
    return OK


def run_hook(cli: Cli) -> int:
    if cli.args.event == INSTALL:
        return run_install(cli)
    try:
        return run_event(cli)
    except Exception as exc:       # a hook never fails the host's turn, nor prints a traceback
        print(f"client hook: {exc.__class__.__name__}: {exc}", file=cli.err)
        return OK


COMMAND = Command(
    "hook", "run as an agent host's hook: hand over the messages waiting for an 'mcp' server",
    run_hook, _arguments, shared_flags=False,
    description="Run as a Claude Code or Codex hook: 'hook Stop|UserPromptSubmit|SessionStart "
    "--name NAME' hands the messages waiting for the 'python -m client mcp --name NAME' server "
    "to the model (stdin: the host's JSON; stdout: the host's JSON; always exit 0). "
    "'hook install --host claude|codex --name NAME' prints the settings that run it.")
