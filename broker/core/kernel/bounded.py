"""A map that remembers only recent keys, in O(1) per operation.

Two generations of plain dicts: writes go to the young one; when it holds
``capacity // 2`` keys it becomes the old one and the previous old one is dropped
whole. So between ``capacity // 2`` and ``capacity`` of the newest keys are always
remembered, and forgetting costs nothing per key (an ``OrderedDict`` popping its
oldest entry on every insert costs more than the lookups it serves).
"""

from __future__ import annotations

from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class RecentMap(Generic[K, V]):
    __slots__ = ("_half", "_young", "_old")

    def __init__(self, capacity: int) -> None:
        if capacity < 2:
            raise ValueError("capacity must be at least 2")
        self._half = capacity // 2
        self._young: dict[K, V] = {}
        self._old: dict[K, V] = {}

    def __len__(self) -> int:
        return len(self._young) + sum(1 for key in self._old if key not in self._young)

    def __contains__(self, key: K) -> bool:
        return key in self._young or key in self._old

    def get(self, key: K, default: V | None = None) -> V | None:
        value = self._young.get(key)
        if value is None:
            value = self._old.get(key, default)
        return value

    def __setitem__(self, key: K, value: V) -> None:
        young = self._young
        young[key] = value
        if len(young) >= self._half:
            self._old = young
            self._young = {}

    def put_all(self, keys: list[K], values: list[V] | None = None, value: V | None = None) -> None:
        """``self[k] = v`` for each key, in order: with ``values`` pairwise, else ``value``;
        in slices that fill the young dict up to its turn, not one call per key."""
        done, total = 0, len(keys)
        while done < total:
            young = self._young
            end = done + max(1, self._half - len(young))
            if values is None:
                young.update(dict.fromkeys(keys[done:end], value))
            else:
                young.update(zip(keys[done:end], values[done:end]))
            done = end
            if len(young) >= self._half:
                self._old = young
                self._young = {}

    def generations(self) -> tuple[dict[K, V], dict[K, V]]:
        """The two dicts, for lookups in a tight loop (valid until the next write)."""
        return self._young, self._old
