"""``python -m client top``: a live full-screen view of one broker; ``q`` quits.

Each second it asks the broker for ``stats`` on a control connection (see
:mod:`client.looking`) and redraws with Rich (the optional ``top`` extra): sessions
(furthest behind in reading first), runs with their stages and queue depths, the
largest queues, the rates of routed messages, settled asks and refusals (from the
counters' change over the answers of the last :data:`RATE_WINDOW_S` seconds), and the
latest refusals.

Keys are read from the terminal in cbreak mode (restored on exit); ``q`` exits 0,
Ctrl-C 130. Exit codes otherwise as ``stats``: 1 refused, 3 no broker.
"""

from __future__ import annotations

import argparse
import os
import select
import sys
import termios
import time
import tty
from collections import deque
from contextlib import contextmanager
from typing import Any, Iterator

from .looking import INTERRUPTED, OK, USAGE, exit_code, open_look, refusal_line

REFRESH_S = 1.0
RATE_WINDOW_S = 10.0         # rates are over this much of the latest answers
QUIT_KEYS = frozenset("qQ")
TOP_ROWS = 15


def add_parser(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser("top", help="a live full-screen view of the broker (q quits)")
    parser.add_argument("--rows", type=int, default=TOP_ROWS, metavar="N",
                        help=f"rows per table (default {TOP_ROWS})")
    parser.set_defaults(run=run)
    return parser


def run(args: argparse.Namespace) -> int:
    try:
        from rich.console import Console
        from rich.live import Live
    except ImportError:
        print("client: top needs Rich: pip install 'intercom-bus[top]'", file=sys.stderr)
        return USAGE
    try:
        with open_look(args, f"{args.name}-top") as look, keys_pressed() as keys, \
                Live(console=Console(), screen=True, auto_refresh=False) as live:
            rates = Rates()
            while True:
                answer = look.stats(max(1, min(args.rows, 100)))
                if not answer.get("ok"):
                    live.stop()
                    print(refusal_line(answer), file=sys.stderr)
                    return exit_code(answer.get("code"))
                live.update(view(answer, rates.update(answer, time.monotonic())), refresh=True)
                if keys(REFRESH_S) & QUIT_KEYS:
                    return OK
    except KeyboardInterrupt:
        return INTERRUPTED


@contextmanager
def keys_pressed() -> Iterator:
    """A function ``wait(seconds) -> set of keys`` typed meanwhile (it returns at the
    first key). The terminal is in cbreak mode inside the block; without a terminal on
    stdin no key ever comes."""
    fd = sys.stdin.fileno() if sys.stdin is not None and sys.stdin.isatty() else None

    def wait(seconds: float) -> set[str]:
        if fd is None:
            time.sleep(seconds)           # nothing to read: just the refresh period
            return set()
        ready, _, _ = select.select([fd], [], [], seconds)
        return set(os.read(fd, 64).decode(errors="replace")) if ready else set()

    if fd is None:
        yield wait
        return
    saved = termios.tcgetattr(fd)
    try:
        tty.setcbreak(fd)
        yield wait
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


class Rates:
    """Per-second rates of the counters over the answers of the last
    :data:`RATE_WINDOW_S` seconds.

    Between two answers a second apart, refusals that come now and then (or a burst
    shorter than the refresh) showed as ``0.0/s`` most of the time; over the window,
    one refusal every few seconds reads as the rate it is, and a burst stays on screen
    for the window. A broker that restarted (another id, or counters that went down)
    starts the window again."""

    def __init__(self, window_s: float = RATE_WINDOW_S) -> None:
        self.window_s = window_s
        self._broker: Any = None
        self._samples: deque[tuple[float, dict[str, int]]] = deque()

    def update(self, answer: dict[str, Any], now: float) -> dict[str, float | None]:
        counters = answer["counters"]
        current = {"messages": counters["messagesRouted"], "asks": counters["asksSettled"],
                   "refusals": counters["refused"]}
        samples, broker = self._samples, (answer.get("broker") or {}).get("id")
        if broker != self._broker or (samples and (
                now <= samples[-1][0]
                or any(current[name] < samples[-1][1][name] for name in current))):
            samples.clear()
        self._broker = broker
        # Keep the newest sample at least window_s old: the base of the rates.
        while len(samples) > 1 and now - samples[1][0] >= self.window_s:
            samples.popleft()
        samples.append((now, current))
        if len(samples) < 2:
            return dict.fromkeys(current)
        then, base = samples[0]
        return {name: (value - base[name]) / (now - then) for name, value in current.items()}


def view(s: dict[str, Any], rates: dict[str, float | None]):
    """The screen for one answer (Rich renderables)."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    def rate(name: str) -> str:
        value = rates[name]
        return "-" if value is None else f"{value:,.1f}/s"

    b, sessions, store = s["broker"], s["sessions"], s["store"]
    kinds = " ".join(f"{kind}:{n}" for kind, n in sessions["byKind"].items())
    head = Text.assemble(
        ("intercom top", "bold"), f"  broker {b['id']}  pid {b['pid']}  up {b['uptimeS'] or 0:.0f}s"
        f"   q quits\n",
        f"sessions {sessions['local']} ({kinds or 'none'})  mirrored {sessions['mirrored']}  "
        f"groups {s['groups']['count']}  runs {s['runs']['live']} live {s['runs']['dormant']} "
        f"dormant {s['runs']['closed']} closed  asks pending {s['asks']['pending']}\n",
        f"messages {rate('messages')}  asks settled {rate('asks')}  refusals {rate('refusals')} "
        f"({s['counters']['refused']:,} in all)"
        f"  queued {s['queues']['entries']}  store pending {store['pendingRecords']} "
        f"commit p99 {_ms(store['commitP99S'])}")

    def grid(title: str, headers: list[str], rows: list[list[Any]]) -> Table:
        table = Table(title=title, title_justify="left", expand=True, box=None, pad_edge=False)
        for header in headers:
            table.add_column(header, no_wrap=True, overflow="ellipsis")
        for row in rows:
            table.add_row(*("-" if v is None else str(v) for v in row))
        return table

    return Group(
        head,
        grid("sessions", ["name", "kind", "status", "backlog", "asks", "groups"],
             [[r["name"], r["kind"], r["status"], r["backlogBytes"], r["pendingAsks"], r["groups"]]
              for r in s["backlog"]["top"]]),
        grid("runs", ["run", "host", "state", "stages", "running", "queued"],
             [[r["runId"], r["host"], "dormant" if r["dormant"] else "live",
               " ".join(f"{k}:{n}" for k, n in r["stages"].items()), " ".join(r["running"]),
               r["entries"]] for r in s["runs"]["top"]]),
        grid("queues", ["run", "target", "entries", "bytes"],
             [[q["runId"], q["target"], q["entries"], q["bytes"]] for q in s["queues"]["top"]]),
        grid("last refusals", ["at", "code", "caller", "request"],
             [[time.strftime("%H:%M:%S", time.localtime(r["at"])), r["code"],
               r.get("name") or r.get("connection"), r["re"]]
              for r in reversed(s["lastRefusals"][-5:])]),
    )


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1000:.1f}ms"
