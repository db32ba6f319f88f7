"""``python -m client stats [--json] [--watch] [--top N]``: what the broker holds and does.

One ``stats`` request on a control connection (see :mod:`client.looking`), printed as
aligned tables, or with ``--json`` as the broker's answer itself. ``--watch`` asks
again every second, redrawing the screen (with ``--json``: one answer per line),
until Ctrl-C, which exits 130 without a traceback. Exit codes: 0 answered, 1
refused, 3 no broker.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any, Iterable, TextIO

from .looking import INTERRUPTED, OK, exit_code, open_look, refusal_line

WATCH_S = 1.0
CLEAR = "\x1b[H\x1b[2J"


def add_parser(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser("stats", help="what the broker holds and does (read on a "
                                   "control connection)")
    parser.add_argument("--json", action="store_true", help="print the broker's answer as JSON")
    parser.add_argument("--watch", action="store_true", help="ask again every second until Ctrl-C")
    parser.add_argument("--top", type=int, metavar="N",
                        help="rows of each largest-first list (default: the broker's, 10)")
    parser.set_defaults(run=run)
    return parser


def run(args: argparse.Namespace, out: TextIO = sys.stdout) -> int:
    try:
        with open_look(args, f"{args.name}-stats") as look:
            while True:
                answer = look.stats(args.top)
                if not answer.get("ok"):
                    print(json.dumps(answer) if args.json else refusal_line(answer),
                          file=out if args.json else sys.stderr)
                    return exit_code(answer.get("code"))
                if args.json:
                    print(json.dumps(answer, indent=None if args.watch else 2, sort_keys=True),
                          file=out, flush=True)
                else:
                    print((CLEAR if args.watch and out.isatty() else "") + render(answer),
                          file=out, flush=True)
                if not args.watch:
                    return OK
                time.sleep(WATCH_S)       # the refresh period the user asked for
    except KeyboardInterrupt:
        return INTERRUPTED


# -- text -----------------------------------------------------------------------------

def table(title: str, headers: list[str], rows: Iterable[list[Any]]) -> str:
    """``title``, then aligned columns (numbers to the right); "(none)" for no rows."""
    rows = [[_cell(value) for value in row] for row in rows]
    if not rows:
        return f"{title}\n  (none)"
    numeric = [all(_is_number(row[i]) for row in rows) for i in range(len(headers))]
    widths = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(headers)]

    def line(cells: list[str]) -> str:
        return "  " + "  ".join(c.rjust(w) if n else c.ljust(w)
                                for c, w, n in zip(cells, widths, numeric)).rstrip()
    return "\n".join([title, line(headers), *(line(row) for row in rows)])


def render(s: dict[str, Any]) -> str:
    """The whole answer as text: a summary, then one table per list."""
    b, sessions, store, counters = s["broker"], s["sessions"], s["store"], s["counters"]
    kinds = ", ".join(f"{kind} {n}" for kind, n in sessions["byKind"].items()) or "none"
    runs, inv, conv = s["runs"], s["invocations"], s["conversations"]
    summary = table(f"broker {b['id']} (pid {b['pid']}, up {_seconds(b['uptimeS'])})",
                    ["what", "figures"], [
        ["sessions", f"{sessions['local']} here ({kinds}), {sessions['mirrored']} on other brokers"],
        ["groups", s["groups"]["count"]],
        ["runs", f"{runs['live']} live, {runs['dormant']} dormant, {runs['closed']} closed, "
                 f"{runs['elsewhere']} on other brokers"],
        ["queued", f"{s['queues']['entries']} entries, {_bytes(s['queues']['bytes'])}"],
        ["backlog", _bytes(s["backlog"]["bytes"])],
        ["asks", f"{s['asks']['pending']} pending, {counters['asksSettled']} settled"],
        ["invocations", f"{inv['queued']} queued, {inv['started']} started, {inv['done']} done, "
                        f"{inv['failed']} failed"],
        ["conversations", f"{conv['total']} ({conv['live']} live, {conv['persistent']} "
                          f"persistent, {conv['agents']} agents)"],
        ["store", f"{_bytes(store['fileBytes'])}, {store['commits']} commits, p50 "
                  f"{_ms(store['commitP50S'])}, p99 {_ms(store['commitP99S'])}, "
                  f"{store['pendingRecords']} pending"],
        ["routed", f"{counters['messagesRouted']} messages, {b['framesIn']} frames in, "
                   f"{b['framesOut']} out"],
        ["refused", counters["refused"]],
    ])
    return "\n\n".join([
        summary,
        table("refusals by code", ["code", "count"], counters["refusals"].items()),
        table("queues (largest first)", ["run", "target", "entries", "bytes"],
              [[q["runId"], q["target"], q["entries"], q["bytes"]] for q in s["queues"]["top"]]),
        table("runs", ["run", "host", "dormant", "stages", "entries"],
              [[r["runId"], r["host"] or "-", "yes" if r["dormant"] else "no",
                _stages(r["stages"]), r["entries"]] for r in runs["top"]]),
        table("backlog (largest first)", ["name", "kind", "status", "backlog", "asks"],
              [[r["name"], r["kind"], r["status"], r["backlogBytes"], r["pendingAsks"]]
               for r in s["backlog"]["top"]]),
        table("other brokers", ["broker", "endpoint", "linked", "sessions"],
              [[p["brokerId"], p["endpoint"], "yes" if p["linked"] else "no", p["sessions"]]
               for p in s["brokers"]["peers"]]),
    ])


def _stages(counts: dict[str, int]) -> str:
    return ", ".join(f"{n} {state}" for state, n in counts.items()) or "-"


def _cell(value: Any) -> str:
    return "-" if value is None else str(value)


def _is_number(text: str) -> bool:
    return text.lstrip("-").replace(".", "", 1).isdigit()


def _bytes(size: int | None) -> str:
    if size is None:
        return "-"
    for unit in ("B", "KiB", "MiB"):
        if size < 1024:
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} GiB"


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1000:.2f} ms"


def _seconds(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds:.0f} s"
