"""bench.py section ``scaling``: each cost at a small and at a large size, and the ratio.

Every row puts the large size in the "ours" column and the small size in the
"baseline" column of the same run, so ``ours/base`` is large / small: below 1 for a
rate that falls, above 1 for a time that grows. Three parts, all through the public
client (``from client import Client``), so they run unchanged against a rebuilt core:

``stages``     a host session registers runs of 4 and of 100 agent stages and
               pipelines ``send_nowait(to="workflow:<run>/s<k>")`` to the pending
               stages: ``queued`` answers per second (sent after the commit). Targets
               rotate over every stage of every run, 50 entries each at most, so with
               the default 5,000 both sizes fill 100 targets (25 runs of 4, one of
               100). Live variant: a stage session connected as
               ``workflow:<run>/s0`` (``kind="stage"``) counts ``receive`` while the
               host sends to that path. Runs are ended after each measurement.
``runs``       one host registers N runs (4 agent stages each) one after another, each
               ``register_run`` timed; mean of the first 100 and of the last 100 calls.
               A second session in the default group, connected throughout, times
               ``list`` after the first 100 runs and after all N (1 s after the last
               ``register_run``, which is answered before its commit).
``departure``  N sessions in the default group, one process holding a quarter of them
               SIGKILLed: how long until the survivors have taken every
               ``session_left``, broker CPU, ``status`` p99 meanwhile and healthy
               sessions expired (:mod:`benchkit.scaling_departure` has the details).

Constants and helpers both modules use are in :mod:`benchkit.scaling_common`.

Roles (``benchkit.roles.ROLES``): ``scaling_host``, ``scaling_register_host``,
``scaling_list_probe`` here, ``scaling_observer`` in :mod:`benchkit.scaling_departure`;
the stage receiver is ``bus_receiver`` with ``stage``. Long-lived roles take JSON
commands on stdin, one a line, and answer each with one event line.
"""

from __future__ import annotations

import json
import os
import statistics
import time

from benchkit.config import Config
from benchkit.live_sections import _drive
from benchkit.procs import Harness, Proc
from benchkit.report import Results, percentiles
from benchkit.role_io import MESSAGE_BYTES, emit, wait_go
from benchkit.scaling_common import NOTE, SETTLE_S, ask, commands, open_session, row
from benchkit.scaling_departure import part_departure

# =====================================================================================
# Roles (child side)
# =====================================================================================


