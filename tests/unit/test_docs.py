"""The documents follow the declarations: PROTOCOL.md, docs/errors.md and the limits
table are what ``python3 scripts/gen_docs.py`` writes from ``schemas/``; the worked
example's bytes are real frames; links between the documents lead somewhere."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import msgpack
import pytest

from schemas import kinds
from schemas.protocol import unpack_frame

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))

from docgen import msgpack_notes, sections  # noqa: E402

# Written on another branch (the Node client, issue 21): linked from here already.
ELSEWHERE = {"clients/node/README.md"}
OPENING = """# Intercom bus

```sh
python3 -m pip install -e . && python3 -m broker
python3 -m pip install -e '.[test]' && python3 -m pytest
```
"""


@pytest.mark.parametrize("path", sorted(sections.DOCUMENTS))
def test_each_generated_section_is_what_the_declarations_give_now(path):
    text = (ROOT / path).read_text()
    assert sections.render(path, text) == text, f"{path} is stale: run python3 scripts/gen_docs.py"


def test_the_check_mode_of_the_script_agrees():
    done = subprocess.run([sys.executable, "scripts/gen_docs.py", "--check"], cwd=ROOT,
                          capture_output=True, text=True, timeout=50)
    assert (done.returncode, done.stdout) == (0, ""), done.stderr


def test_a_document_that_lost_its_markers_is_refused_not_appended_to():
    with pytest.raises(ValueError):
        sections.render("docs/operations.md", "# Operations\n")


def _example_frames() -> list[tuple[int, bytes]]:
    text = (ROOT / "PROTOCOL.md").read_text()
    return [(int(size), bytes.fromhex(hexed))
            for size, hexed in re.findall(r"^(\d+) bytes: `([0-9a-f]+)`$", text, re.M)]


def test_the_worked_example_shows_real_frames_their_kinds_accept():
    frames = _example_frames()
    assert len(frames) == 5
    seen = []
    for size, frame in frames:
        assert len(frame) == size
        for env in unpack_frame(frame, 4 << 20):
            direction = kinds.CLIENT if env["k"] in ("call", "hello") or "read" in env else kinds.BROKER
            kinds.check(env, kinds.kind_of(env, direction), direction)
            seen.append(env["k"])
    assert seen == ["call", "result", "msg", "hb", "hb"]


def test_the_byte_listing_accounts_for_every_byte_of_every_type():
    value = {"map": {"nested": [None, True, False, 5, -3, -200, 70_000, 1 << 40, (1 << 64) - 1,
                                -(1 << 63), 1.5]},
             "text": "é" * 40, "long": "x" * 300, "blob": b"\x00\x01", "many": list(range(20))}
    data = msgpack.packb(value, use_bin_type=True)
    notes = msgpack_notes.annotate(data)
    assert b"".join(note.data for note in notes) == data
    meanings = " ".join(note.meaning for note in notes)
    for name in ("map of 5 pairs", "array of 11 items", "nil", "true", "false", "negative fixint -3",
                 "int 16 -200", "uint 32 70000", "uint 64 18446744073709551615", "float 64 1.5",
                 "str 8 (80 bytes)", "str 16 (300 bytes)", "bin 8 (2 bytes)", "array of 20 items"):
        assert name in meanings


def test_a_byte_listing_refuses_trailing_bytes():
    with pytest.raises(ValueError):
        msgpack_notes.annotate(msgpack.packb(1) + b"\x00")


def test_the_readme_still_opens_with_the_two_commands():
    assert (ROOT / "README.md").read_text().startswith(OPENING)


def _documents() -> list[Path]:
    return [ROOT / "README.md", ROOT / "PROTOCOL.md", *sorted((ROOT / "docs").glob("*.md"))]


def _anchor(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to dashes."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", path.read_text(), flags=re.S)
    return {_anchor(h) for h in re.findall(r"^#+ (.+)$", text, re.M)}


@pytest.mark.parametrize("document", _documents(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_leads_to_a_file_and_heading_that_exist(document):
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", document.read_text()):
        if re.match(r"[a-z]+:", target):
            continue                      # http(s), mailto: not checked here
        path, _, anchor = target.partition("#")
        where = (document.parent / path).resolve() if path else document
        if str(where.relative_to(ROOT)) in ELSEWHERE:
            continue
        if not where.exists() or (anchor and where.suffix == ".md" and anchor not in _anchors(where)):
            broken.append(target)
    assert broken == []
