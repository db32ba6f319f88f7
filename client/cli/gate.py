"""The person's side of a session's inbound gate: ``inbound``, ``held``, ``release``, ``drop``.

Each acts for the live session ``--identity`` names (as ``reply`` and ``pending`` do,
see :mod:`client.cli.acts`): ``inbound --policy hold`` makes messages from other
sessions wait for a decision here, ``held`` lists them, ``release ID`` delivers one
and ``drop ID`` drops it (``--all`` for every one). Senders see each outcome on their
message's receipt and in a ``held_settled`` event. See :mod:`client.attention`.
"""

from __future__ import annotations

import argparse
from typing import Any

from schemas.attention import HOLD_EXPIRY_S, INBOUND_POLICIES

from .acts import identity
from .command import Command
from .context import USAGE, Cli, Exit
from .tables import ago, table


def _identity(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--identity", metavar="FILE|NAME", help="the live session whose gate "
                        "this is: its history file, or the --name of a 'python -m client "
                        "mcp' server")


def _inbound_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--policy", choices=INBOUND_POLICIES,
                        help="accept (deliver), hold (keep each message for release or drop "
                        f"here; held ones expire after {HOLD_EXPIRY_S / 3600:g} h) or refuse; "
                        "without it, print the current policy")
    _identity(parser)


def _settle_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("message_id", metavar="ID", nargs="?",
                        help="the held message's id (python -m client held)")
    parser.add_argument("--all", action="store_true", help="every held message")
    _identity(parser)


def run_inbound(cli: Cli) -> int:
    entry = identity(cli.args.identity, "inbound")
    with cli.connect(act_for=entry) as session:
        answer = session.set_inbound(cli.args.policy) if cli.args.policy else \
            session.held_messages()
    return cli.finish(answer, lambda a: [
        f"inbound policy: {a.get('policy')}; {_count(a.get('held'))} message(s) held"])


def run_held(cli: Cli) -> int:
    entry = identity(cli.args.identity, "held")
    with cli.connect(act_for=entry) as session:
        answer = session.held_messages()
    return cli.finish(answer, lambda a: held_view(a, cli.now()))


def held_view(answer: dict[str, Any], now: float) -> list[str]:
    rows = answer.get("held") or []
    head = f"inbound policy: {answer.get('policy')}"
    if not rows:
        return [head, "no message is held"]
    return [head] + table(("ID", "FROM", "HELD", "EXPIRES", "ASK", "MESSAGE"), [
        (r.get("messageId"), f"{r.get('fromName')} ({str(r.get('from', ''))[:8]})",
         ago(r.get("heldAt"), now), _until(r.get("expiresAt"), now), bool(r.get("expectsReply")),
         r.get("preview")) for r in rows])


def _until(then: Any, now: float) -> str:
    if not isinstance(then, (int, float)):
        return "-"
    left = max(0, int(then - now))
    return f"in {left // 60}m" if left >= 60 else f"in {left}s"


def _count(held: Any) -> int:
    return len(held) if isinstance(held, list) else held if isinstance(held, int) else 0


def _settle(cli: Cli, op: str) -> int:
    if not cli.args.all and not cli.args.message_id:
        raise Exit(USAGE, f"client: {op} needs a held message's id (python -m client held), "
                   "or --all")
    entry = identity(cli.args.identity, op)
    with cli.connect(act_for=entry) as session:
        settle = session.release_held if op == "release" else session.drop_held
        answer = settle(cli.args.message_id, all=cli.args.all)
    done = "released" if op == "release" else "dropped"
    return cli.finish(answer, lambda a: [
        f"{done} {len(a.get(done) or [])} message(s); {a.get('held', 0)} still held"])


COMMANDS = (
    Command("inbound", "see or set the inbound gate (accept, hold, refuse) of the session "
            "--identity names", run_inbound, _inbound_arguments),
    Command("held", "the messages held for the session --identity names", run_held, _identity),
    Command("release", "deliver a held message (or --all) to the session --identity names",
            lambda cli: _settle(cli, "release"), _settle_arguments),
    Command("drop", "drop a held message (or --all) undelivered; its sender is told",
            lambda cli: _settle(cli, "drop"), _settle_arguments),
)
