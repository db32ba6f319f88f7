"""How the command line lays out what it prints: aligned tables, key/value blocks,
times as "3m ago", and colour only for a terminal.

Pure text: nothing here reads the clock or the environment on its own; the caller
passes ``now`` and says whether to colour (:func:`wants_colour` decides that once).
Columns are padded on the plain text, so colour codes never shift the alignment.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Callable, Sequence, TextIO

GAP = "  "
NONE = "-"                    # an empty cell
_CODES = {"bold": "1", "dim": "2", "red": "31", "green": "32", "yellow": "33", "cyan": "36"}


def wants_colour(stream: TextIO, refused: bool = False) -> bool:
    """Colour only on a terminal, and never when ``NO_COLOR`` is set (no-color.org)
    or the caller refused it (``--no-color``)."""
    if refused or os.environ.get("NO_COLOR"):
        return False
    try:
        return stream.isatty()
    except (AttributeError, ValueError):      # closed, or not a real stream
        return False


@dataclass(frozen=True, slots=True)
class Style:
    """Paints text when ``enabled``; a no-op otherwise."""

    enabled: bool = False

    def __call__(self, text: str, *styles: str) -> str:
        if not self.enabled or not styles or not text:
            return text
        codes = ";".join(_CODES[s] for s in styles)
        return f"\033[{codes}m{text}\033[0m"


def ago(then: Any, now: float) -> str:
    """A wall-clock time as its distance back from ``now``: "12s ago", "3m ago",
    "5h ago", "2d ago"; "-" when unknown, "now" within a second (or in the future)."""
    if not isinstance(then, (int, float)) or isinstance(then, bool):
        return NONE
    return elapsed(now - then)


def elapsed(seconds: Any) -> str:
    """A duration back in time, in its largest whole unit, as :func:`ago` writes it."""
    if not isinstance(seconds, (int, float)) or isinstance(seconds, bool) or seconds != seconds:
        return NONE
    if seconds < 1:
        return "now"
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit} ago"
    return f"{int(seconds)}s ago"


def cell(value: Any) -> str:
    """One value as table text: lists joined with commas, booleans as yes/blank, an
    absent value as "-"."""
    if value is None or value == []:
        return NONE
    if value is True:
        return "yes"
    if value is False:
        return ""
    if isinstance(value, (list, tuple)):
        return ",".join(cell(v) for v in value)
    return " ".join(str(value).split())     # one line: newlines and tabs become spaces


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]], style: Style = Style(),
          paint: Callable[[int, str], Sequence[str]] | None = None) -> list[str]:
    """Rows under headers, each column as wide as its widest cell, the last one
    unpadded. ``paint(column, text)`` names the styles of one cell (none: plain)."""
    texts = [[cell(v) for v in row] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in texts]) for i, h in enumerate(headers)]
    last = len(headers) - 1

    def line(cells: Sequence[str], styles: Callable[[int, str], Sequence[str]]) -> str:
        parts = []
        for i, text in enumerate(cells):
            padding = "" if i == last else " " * (widths[i] - len(text))
            parts.append(style(text, *styles(i, text)) + padding)
        return GAP.join(parts).rstrip()

    out = [line(headers, lambda i, text: ("bold",))]
    out.extend(line(r, paint or (lambda i, text: ())) for r in texts)
    return out


def pairs(items: Sequence[tuple[str, Any]], style: Style = Style()) -> list[str]:
    """``key  value`` lines with the keys aligned."""
    width = max((len(k) for k, _ in items), default=0)
    return [style(k.ljust(width), "bold") + GAP + cell(v) for k, v in items]
