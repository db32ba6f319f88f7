#!/usr/bin/env python3
"""Regenerates the generated sections of PROTOCOL.md and docs/ from ``schemas/``.

    python3 scripts/gen_docs.py           # rewrite what is stale, name each file
    python3 scripts/gen_docs.py --check   # rewrite nothing; exit 1 if anything is stale

The sections and their generators are listed in ``scripts/docgen/sections.py``; the
text outside the markers is written by hand and left alone. ``tests/unit/test_docs.py``
fails while a committed document differs from what this script would write.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from docgen.sections import stale, write  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="only report stale documents (exit 1 if any)")
    args = parser.parse_args()
    if args.check:
        behind = stale(ROOT)
        for path in behind:
            print(f"stale: {path} (run python3 scripts/gen_docs.py)")
        return 1 if behind else 0
    for path in write(ROOT):
        print(f"rewrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
