"""Which documents have generated sections, and what generates each.

A section is the text between two HTML comment markers; everything else in a document
is written by hand. :data:`DOCUMENTS` is the one table: ``python3 scripts/gen_docs.py``
rewrites every section from it, and ``tests/unit/test_docs.py`` fails while a
committed document differs from what the declarations in ``schemas/`` give now.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from schemas import bounds, kinds
from schemas.generated import replace_section

from . import errors_doc, operations_doc, protocol_tables, wire_example

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Section:
    begin: str
    end: str
    render: Callable[[], str]


def _named(name: str, render: Callable[[], str]) -> Section:
    return Section(f"<!-- generated: {name} (python3 scripts/gen_docs.py) -->",
                   f"<!-- end of generated: {name} -->", render)


DOCUMENTS: dict[str, tuple[Section, ...]] = {
    "PROTOCOL.md": (
        Section(kinds.BEGIN, kinds.END, kinds.describe),
        _named("welcome", protocol_tables.describe_welcome),
        _named("numbers", protocol_tables.describe_numbers),
        _named("client kinds", protocol_tables.describe_client_kinds),
        _named("attachments", protocol_tables.describe_attachments),
        _named("broker kinds", protocol_tables.describe_broker_kinds),
        _named("link kinds", protocol_tables.describe_link_kinds),
        _named("errors", protocol_tables.describe_errors),
        _named("worked example", wire_example.describe),
    ),
    "docs/errors.md": (_named("error reference", errors_doc.describe),),
    "docs/operations.md": (
        _named("config", operations_doc.describe_config),
        Section(bounds.BEGIN, bounds.END, bounds.describe),
    ),
}


def render(path: str, text: str) -> str:
    """``text`` (the document at ``path``) with each of its sections generated afresh.
    Raises ValueError when a section's markers are missing."""
    for section in DOCUMENTS[path]:
        body = section.render()
        text = replace_section(text, section.begin, section.end,
                               body if body.endswith("\n") else body + "\n")
    return text


def stale(root: Path = ROOT) -> list[str]:
    """The documents whose generated sections differ from the declarations."""
    return [path for path in DOCUMENTS
            if render(path, (root / path).read_text()) != (root / path).read_text()]


def write(root: Path = ROOT) -> list[str]:
    """Rewrite every stale document; returns those rewritten."""
    changed = stale(root)
    for path in changed:
        target = root / path
        target.write_text(render(path, target.read_text()))
    return changed
