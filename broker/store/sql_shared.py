"""What the two SQL stores (SQLite, PostgreSQL) do alike: bind a record's fields by
name, keep payloads as msgpack blobs, and read runs back with their entries and
delivery states. Each store brings its own statements and row decoding."""

from __future__ import annotations

from typing import Any, Callable, Iterable

import msgpack

from broker.core.kernel.records import Record, RunSaved, StickyDelivery, StickyRow
from broker.store import RECORD_HANDLERS

Rows = Callable[[str, dict[str, Any]], Iterable[dict[str, Any]]]   # (statement, params) -> rows


def pack(value: Any) -> bytes:
    """A payload as stored. Raises TypeError for a value msgpack cannot encode."""
    return msgpack.packb(value, use_bin_type=True)


def unpack(blob: bytes) -> Any:
    return msgpack.unpackb(blob, raw=False)


def fields_by_name(record: Record, /, **encoded: Any) -> dict[str, Any]:
    """``record``'s fields by name, for SQL to bind (attribute access: ``asdict`` would
    deep-copy every run tree), with ``encoded`` replacing the fields stored encoded."""
    params = {name: getattr(record, name) for name in _FIELD_NAMES[type(record)]}
    params.update(encoded)
    return params


def stale_claim(claim: SessionClaimed, row: Any) -> bool:
    """Whether a refused ``claim`` lost to a newer hello of its own client (``row``: the
    claim as stored, with ``instance`` and ``attempt``), not to another process."""
    return claim.instance != "" and row["instance"] == claim.instance and \
        0 < claim.attempt < row["attempt"]


_FIELD_NAMES: dict[type, tuple[str, ...]] = {
    cls: tuple(cls.__dataclass_fields__) for cls in RECORD_HANDLERS}


def read_runs(rows: Rows, sql, runs_param: Any, any_runs: bool, everything: bool,
              sticky_row: Callable[[dict[str, Any]], StickyRow]) -> tuple[list, list, list]:
    """The runs ``runs_param`` names (``any_runs``: it names at least one), their sticky
    entries and delivery states (``everything``: every delivery state, even one whose
    entry is gone), through ``sql``'s SELECT_RUNS, SELECT_STICKY, SELECT_DELIVERIES and
    SELECT_ALL_DELIVERIES."""
    param = {"runs": runs_param}
    runs = [RunSaved(row["run_id"], unpack(row["record"]), row["owner"], row["epoch"])
            for row in rows(sql.SELECT_RUNS, param)] if any_runs else []
    sticky = [sticky_row(row) for row in rows(sql.SELECT_STICKY, param)] if any_runs else []
    deliveries = [StickyDelivery(**row) for row in rows(
        sql.SELECT_ALL_DELIVERIES if everything else sql.SELECT_DELIVERIES, param)]
    return runs, sticky, deliveries
