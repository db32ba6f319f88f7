"""Sections of a document generated from a declaration (the README's protocol and
limits tables): the text between two HTML comment markers belongs to the generator."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Callable


def replace_section(text: str, begin: str, end: str, body: str) -> str:
    """``text`` with the part between ``begin`` and ``end`` replaced by ``body``."""
    head, _, rest = text.partition(begin)
    _, _, tail = rest.partition(end)
    return f"{head}{begin}\n{body}{end}{tail}"


def main(describe: Callable[[], str], with_description: Callable[[str], str]) -> None:
    """``python -m <module>`` prints the section; ``... FILE`` rewrites FILE's section."""
    if len(sys.argv) > 1:
        path = Path(sys.argv[1])
        path.write_text(with_description(path.read_text()))
    else:
        sys.stdout.write(describe())
