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
``departure``  N sessions in the default group, held by ``load_sessions.py`` worker
               processes (:mod:`benchkit.load_worker`; at most 250 sessions each, at
               least 3 survivors) plus one holding a quarter of them; an observer
               process holds a :class:`~benchkit.load_observers.Watcher` session and a
               probe (:class:`~benchkit.load_observers.Prober` calls ``status`` during
               the expiry). After the connect storm has been delivered, the quarter's
               process is SIGKILLed (if it is not delivered within 60 s, or sessions
               are missing, there is no kill: the storm is reported, the rest is nan). Reported: time until the surviving sessions have
               taken (``next_event``) every ``session_left`` (sum of the workers'
               counts reaches departed x survivors), the same time after the first
               departure per departed x watching session, broker CPU per departed x
               watching session (idle CPU rate subtracted, schedstat), the probe's
               ``status`` p99 meanwhile, and healthy sessions the broker expired (a ``session_left`` for a session nobody killed, seen by
               the watcher; the probe's ``list`` afterwards is checked too).

Roles (``benchkit.roles.ROLES``): ``scaling_host``, ``scaling_register_host``,
``scaling_list_probe``, ``scaling_observer``; the stage receiver is ``bus_receiver``
with ``stage``. Long-lived roles take JSON commands on stdin, one a line, and answer
each with one event line.
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import sys
import time
from typing import Any, Iterator

from benchkit import LOAD_SCRIPT
from benchkit.config import Config, split_evenly
from benchkit.live_sections import _drive
from benchkit.procs import Harness, Proc, RoleError, proc_run_s
from benchkit.report import Results, Row, pct, percentiles
from benchkit.role_io import MESSAGE_BYTES, emit, wait_go

LIVENESS_S = 3.0          # schemas.limits.LIVENESS_S, the client's promise
# register_run is answered before its row is committed: let the store catch up
# before timing list, so the figure is about the runs hosted, not the commits.
SETTLE_S = 1.0
NOTE = "ours = large size, baseline = small size of the same run; ratio = large / small"

# =====================================================================================
# Roles (child side)
# =====================================================================================


def _commands() -> Iterator[dict]:
    """JSON commands on stdin, one a line, until EOF or ``{"cmd": "stop"}``."""
    for line in sys.stdin:
        if not line.strip():
            continue
        cmd = json.loads(line)
        if cmd.get("cmd") == "stop":
            return
        yield cmd


def _session(name: str, endpoint: str, **kwargs: Any):
    from client import Client

    return Client.connect(name=name, endpoint=endpoint, timeout=20, **kwargs)


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

    session = _session(f"bench-host-{os.getpid()}", endpoint)
    text = "x" * size
    tag = f"sc{os.getpid()}"
    specs = [{"name": f"s{k}"} for k in range(stages)]
    runs: list[str] = []
    errors: dict[str, int] = {}
    want = "queued" if mode == "queued" else "delivered"

    def register(run_id: str) -> None:
        result = session.register_run(run_id, specs)
        if not result.get("ok"):
            raise RuntimeError(f"register_run {run_id} failed: {result}")
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
            emit("registered", run_id=tag, stage=f"workflow:{tag}/s0")
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
    session = _session(f"bench-registrar-{os.getpid()}", endpoint)
    specs = [{"name": f"s{k}"} for k in range(stages)]
    done = 0
    try:
        emit("ready", pid=os.getpid(), session_id=session.id)
        clock = time.perf_counter_ns
        for cmd in _commands():
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
    session = _session(f"bench-lister-{os.getpid()}", endpoint)
    try:
        emit("ready", pid=os.getpid(), session_id=session.id)
        clock = time.perf_counter_ns
        for cmd in _commands():
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


def role_scaling_observer(endpoint: str) -> None:
    """A watcher session (presence log with arrival times) and a probe, default group.

    ``{"cmd": "mark"}`` -> ``marked``: the log position and every ``session_left``
    so far. ``{"cmd": "wait_lefts", "mark", "prefix", "n", "timeout"}`` -> ``lefts``:
    waits (the probe calling ``status`` meanwhile) for ``n`` departures of sessions
    named ``prefix...`` after ``mark``; their first and last arrival times
    (CLOCK_MONOTONIC, as the parent's). ``{"cmd": "since", "mark", "prefix"}`` ->
    ``since``: departures of sessions not so named after ``mark``, joins after it,
    and the probe's ``list`` count now.
    """
    from benchkit.load_observers import Prober, Watcher

    watch = _session("bench-watcher", endpoint)
    probe = _session("bench-probe", endpoint)
    watcher = Watcher(watch)
    watcher.start()
    try:
        emit("ready", pid=os.getpid(), ids=[watch.id, probe.id])
        for cmd in _commands():
            if cmd["cmd"] == "mark":
                evs = watcher.snapshot()
                emit("marked", mark=len(evs),
                     lefts=[name for _, e, name, _ in evs if e == "session_left"],
                     joins=sum(1 for _, e, _, _ in evs if e == "session_joined"))
                continue
            prefix, mark = cmd["prefix"], cmd["mark"]
            if cmd["cmd"] == "since":
                evs = watcher.snapshot(mark)
                listed = probe.intercom(action="list")
                emit("since", others=[name for _, e, name, _ in evs
                                      if e == "session_left" and not name.startswith(prefix)],
                     joins=[name for _, e, name, _ in evs if e == "session_joined"],
                     visible=len(listed["sessions"]) if listed.get("ok") else None)
                continue

            def victims(evs):
                return [t for t, e, name, _ in evs
                        if e == "session_left" and name.startswith(prefix)]

            with Prober(probe) as prober:
                ok = watcher.wait_for(lambda evs: len(victims(evs)) >= cmd["n"],
                                      cmd["timeout"], mark)
            seen = victims(watcher.snapshot(mark))
            emit("lefts", ok=bool(ok), seen=len(seen),
                 first=min(seen, default=None), last=max(seen, default=None),
                 status_p50_ms=pct(prober.times, 50) * 1e3,
                 status_p99_ms=pct(prober.times, 99) * 1e3,
                 status_max_ms=max(prober.times, default=float("nan")) * 1e3,
                 status_calls=len(prober.times), status_bad=prober.bad)
    finally:
        watcher.halt.set()
        watcher.join(2)
        for s in (probe, watch):
            s.close()


# =====================================================================================
# Parent side
# =====================================================================================


def _ask(proc: Proc, event: str, timeout: float, **cmd: Any) -> dict:
    """Send one command line to a long-lived role and wait for its answer."""
    proc.tell(json.dumps(cmd))
    return proc.expect(event, timeout)


def _row(results: Results, label: str, unit: str, large: list[float], small: list[float],
         note: str = "") -> None:
    results.add(Row("scaling", label, unit, large, small, note=note))


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
        stage = host.expect("registered", 60)["stage"]
        receiver = h.spawn_role("bus_receiver", endpoint=ep.router, warm=warm,
                                count=cfg.scaling_live, timeout_s=cfg.run_timeout_s,
                                stage=stage)
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
    _row(results, f"queued send to a pending stage, {large} vs {small} stages/run", "msg/s",
         [r["rate"] for r in queued[large]], [r["rate"] for r in queued[small]],
         note=f"{NOTE}; host send_nowait to workflow:<run>/s<k>, 'queued' answers/s")
    _row(results, f"live send by path to a stage session, {large} vs {small} stages", "msg/s",
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
            a = _ask(host, "registered", 120, cmd="register", n=k)
            time.sleep(SETTLE_S)
            small = _ask(lister, "listed", 120, cmd="list", n=list_n, warm=list_warm)
            b = _ask(host, "registered", 300, cmd="register", n=n - k)
            time.sleep(SETTLE_S)
            large = _ask(lister, "listed", 120, cmd="list", n=list_n, warm=list_warm)
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
    _row(results, f"register_run, mean of last {k} vs first {k} of {n}", "us", last, first,
         note=f"{NOTE}; one host, blocking calls, 4 agent stages per run")
    for q in ("p50", "p99"):
        _row(results, f"list {q}, default-group session, {n} vs {k} runs hosted", "us",
             [r[f"{q}_us"] for r in lists["large"]], [r[f"{q}_us"] for r in lists["small"]],
             note="another session, connected throughout, in the default group with the host"
             if q == "p50" else "")


# -- departure --------------------------------------------------------------------------

def _spawn_worker(h: Harness, index: int, count: int, endpoint: str, phase_s: float) -> Proc:
    """A load_sessions.py worker (benchkit.load_worker) holding ``count`` sessions."""
    args = {"index": index, "count": count, "endpoint": endpoint, "connect_timeout": 30.0,
            "phase_timeout": phase_s, "lifetime": phase_s + 600}
    return h.spawn(f"worker{index}", [sys.executable, str(LOAD_SCRIPT), "--role", "worker",
                                      "--role-args", json.dumps(args)])


def _counts(workers: list[Proc], event: str) -> tuple[int, int]:
    """Sum over ``workers`` of presence events ``event`` taken so far, and of sessions
    not connected."""
    for w in workers:
        w.tell(json.dumps({"cmd": "counts"}))
    got = [w.expect("counts", 120) for w in workers]   # slow when the box is busy
    return (sum(c["events"].get(event, 0) for c in got),
            sum(c["disconnected"] for c in got))


def _wait_counts(workers: list[Proc], event: str, want: int, timeout: float,
                 step: float = 0.05) -> tuple[int, float, bool]:
    """Poll until the workers have taken ``want`` ``event`` s: (count, when, reached)."""
    deadline = time.monotonic() + timeout
    while True:
        n, _ = _counts(workers, event)
        now = time.monotonic()
        if n >= want or now > deadline:
            return n, now, n >= want
        time.sleep(step)


def measure_departure(h: Harness, cfg: Config, n: int) -> dict:
    n_victim = n // 4
    n_survivors = n - n_victim
    procs = max(3, -(-n_survivors // cfg.scaling_per_worker))
    shares = split_evenly(n_survivors, procs) + [n_victim]
    phase_s = max(60.0, n * 0.1)      # connect phase; 1000 take 15-40 s here
    broker, ep = h.start_broker()
    observer = h.spawn_role("scaling_observer", endpoint=ep.router)
    workers: list[Proc] = []
    out: dict[str, Any] = {"n": n, "shares": shares, "anomalies": []}
    step = "start"
    try:
        observer.expect("ready", 30)
        for i, share in enumerate(shares):
            workers.append(_spawn_worker(h, i, share, ep.router, phase_s))
        for w in workers:
            w.check = lambda: broker.popen.poll() is None or _gone(broker)
            w.expect("started", 60)
        step = "connect"
        t0 = time.monotonic()
        for w in workers:
            w.tell(json.dumps({"cmd": "go"}))
        connected = []
        for w in workers:
            try:
                # A connect already started may take its own 30 s after the deadline.
                connected.append(w.expect("connected", max(1.0, t0 + phase_s + 45
                                                           - time.monotonic())))
            except RoleError:
                if w.popen.poll() is not None:
                    raise                    # the worker died: a failure, not a result
                marked = _ask(observer, "marked", 30, cmd="mark")
                expired = {nm for nm in marked["lefts"] if not nm.startswith("bench-")}
                out["collapsed"] = (f"{len(connected)}/{len(workers)} workers done "
                                    f"connecting {time.monotonic() - t0:.0f} s after go, "
                                    f"{len(expired)} sessions expired meanwhile")
                out["healthy_expired"] = len(expired)
                out["anomalies"].append(f"connect storm did not settle: {out['collapsed']}; "
                                        f"no kill")
                return out
        out["connect_s"] = time.monotonic() - t0
        held = [c["n"] for c in connected]
        for i, c in enumerate(connected):
            if c["n_errors"]:
                out["anomalies"].append(f"worker{i}: {c['n_errors']} connect failures, "
                                        f"e.g. {c['errors'][:2]}")
        # The connect storm must be delivered before the kill: each session takes a
        # session_joined for every session that connected after it.
        step = "join catch-up"
        total = sum(held)
        joins, t_joined, ok = _wait_counts(workers, "session_joined",
                                           total * (total - 1) // 2, 60)
        out["caught_up_s"] = t_joined - t0
        marked = _ask(observer, "marked", 30, cmd="mark")
        out["expired_before"] = [nm for nm in marked["lefts"] if not nm.startswith("bench-")]
        if not ok or total < n:
            # Sessions expiring and coming back during the storm: a kill now would
            # measure that, not the departure. Report the storm and stop here.
            out["collapsed"] = (f"{total}/{n} connected in {out['connect_s']:.1f} s, "
                                f"{joins:,}/{total * (total - 1) // 2:,} session_joined "
                                f"taken {out['caught_up_s']:.1f} s after go, "
                                f"{len(set(out['expired_before']))} sessions expired")
            out["healthy_expired"] = len(set(out["expired_before"]))
            out["anomalies"].append(f"connect storm did not settle: {out['collapsed']}; "
                                    f"no kill")
            return out
        step = "kill"
        survivors, victim = workers[:-1], workers[-1]
        n_victim, n_survivors = held[-1], sum(held[:-1])
        c0, t = proc_run_s(broker.pid), time.monotonic()
        time.sleep(1.0)
        idle_rate = (proc_run_s(broker.pid) - c0) / (time.monotonic() - t)
        left0, _ = _counts(survivors, "session_left")
        joined0, _ = _counts(survivors, "session_joined")
        prefix = f"w{len(workers) - 1}-"
        budget = LIVENESS_S + 30 + n * 0.02
        observer.tell(json.dumps({"cmd": "wait_lefts", "mark": marked["mark"],
                                  "prefix": prefix, "n": n_victim, "timeout": budget}))
        cpu_kill = proc_run_s(broker.pid)
        t_kill = time.monotonic()
        os.kill(victim.pid, signal.SIGKILL)
        want = n_victim * n_survivors
        left1, t_all, ok = _wait_counts(survivors, "session_left", left0 + want, budget)
        cpu_all = proc_run_s(broker.pid)
        seen = observer.expect("lefts", budget + 30)
        rc = victim.stop(signal.SIGKILL, 5)
        h.stop(victim)
        step = "after the kill"
        # Healthy sessions the storm got expired come back (and leave again) late.
        time.sleep(SETTLE_S)
        left2, _ = _counts(survivors, "session_left")
        joined1, disconnected = _counts(survivors, "session_joined")
        since = _ask(observer, "since", 30, cmd="since", mark=marked["mark"], prefix=prefix)
        watchers = n_survivors + 2                    # + the observer's watcher and probe
        pairs = n_victim * watchers
        out.update(
            victims=n_victim, survivors=n_survivors, victim_rc=rc, reached=ok,
            lefts_taken=left1 - left0, lefts_wanted=want, lefts_extra=left2 - left0 - want,
            all_s=t_all - t_kill,
            first_s=(seen["first"] - t_kill) if seen["first"] is not None else None,
            last_s=(seen["last"] - t_kill) if seen["last"] is not None else None,
            watcher_seen=seen["seen"], pairs=pairs, idle_cpu_rate=idle_rate,
            broker_cpu_s=cpu_all - cpu_kill,
            cpu_us_per_pair=max(0.0, cpu_all - cpu_kill - idle_rate * (t_all - t_kill))
            / pairs * 1e6,
            expired_after=since["others"], rejoined_after=joined1 - joined0,
            disconnected=disconnected, visible_after=since["visible"],
            visible_want=n_survivors + 1, status=seen)
        if seen["first"] is not None:
            out["after_first_us_per_pair"] = (t_all - seen["first"]) / pairs * 1e6
        healthy = set(out["expired_before"]) | set(since["others"])
        out["healthy_expired"] = len(healthy)
        if not ok:
            out["anomalies"].append(f"survivors took {left1 - left0:,}/{want:,} session_left "
                                    f"within {budget:g} s")
        if seen["seen"] != n_victim:
            out["anomalies"].append(f"watcher saw {seen['seen']}/{n_victim} departures")
        if healthy:
            out["anomalies"].append(f"{len(healthy)} healthy sessions expired (the times "
                                    f"above count their departures too), e.g. "
                                    f"{sorted(healthy)[:3]}")
        if out["rejoined_after"] or out["lefts_extra"] > 0 or disconnected:
            out["anomalies"].append(f"after the kill survivors took {out['lefts_extra']} "
                                    f"session_left beyond the departed and "
                                    f"{out['rejoined_after']} session_joined; {disconnected} "
                                    f"not connected")
        if since["visible"] != n_survivors + 1:
            out["anomalies"].append(f"list afterwards: {since['visible']} visible, expected "
                                    f"{n_survivors + 1}")
        if rc != -signal.SIGKILL:
            out["anomalies"].append(f"killed worker exit status {rc}")
        return out
    except RoleError as exc:
        raise RoleError(f"{step}: {exc}") from exc
    finally:
        for w in workers:
            w.check = None
        h.reap(workers, timeout=0)            # SIGTERM: no bye, nobody left to tell
        observer.tell(json.dumps({"cmd": "stop"}))
        h.reap([observer], timeout=10)
        h.stop(broker, timeout=30)


def _gone(broker: Proc) -> bool:
    raise RoleError(f"broker (pid {broker.pid}) exited with {broker.popen.returncode}"
                    f"{broker.tail_note()}")


def part_departure(h: Harness, cfg: Config, results: Results) -> None:
    small, large = cfg.scaling_sessions
    print(f"scaling/departure: {small} vs {large} sessions in the default group, the process "
          f"holding a quarter SIGKILLed; 1 run each, fresh broker each", flush=True)
    runs: dict[int, dict] = {}
    failed: dict[int, str] = {}
    for n in (small, large):
        try:
            r = runs[n] = measure_departure(h, cfg, n)
        except RoleError as exc:       # a size that cannot be run is a result too
            failed[n] = str(exc).split("\n", 1)[0]
            print(f"  {n} sessions: FAILED: {exc}", flush=True)
            continue
        if "collapsed" in r:
            print(f"  {n} sessions {r['shares']}: ANOMALY: {'; '.join(r['anomalies'])}",
                  flush=True)
            continue
        st = r["status"]
        print(f"  {n} sessions {r['shares']}: connected in {r['connect_s']:.1f} s, joins "
              f"delivered by {r['caught_up_s']:.1f} s; SIGKILL {r['victims']}: watcher saw "
              f"departures {_s(r['first_s'])}-{_s(r['last_s'])} s, survivors took "
              f"{r['lefts_taken']:,}/{r['lefts_wanted']:,} session_left by "
              f"{r['all_s']:.2f} s; broker CPU {r['broker_cpu_s']:.2f} s "
              f"(idle {r['idle_cpu_rate'] * 100:.0f}%); status p50 {st['status_p50_ms']:.1f}"
              f" p99 {st['status_p99_ms']:.1f} max {st['status_max_ms']:.1f} ms; list after "
              f"{r['visible_after']}/{r['visible_want']}; healthy expired "
              f"{r['healthy_expired']}" + (f"  ANOMALY: {'; '.join(r['anomalies'])}"
                                            if r["anomalies"] else ""), flush=True)
    results.extra["scaling_departure"] = {"runs": runs, "failed": failed}

    def pair(get) -> tuple[list[float], list[float]]:
        """[large], [small]; nan for a size that failed."""
        def one(n: int) -> float:
            try:
                return float(get(runs[n]))
            except (KeyError, TypeError):
                return float("nan")
        return [one(large)], [one(small)]

    what = f"{large} vs {small} sessions"
    fail_note = "".join(f"; {n} sessions FAILED: {text}" for n, text in failed.items())
    fail_note += "".join(f"; {n} sessions: connect storm did not settle ({r['collapsed']}), "
                         f"no kill" for n, r in runs.items() if "collapsed" in r)
    fail_note += "".join(f"; {n} sessions: NOT all seen, {r['lefts_taken']:,}/"
                         f"{r['lefts_wanted']:,} when the wait ended"
                         for n, r in runs.items() if "collapsed" not in r and not r["reached"])
    _row(results, f"departure: all survivors saw every session_left, {what}", "ms",
         *pair(lambda r: r["all_s"] * 1e3),
         note=f"{NOTE}; from SIGKILL of the process holding a quarter (liveness "
              f"{LIVENESS_S:g} s included) until the survivors' next_event counts are "
              f"complete{fail_note}")
    _row(results, f"departure: after 1st session_left, per departed x watcher, {what}",
         "us/pair", *pair(lambda r: r["after_first_us_per_pair"]),
         note="(all seen - first departure seen by the watcher) / (departed x watching "
              "sessions); the heartbeat phases spread the expiry over up to ~1 s")
    _row(results, f"departure: broker CPU per departed x watcher, {what}", "us/pair",
         *pair(lambda r: r["cpu_us_per_pair"]),
         note="broker CPU (schedstat) from SIGKILL to all seen, idle rate subtracted")
    _row(results, f"departure: status p99 during the expiry, {what}", "ms",
         *pair(lambda r: r["status"]["status_p99_ms"]),
         note="the observer's probe calls status every 50 ms from SIGKILL to all departures "
              "seen (a healthy session must be heard within the liveness)")
    visible = ", ".join(f"{n}: {runs[n]['visible_after']}/{runs[n]['visible_want']}"
                        for n in (large, small) if "visible_after" in runs.get(n, {}))
    _row(results, f"departure: healthy sessions expired, {what}", "sessions",
         *pair(lambda r: r["healthy_expired"]),
         note=f"session_left for a session nobody killed (connect storm or expiry); "
              f"survivors visible in list afterwards {visible}")
    _row(results, f"departure: connect + joins delivered, {what}", "ms",
         *pair(lambda r: r["caught_up_s"] * 1e3),
         note="go to the workers until every session_joined was taken (the join storm)")
    if failed:
        raise RoleError(f"departure failed at {', '.join(map(str, failed))} sessions")


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def section_scaling(h: Harness, cfg: Config, results: Results) -> None:
    part_stages(h, cfg, results)
    part_runs(h, cfg, results)
    part_departure(h, cfg, results)
