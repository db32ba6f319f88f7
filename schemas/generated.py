"""Sections of a document generated from a declaration (PROTOCOL.md's tables, the
limits table of docs/operations.md, docs/errors.md): the text between two HTML comment
markers belongs to the generator. ``python3 scripts/gen_docs.py`` rewrites them all."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Callable


def replace_section(text: str, begin: str, end: str, body: str) -> str:
    """``text`` with the part between ``begin`` and ``end`` replaced by ``body``.

    Raises ValueError when ``text`` lacks either marker (or has them out of order):
    a document without the section is never appended to."""
    head, found, rest = text.partition(begin)
    _, found_end, tail = rest.partition(end)
    if not found or not found_end:
        raise ValueError(f"no section between {begin!r} and {end!r}")
    return f"{head}{begin}\n{body}{end}{tail}"


def main(describe: Callable[[], str], with_description: Callable[[str], str]) -> None:
    """``python -m <module>`` prints the section; ``... FILE`` rewrites FILE's section."""
    if len(sys.argv) > 1:
        path = Path(sys.argv[1])
        path.write_text(with_description(path.read_text()))
    else:
        sys.stdout.write(describe())