def role_scaling_host(endpoint: str, mode: str, stages: int, count: int, warm: int,
                      window: int, size: int) -> None:
    """Host: register runs of ``stages`` agent stages, pipeline sends to stage paths.

    ``queued``: warm-up and measured sends go to their own runs, rotating over every
    stage of every run (at most 50 entries per target); only ``queued`` answers count.
    ``live``: one run; says ``registered`` (the parent connects a stage session at
    ``s0``), then ``ready``; after ``go`` all sends go to ``workflow:<run>/s0`` and
    only ``delivered`` answers count. Every run is ended afterwards, untimed.
    """
    from collections import deque

    from schemas.limits import QUEUED_PER_TARGET

    session = open_session(f"bench-host-{os.getpid()}", endpoint)
    text = "x" * size
    tag = f"sc{os.getpid()}"
    specs = [{"name": f"s{k}"} for k in range(stages)]
    runs: list[str] = []
    errors: dict[str, int] = {}
    want = "queued" if mode == "queued" else "delivered"

    grants: dict[str, str] = {}

    def register(run_id: str) -> None:
        result = session.register_run(run_id, specs)
        if not result.get("ok"):
            raise RuntimeError(f"register_run {run_id} failed: {result}")
        grants.update(result.get("grants") or {})
        runs.append(run_id)

    def plan(prefix: str, n: int) -> list[str]:
        if mode == "live":
            return [f"workflow:{prefix}/s0"] * n
        ids = [f"{prefix}-{r}" for r in range(-(-n // (stages * QUEUED_PER_TARGET)))]
        for run_id in ids:
            register(run_id)
        targets = [f"workflow:{run_id}/s{k}" for k in range(stages) for run_id in ids]
        return [targets[i % len(targets)] for i in range(n)]

    def tally(result: dict) -> int:
        if result.get("ok") and result.get(want) is True:
            return 1
        code = result.get("code", "?") if not result.get("ok") else f"ok but not {want}"
        errors[code] = errors.get(code, 0) + 1
        return 0

    def pump(dests: list[str]) -> int:
        good = 0
        pending: deque = deque()
        send_nowait = session.send_nowait
        for to in dests:
            if len(pending) >= window:
                good += tally(pending.popleft().result(60))
            pending.append(send_nowait(to, text))
        while pending:
            good += tally(pending.popleft().result(60))
        return good

    try:
        if mode == "live":
            register(tag)
            # The host hands the stage session it launches its grant, as a runtime does.
            emit("registered", run_id=tag, stage=f"workflow:{tag}/s0",
                 grant=grants.get(f"workflow:{tag}/s0"))
            warm_runs = 0
            dests = plan(tag, warm + count)
        else:
            pump(plan(f"{tag}w", warm))
            errors.clear()
            warm_runs = len(runs)
            dests = plan(tag, count)
        emit("ready", pid=os.getpid(), session_id=session.id, runs=len(runs) - warm_runs)
        wait_go()
        cpu0 = time.process_time()
        t0 = time.perf_counter()
        good = pump(dests)
        t1 = time.perf_counter()
        emit("result", sent=len(dests), good=good, rate=good / (t1 - t0),
             send_rate=len(dests) / (t1 - t0), cpu_s=time.process_time() - cpu0,
             errors=errors, runs=len(runs) - warm_runs, targets=len(set(dests)))
        for run_id in runs:
            session.end_run(run_id)
    finally:
        session.close()


def role_scaling_register_host(endpoint: str, stages: int) -> None:
    """``{"cmd": "register", "n": k}``: register k more runs, one after another, timed."""
    session = open_session(f"bench-registrar-{os.getpid()}", endpoint)
    specs = [{"name": f"s{k}"} for k in range(stages)]
    done = 0
    try:
        emit("ready", pid=os.getpid(), session_id=session.id)
        clock = time.perf_counter_ns
        for cmd in commands():
            times_us: list[float] = []
            for _ in range(cmd["n"]):
                run_id = f"reg{os.getpid()}-{done}"
                t = clock()
                result = session.register_run(run_id, specs)
                times_us.append((clock() - t) / 1000.0)
                if not result.get("ok"):
                    raise RuntimeError(f"register_run {run_id} failed: {result}")
                done += 1
            emit("registered", us=times_us, runs=done, groups=len(session.groups))
    finally:
        session.close()


def role_scaling_list_probe(endpoint: str) -> None:
    """``{"cmd": "list", "n": n, "warm": w}``: time ``intercom(action="list")``."""
    session = open_session(f"bench-lister-{os.getpid()}", endpoint)
    try:
        emit("ready", pid=os.getpid(), session_id=session.id)
        clock = time.perf_counter_ns
        for cmd in commands():
            samples = []
            rows = 0
            for i in range(cmd["warm"] + cmd["n"]):
                t = clock()
                result = session.intercom(action="list")
                dt = clock() - t
                if not result.get("ok"):
                    raise RuntimeError(f"list failed: {result}")
                rows = len(result["sessions"])
                if i >= cmd["warm"]:
                    samples.append(dt)
            while session.next_event(0) is not None:     # presence of the host's joins
                pass
            emit("listed", visible=rows, **percentiles(samples))
    finally:
        session.close()


# =====================================================================================
# Parent side
# =====================================================================================


# -- stages -----------------------------------------------------------------------------

def measure_queued(h: Harness, ep, stages: int, cfg: Config) -> dict:
    host = h.spawn_role("scaling_host", endpoint=ep.router, mode="queued", stages=stages,
                        count=cfg.scaling_queued, warm=200, window=cfg.durable_window,
                        size=MESSAGE_BYTES)
    try:
        host.expect("ready", 60)
        host.tell("go")
        return host.expect("result", cfg.run_timeout_s * 2)
    finally:
        h.reap([host], timeout=30)


def measure_live(h: Harness, broker: Proc, ep, stages: int, cfg: Config) -> dict:
    warm = max(1_000, cfg.scaling_live // 10)
    host = h.spawn_role("scaling_host", endpoint=ep.router, mode="live", stages=stages,
                        count=cfg.scaling_live, warm=warm, window=cfg.window,
                        size=MESSAGE_BYTES)
    receiver = None
    try:
        registered = host.expect("registered", 60)
        receiver = h.spawn_role("bus_receiver", endpoint=ep.router, warm=warm,
                                count=cfg.scaling_live, timeout_s=cfg.run_timeout_s,
                                stage=registered["stage"], grant=registered.get("grant"))
        receiver.expect("ready", 30)
    except BaseException:
        h.reap([p for p in (host, receiver) if p is not None], timeout=0)
        raise
    return _drive(h, broker, receiver, [host], cfg.run_timeout_s + 15)


def part_stages(h: Harness, cfg: Config, results: Results) -> None:
    small, large = cfg.scaling_stages
    print(f"scaling/stages: {cfg.scaling_queued:,} queued enqueues and {cfg.scaling_live:,} "
          f"live sends by path, runs of {small} vs {large} agent stages, {cfg.repeats} "
          f"repeat(s)", flush=True)
    broker, ep = h.start_broker()
    queued: dict[int, list[dict]] = {small: [], large: []}
    live: dict[int, list[dict]] = {small: [], large: []}
    try:
        for rep in range(cfg.repeats):
            for stages in (small, large):
                r = measure_queued(h, ep, stages, cfg)
                queued[stages].append(r)
                bad = f"  ANOMALY: {r['errors']}" if r["errors"] else ""
                print(f"  [{rep + 1}] queued, {stages:>3} stages ({r['runs']} runs, "
                      f"{r['targets']} targets)  {r['rate']:>9,.0f} msg/s  "
                      f"({r['good']:,}/{r['sent']:,} queued){bad}", flush=True)
            for stages in (small, large):
                r = measure_live(h, broker, ep, stages, cfg)
                live[stages].append(r)
                snd = r["senders"][0]
                bad = (f"  ANOMALY: {snd['errors']}, complete {r.get('complete')}"
                       if snd["errors"] or not r.get("complete") else "")
                print(f"  [{rep + 1}] live to s0, {stages:>3} stages  "
                      f"{r.get('e2e_rate', 0):>9,.0f} msg/s  ({r['received']:,} received, "
                      f"{snd['good']:,}/{snd['sent']:,} delivered){bad}", flush=True)
    finally:
        h.stop(broker, timeout=30)
    results.extra["scaling_stages"] = {"queued": queued, "live": live}
    row(results, f"queued send to a pending stage, {large} vs {small} stages/run", "msg/s",
        [r["rate"] for r in queued[large]], [r["rate"] for r in queued[small]],
        note=f"{NOTE}; host send_nowait to workflow:<run>/s<k>, 'queued' answers/s")
    row(results, f"live send by path to a stage session, {large} vs {small} stages", "msg/s",
        [r.get("e2e_rate", 0.0) for r in live[large]],
        [r.get("e2e_rate", 0.0) for r in live[small]],
        note="stage session (kind=stage) at workflow:<run>/s0 counts receive; go to last")


# -- runs -------------------------------------------------------------------------------

def part_runs(h: Harness, cfg: Config, results: Results) -> None:
    n, k = cfg.scaling_runs, cfg.scaling_window
    repeats = min(cfg.repeats, 3)
    print(f"scaling/runs: one host registers {n} runs of 4 stages; register_run mean of "
          f"calls 1-{k} and {n - k + 1}-{n}; list from the default group after {k} and "
          f"{n} runs; {repeats} repeat(s), fresh broker each", flush=True)
    first: list[float] = []
    last: list[float] = []
    lists: dict[str, list[dict]] = {"small": [], "large": []}
    list_n, list_warm = (300, 50) if cfg.quick else (1_000, 100)
    for rep in range(repeats):
        broker, ep = h.start_broker()
        lister = h.spawn_role("scaling_list_probe", endpoint=ep.router)
        host = h.spawn_role("scaling_register_host", endpoint=ep.router, stages=4)
        try:
            lister.expect("ready", 30)
            host.expect("ready", 30)
            a = ask(host, "registered", 120, cmd="register", n=k)
            time.sleep(SETTLE_S)
            small = ask(lister, "listed", 120, cmd="list", n=list_n, warm=list_warm)
            b = ask(host, "registered", 300, cmd="register", n=n - k)
            time.sleep(SETTLE_S)
            large = ask(lister, "listed", 120, cmd="list", n=list_n, warm=list_warm)
            times = a["us"] + b["us"]
            for p in (host, lister):
                p.tell(json.dumps({"cmd": "stop"}))
            h.reap([host, lister], timeout=10)
        finally:
            h.reap([host, lister], timeout=0)
            h.stop(broker, timeout=30)
        first.append(statistics.fmean(times[:k]))
        last.append(statistics.fmean(times[-k:]))
        lists["small"].append(small)
        lists["large"].append(large)
        print(f"  [{rep + 1}] register_run mean {first[-1]:,.0f} us (1-{k}) -> {last[-1]:,.0f} us "
              f"({n - k + 1}-{n}), host in {b['groups']} groups; list p50 {small['p50_us']:,.0f}"
              f" -> {large['p50_us']:,.0f} us, p99 {small['p99_us']:,.0f} -> "
              f"{large['p99_us']:,.0f} us ({large['visible']} visible)", flush=True)
    results.extra["scaling_runs"] = {"first_us": first, "last_us": last, "list": lists}
    row(results, f"register_run, mean of last {k} vs first {k} of {n}", "us", last, first,
        note=f"{NOTE}; one host, blocking calls, 4 agent stages per run")
    for q in ("p50", "p99"):
        row(results, f"list {q}, default-group session, {n} vs {k} runs hosted", "us",
            [r[f"{q}_us"] for r in lists["large"]], [r[f"{q}_us"] for r in lists["small"]],
            note="another session, connected throughout, in the default group with the host"
            if q == "p50" else "")


def section_scaling(h: Harness, cfg: Config, results: Results) -> None:
    part_stages(h, cfg, results)
    part_runs(h, cfg, results)
    part_departure(h, cfg, results)
