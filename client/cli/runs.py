"""Workflow runs as tables: one block per run (its id, group, host), then one row per
stage with its canonical path first, its label and its queued count, then the
future targets (patterns, names, paths outside the known set) with theirs; closed
stages last. Per-entry delivery states stay in ``--json``."""

from __future__ import annotations

from typing import Any, Sequence

from .tables import NONE, Style, table

_HEADERS = ["TARGET", "STATE", "QUEUED", "NAME", "SESSION"]


def label_styles(text: str) -> tuple[str, ...]:
    if text == "RUNNING":
        return ("green",)
    if text in ("PENDING", "future"):
        return ("yellow",)
    if text.startswith(("closed", "delivery-unavailable")):
        return ("dim",)
    return ()


def run_tables(workflows: Sequence[dict], closed: Sequence[dict], style: Style) -> list[str]:
    """The lines of every run in ``workflows`` and of the ``closed`` stages."""
    out: list[str] = []
    for run in workflows:
        if out:
            out.append("")
        out.append(style(run_title(run), "bold"))
        out.extend(f"  {line}" for line in stage_table(run, style))
    if closed:
        if out:
            out.append("")
        out.append(style("closed stages", "bold"))
        rows = [[c.get("target"), c.get("label"), NONE, c.get("name"), c.get("sessionId")]
                for c in closed]
        out.extend(f"  {line}" for line in table(_HEADERS, rows, style, _paint))
    return out


def run_title(run: dict[str, Any]) -> str:
    title = f"run {run.get('runId')}  group {run.get('group')}  host {run.get('host') or NONE}"
    return title + ("  dormant" if run.get("dormant") else "")


def stage_table(run: dict[str, Any], style: Style) -> list[str]:
    rows = [[s.get("target") or s.get("id"), s.get("label"), s.get("queued", 0),
             _name(s), s.get("sessionId")] for s in run.get("stages") or []]
    rows += [[f.get("target"), "future", f.get("queued", 0), None, None]
             for f in run.get("future") or []]
    if not rows:
        return [style("no stages", "dim")]
    return table(_HEADERS, rows, style, _paint)


def _paint(column: int, text: str) -> tuple[str, ...]:
    return label_styles(text) if column == 1 else ()


def _name(stage: dict[str, Any]) -> str | None:
    """The stage's name, unless the path already ends with it."""
    name, target = stage.get("name"), stage.get("target") or ""
    return None if name and target.endswith(f"/{name}") else name
