"""The shell gives memory back after a burst (broker.memory_trim): once, when a burst
came in and the last second was calm; never for heartbeats alone. And a refusal never
quotes a huge value back."""

from __future__ import annotations

from broker.memory_trim import BURST_BYTES, CALM_BYTES, CHECK_S, MemoryTrim
from schemas.errors import QUOTED_CHARS_MAX, BusError


def trimmer() -> tuple[MemoryTrim, list[int]]:
    calls: list[int] = []
    return MemoryTrim(trim=lambda: calls.append(1)), calls


def test_a_burst_then_a_calm_second_trims_once():
    trim, calls = trimmer()
    received, now = 0, 0.0
    trim.round(received, now)
    for _ in range(3):                       # the burst: seconds with much coming in
        received += BURST_BYTES
        now += CHECK_S
        trim.round(received, now)
    assert calls == []
    now += CHECK_S
    trim.round(received + 10, now)           # calm: heartbeats only
    assert calls == [1]
    for _ in range(5):                       # calm goes on: nothing more to give back
        now += CHECK_S
        trim.round(received + 10, now)
    assert calls == [1]


def test_a_calm_stream_trims_once_per_burst_worth_and_checks_wait_their_second():
    trim, calls = trimmer()
    received, now = 0, 0.0
    for _ in range(100):                     # heartbeats of many sessions, say
        received += CALM_BYTES // 4
        now += CHECK_S
        trim.round(received, now)
    assert len(calls) == received // BURST_BYTES == 3
    trim.round(received + BURST_BYTES, now + CHECK_S / 2)   # not a second yet: not looked at
    assert len(calls) == 3


def test_a_refusal_quotes_a_long_value_cut():
    text = str(BusError("invalid_path", to="x" * 250_000, detail="bad"))
    assert len(text) < QUOTED_CHARS_MAX + 200 and "…" in text
