"""bench_store.py ``--tree DIR``: its ``durable`` section, another checkout against this one.

Per repeat, for 1 then 3 brokers, on SQLite then PostgreSQL, the brokers of ``DIR``
("before", imported from there: cwd and PYTHONPATH) and then this checkout's ("after")
are measured back to back (before, after, before, after, ...), each on a fresh database:
a new SQLite file or a new PostgreSQL schema, so each tree creates its own schema
version. The sender processes are this checkout's in both. A failed measurement (a
sender that got no answer, a broker that did not start) is printed and left out.
At the end, per store and broker count: median rates, min-max, the ratio of the
medians after/before, and the after/before ratio of each back-to-back pair.
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Callable

STORES = ("sqlite", "postgres")
BROKERS = (1, 3)


def compare_durable(tree: Path, repeats: int,
                    measure: Callable[[int, str, Path | None], dict]) -> list[str]:
    """``measure(brokers, store, tree)`` is one durable run (``tree`` None: this checkout).
    Prints each run and the table; returns the problems seen (refusals, failed runs)."""
    sides = (("before", tree), ("after", None))
    rates: dict[tuple[str, int, str], list[float | None]] = {}
    problems: list[str] = []
    for rep in range(repeats):
        for brokers in BROKERS:
            for store in STORES:
                for side, where in sides:
                    what = f"[{rep + 1}] {brokers} broker(s), {store:<8} {side:<6}"
                    try:
                        r = measure(brokers, store, where)
                    except Exception as exc:        # report it, keep measuring the rest
                        problems.append(f"{what}: {type(exc).__name__}: {exc}")
                        rates.setdefault((store, brokers, side), []).append(None)
                        print(f"{what}  FAILED: {exc}", flush=True)
                        continue
                    bad = {**r["not_ok"], **({"ok_not_queued": r["ok_not_queued"]}
                                             if r["ok_not_queued"] else {})}
                    if bad or r["queued"] != r["sent"]:
                        problems.append(f"{what}: queued {r['queued']}/{r['sent']}, not queued {bad}")
                    rates.setdefault((store, brokers, side), []).append(r["rate"])
                    print(f"{what} {r['rate']:>8,.0f} sends/s confirmed  (queued "
                          f"{r['queued']:,}/{r['sent']:,}" + (f"; not queued: {bad}" if bad else "")
                          + ")", flush=True)
    print(f"\ndurable sends confirmed per second, before = {tree}, after = this checkout; "
          f"{repeats} repeat(s)", flush=True)
    print(f"{'store':<9}{'brokers':>8}{'before median':>15}{'(min-max)':>19}"
          f"{'after median':>14}{'(min-max)':>19}{'after/before':>14}  pairs", flush=True)
    for store in STORES:
        for brokers in BROKERS:
            before = rates.get((store, brokers, "before"), [])
            after = rates.get((store, brokers, "after"), [])
            pairs = [a / b for b, a in zip(before, after) if a and b]
            b_ok = [x for x in before if x]
            a_ok = [x for x in after if x]
            ratio = (f"{statistics.median(a_ok) / statistics.median(b_ok):.2f}"
                     if a_ok and b_ok else "n/a")
            print(f"{store:<9}{brokers:>8}{_med(b_ok):>15}{_span(b_ok):>19}{_med(a_ok):>14}"
                  f"{_span(a_ok):>19}{ratio:>14}  {' '.join(f'{p:.2f}' for p in pairs)}",
                  flush=True)
    print("problems: " + ("; ".join(problems) if problems else "none"), flush=True)
    return problems


def _med(xs: list[float]) -> str:
    return f"{statistics.median(xs):,.0f}" if xs else "n/a"


def _span(xs: list[float]) -> str:
    return f"({min(xs):,.0f}-{max(xs):,.0f})" if xs else ""
