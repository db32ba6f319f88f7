"""docs/errors.md's reference: every code, by class, with what it means, whether a retry
may help and what to do (:mod:`schemas.errors` and :mod:`schemas.error_help`)."""

from __future__ import annotations

from schemas.error_help import HELP
from schemas.errors import CLASSES, ERRORS, LOCAL

from .protocol_tables import cell, readable, retry_legend, retry_short


def describe() -> str:
    missing = sorted(set(ERRORS) - set(HELP))
    if missing:
        raise ValueError(f"schemas/error_help.py has no advice for {', '.join(missing)}")
    lines = ["Whether a retry may help:", ""] + retry_legend() + [
        "", "A code marked *(client)* is one a client library gives its own caller; no "
        "broker sends it.", ""]
    for kind, meaning in CLASSES.items():
        lines += [f"### {kind}", "", f"{meaning[0].upper()}{meaning[1:]}.", "",
                  "| code | what it means | retry may help | what to do |", "|---|---|---|---|"]
        for spec in ERRORS.values():
            if spec.kind != kind:
                continue
            side = " *(client)*" if spec.code in LOCAL else ""
            lines.append(f"| `{spec.code}`{side} | {readable(spec.text)} | "
                         f"{retry_short(spec.retry)} | {cell(HELP[spec.code])} |")
        lines.append("")
    return "\n".join(lines)
