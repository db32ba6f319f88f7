"""Results: rows of medians beside baselines, the tables printed at the end, and stats.

:class:`Results` collects :class:`Row` s (one value per repeat, ours and baseline);
:func:`print_table` prints bench.py's table, :func:`print_load_table` load_sessions.py's.
:func:`percentiles` summarises latency samples in a role; :func:`pct` is the
interpolating percentile of the load run.
"""

from __future__ import annotations

import os
import statistics
import sys
from dataclasses import dataclass
from typing import Any

# =====================================================================================
# Stats
# =====================================================================================

def percentiles(samples_ns: list[int]) -> dict:
    s = sorted(samples_ns)
    n = len(s)

    def pick(q: float) -> float:
        return s[min(n - 1, int(q * n))] / 1000.0

    return {"n": n, "p50_us": pick(0.50), "p90_us": pick(0.90), "p99_us": pick(0.99),
            "mean_us": sum(s) / n / 1000.0, "min_us": s[0] / 1000.0}


def pct(values: list[float], q: float) -> float:
    """Percentile ``q`` (0..100) with linear interpolation; nan for no values."""
    if not values:
        return float("nan")
    s = sorted(values)
    if len(s) == 1:
        return s[0]
    pos = (len(s) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


# =====================================================================================
# bench.py: rows and the table printer
# =====================================================================================

@dataclass
class Row:
    section: str
    label: str
    unit: str                           # "msg/s" or "us"
    ours: list[float]                   # one value per repeat
    base: list[float] | None = None     # same-run baseline values, if any
    base_label: str = ""
    target: float | None = None         # minimum ours/base ratio (higher-is-better rows)
    note: str = ""
    target_max: float | None = None     # maximum ours/base ratio (lower-is-better rows)

    @property
    def ours_mid(self) -> float:
        return statistics.median(self.ours)

    @property
    def base_mid(self) -> float | None:
        return statistics.median(self.base) if self.base else None

    @property
    def ratio(self) -> float | None:
        base = self.base_mid
        return self.ours_mid / base if base else None


class Results:
    def __init__(self) -> None:
        self.rows: list[Row] = []
        self.extra: dict[str, Any] = {}     # raw per-run data, for --json

    def add(self, row: Row) -> Row:
        self.rows.append(row)
        return row

    def to_json(self) -> dict:
        return {
            "rows": [dict(section=r.section, label=r.label, unit=r.unit, ours=r.ours,
                          base=r.base, base_label=r.base_label, ratio=r.ratio,
                          target=r.target, target_max=r.target_max, note=r.note)
                     for r in self.rows],
            "extra": self.extra,
        }


def _fmt(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    if unit.startswith("us/"):          # per-item CPU or time: small numbers
        return f"{value:,.1f} {unit}"
    return f"{value:,.0f} {unit}"


def _is_rate(unit: str) -> bool:
    return unit.endswith("/s")


def _spread(values: list[float] | None, unit: str) -> str:
    if not values or len(values) < 2:
        return ""
    if _is_rate(unit):
        digits = 1 if max(values) < 10_000 else 0
        return f"{min(values) / 1000:,.{digits}f}-{max(values) / 1000:,.{digits}f}k"
    if unit.startswith("us/"):
        return f"{min(values):,.1f}-{max(values):,.1f}"
    return f"{min(values):,.0f}-{max(values):,.0f}"


def print_table(results: Results, out=sys.stdout) -> None:
    if not results.rows:
        print("(no results)", file=out)
        return
    headers = ["measurement", "ours", "(spread)", "baseline", "(spread)", "ours/base",
               "target", ""]
    lines = []
    for r in results.rows:
        ratio = r.ratio
        verdict = ""
        if r.target is not None and ratio is not None:
            verdict = "ok" if ratio >= r.target else "BELOW"
        if r.target_max is not None and ratio is not None:
            verdict = "ok" if ratio <= r.target_max else "ABOVE"
        target = (f">= {r.target:.2f}" if r.target is not None else
                  f"<= {r.target_max:.2f}" if r.target_max is not None else "")
        lines.append([
            r.label, _fmt(r.ours_mid, r.unit), _spread(r.ours, r.unit),
            _fmt(r.base_mid, r.unit) if r.base else "-", _spread(r.base, r.unit),
            f"{ratio:.2f}" if ratio is not None else "-", target, verdict,
        ])
    widths = [max(len(h), *(len(l[i]) for l in lines)) if lines else len(h)
              for i, h in enumerate(headers)]
    align = ["<", ">", ">", ">", ">", ">", ">", "<"]

    def fmt_line(cells):
        return "  ".join(f"{c:{a}{w}}" for c, a, w in zip(cells, align, widths)).rstrip()

    print(fmt_line(headers), file=out)
    print("  ".join("-" * w for w in widths), file=out)
    section = None
    for r, cells in zip(results.rows, lines):
        if section is not None and r.section != section:
            print(file=out)
        section = r.section
        print(fmt_line(cells), file=out)
    notes = [(r.label, r.base_label, r.note) for r in results.rows if r.base_label or r.note]
    if notes:
        print(file=out)
        for label, base_label, note in notes:
            parts = [p for p in (f"baseline = {base_label}" if base_label else "", note) if p]
            print(f"  {label}: {'; '.join(parts)}", file=out)


def environment() -> str:
    import zmq
    try:
        load = open("/proc/loadavg").read().split()[:3]
    except OSError:
        load = ["?"]
    return (f"python {sys.version.split()[0]}, pyzmq {zmq.__version__}, libzmq "
            f"{zmq.zmq_version()}, {os.cpu_count()} cores, loadavg {' '.join(load)}")


# =====================================================================================
# load_sessions.py: the table printer
# =====================================================================================

def print_load_table(n: int, p: int, rows: list[tuple[str, str]],
                     rss: list[tuple[str, dict]], problems: list[str]) -> None:
    """Labelled rows, the broker's /proc samples per phase, then the problems."""
    print()
    print(f"Intercom load run: {n} sessions, {p} worker processes, "
          f"{os.cpu_count()} CPUs, python {sys.version.split()[0]}")
    width = max((len(k) for k, _ in rows), default=10)
    print("-" * (width + 60))
    for label, value in rows:
        print(f"{label:<{width}}  {value}")
    print("-" * (width + 60))
    print(f"{'broker process':<{width}}  {'VmRSS':>9} {'VmHWM':>9} {'fds':>6} {'thr':>4} {'cpu s':>7}")
    for label, st in rss:
        print(f"{label:<{width}}  {st.get('VmRSS', float('nan')):>7.1f}Mi "
              f"{st.get('VmHWM', float('nan')):>7.1f}Mi {st.get('fds', 0):>6} "
              f"{st.get('threads', 0):>4} {st.get('cpu_s', float('nan')):>7.2f}")
    print("-" * (width + 60))
    if problems:
        print(f"PROBLEMS ({len(problems)}):")
        for p in problems:
            print(f"  - {p}")
    else:
        print("all checks passed")
