"""The commands that look: ``list`` (``--all``), ``groups``, ``status``, ``sessions``
and ``runs``. Each opens one control connection (listed to nobody, announcing
nothing), asks once, prints the answer and leaves."""

from __future__ import annotations

import argparse
import difflib

from schemas.errors import error_reply

from .command import Command
from .context import Cli
from .views import conversations, groups_view, listing, status_view
from .runs import run_tables


def _group_filter(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--group", help="a read-only look at this group instead of the "
                        "connection's own (--as-group)")


def _list_arguments(parser: argparse.ArgumentParser) -> None:
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--group", help="a read-only look at this group")
    which.add_argument("--all", action="store_true",
                       help="every session and run the broker holds, in every group (for "
                       "the broker's operator: on its host, or with its CURVE key)")


def run_list(cli: Cli) -> int:
    absent = None
    with cli.connect() as session:
        if cli.args.all:
            answer = session.overview()
        else:
            answer = session.intercom(action="list", **_group(cli))
            if _nothing_in_the_group(cli, answer):
                absent = _absent_group(cli.args.group, session.intercom(action="groups"))

    def render(a: dict) -> list[str]:
        lines = listing(a, cli.now(), cli.style, everywhere=cli.args.all)
        return [absent] if absent is not None else lines
    return cli.finish(answer, render)


def _nothing_in_the_group(cli: Cli, answer: dict) -> bool:
    """A ``list --group G`` that found no session and no run (and is read by a person:
    ``--json`` prints the answer as it is)."""
    return (not cli.json and answer.get("ok") and getattr(cli.args, "group", None) is not None
            and not answer.get("sessions") and not answer.get("workflows")
            and not answer.get("closedStages"))


def _absent_group(group: str, groups: dict) -> str | None:
    """The line for a group no connected session is in (a typo, most often), with the
    names it may have meant; None when ``groups`` lists it (its members are not
    visible here) or could not be read."""
    if not groups.get("ok"):
        return None
    names = [g.get("name") for g in groups.get("groups") or [] if isinstance(g.get("name"), str)]
    if group.strip() in names:
        return None
    by_lower = {name.lower(): name for name in names}
    near = [by_lower[n] for n in difflib.get_close_matches(group.strip().lower(), by_lower, 3, 0.6)]
    line = f"no group {group!r}: no connected session is in it"
    return line + (f" (did you mean {', '.join(near)}?)" if near else
                   " (the groups command lists every group)")


def run_groups(cli: Cli) -> int:
    with cli.connect() as session:
        answer = session.intercom(action="groups")
    return cli.finish(answer, lambda a: groups_view(a, cli.style))


def run_status(cli: Cli) -> int:
    with cli.connect() as session:
        answer = session.intercom(action="status", **_group(cli))
    return cli.finish(answer, lambda a: status_view(a, cli.now(), cli.style))


def _sessions_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--agent", required=True, help="whose conversations")
    parser.add_argument("--channel", help="only this conversation's row (read-only: nothing "
                        "is joined or consumed)")


def run_sessions(cli: Cli) -> int:
    agent, channel = cli.args.agent, cli.args.channel
    with cli.connect() as session:
        answer = session.list_sessions(agent=agent)
    if answer.get("ok") and channel is not None:
        rows = [row for row in answer["sessions"] if row.get("session") == channel]
        answer = ({"ok": True, "sessions": rows} if rows else
                  error_reply("channel_not_found", channel=channel, agent=agent))
    return cli.finish(answer, lambda a: conversations(a, cli.now(), cli.style))


def run_runs(cli: Cli) -> int:
    with cli.connect() as session:
        answer = session.overview()
    if answer.get("ok"):
        answer = {"ok": True, "brokerId": answer.get("brokerId"),
                  "workflows": answer.get("workflows", [])}
    return cli.finish(answer, lambda a: run_tables(a["workflows"], [], cli.style)
                      or [cli.style("no workflow runs", "dim")])


def _group(cli: Cli) -> dict:
    group = getattr(cli.args, "group", None)
    return {} if group is None else {"group": group}


COMMANDS = (
    Command("list", "sessions and workflow stages you can see (--all: everything)", run_list,
            _list_arguments),
    Command("groups", "every group with a connected session, and its size", run_groups),
    Command("status", "the connection, its groups, and the broker's routing state", run_status,
            _group_filter),
    Command("sessions", "an agent's conversations (respond/invoke)", run_sessions,
            _sessions_arguments),
    Command("runs", "every workflow run the broker holds, with stages and queued counts "
            "(for the broker's operator)", run_runs),
)
