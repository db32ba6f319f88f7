"""bench.py section ``scaling``, part ``departure``: a mass departure at a small and at
a large size (rows as in :mod:`benchkit.scaling`: large size "ours", small size
"baseline"), through the public client (``from client import Client``).

``departure``  N sessions in the default group, held by ``load_sessions.py`` worker
               processes (:mod:`benchkit.load_worker`; at most 250 sessions each, at
               least 3 survivors) plus one holding a quarter of them; an observer
               process holds a :class:`~benchkit.load_observers.Watcher` session and a
               probe (:class:`~benchkit.load_observers.Prober` calls ``status`` during
               the expiry). After the connect storm has been delivered, the quarter's
               process is SIGKILLed (if it is not delivered within 60 s, or sessions
               are missing, there is no kill: the storm is reported, the rest is nan).
               Reported: time until the surviving sessions have taken
               (``next_event``) every ``session_left`` (sum of the workers' counts
               reaches departed x survivors), the same time after the first departure
               per departed x watching session, broker CPU per departed x watching
               session (idle CPU rate subtracted, schedstat), the probe's ``status``
               p99 meanwhile, and healthy sessions the broker expired (a
               ``session_left`` for a session nobody killed, seen by the watcher; the
               probe's ``list`` afterwards is checked too).

Role (``benchkit.roles.ROLES``): ``scaling_observer``, a long-lived role that takes
JSON commands on stdin, one a line, and answers each with one event line. The worker
processes are ``load_sessions.py --role worker``.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from typing import Any

from benchkit import LOAD_SCRIPT
from benchkit.config import Config, split_evenly
from benchkit.procs import Harness, Proc, RoleError, proc_run_s
from benchkit.report import Results, pct
from benchkit.role_io import emit
from benchkit.scaling_common import LIVENESS_S, NOTE, SETTLE_S, ask, commands, open_session, row

# =====================================================================================
# Role (child side)
# =====================================================================================


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

    watch = open_session("bench-watcher", endpoint)
    probe = open_session("bench-probe", endpoint)
    watcher = Watcher(watch)
    watcher.start()
    try:
        emit("ready", pid=os.getpid(), ids=[watch.id, probe.id])
        for cmd in commands():
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
                marked = ask(observer, "marked", 30, cmd="mark")
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
        marked = ask(observer, "marked", 30, cmd="mark")
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
        since = ask(observer, "since", 30, cmd="since", mark=marked["mark"], prefix=prefix)
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
    row(results, f"departure: all survivors saw every session_left, {what}", "ms",
        *pair(lambda r: r["all_s"] * 1e3),
        note=f"{NOTE}; from SIGKILL of the process holding a quarter (liveness "
             f"{LIVENESS_S:g} s included) until the survivors' next_event counts are "
             f"complete{fail_note}")
    row(results, f"departure: after 1st session_left, per departed x watcher, {what}",
        "us/pair", *pair(lambda r: r["after_first_us_per_pair"]),
        note="(all seen - first departure seen by the watcher) / (departed x watching "
             "sessions); the heartbeat phases spread the expiry over up to ~1 s")
    row(results, f"departure: broker CPU per departed x watcher, {what}", "us/pair",
        *pair(lambda r: r["cpu_us_per_pair"]),
        note="broker CPU (schedstat) from SIGKILL to all seen, idle rate subtracted")
    row(results, f"departure: status p99 during the expiry, {what}", "ms",
        *pair(lambda r: r["status"]["status_p99_ms"]),
        note="the observer's probe calls status every 50 ms from SIGKILL to all departures "
             "seen (a healthy session must be heard within the liveness)")
    visible = ", ".join(f"{n}: {runs[n]['visible_after']}/{runs[n]['visible_want']}"
                        for n in (large, small) if "visible_after" in runs.get(n, {}))
    row(results, f"departure: healthy sessions expired, {what}", "sessions",
        *pair(lambda r: r["healthy_expired"]),
        note=f"session_left for a session nobody killed (connect storm or expiry); "
             f"survivors visible in list afterwards {visible}")
    row(results, f"departure: connect + joins delivered, {what}", "ms",
        *pair(lambda r: r["caught_up_s"] * 1e3),
        note="go to the workers until every session_joined was taken (the join storm)")
    if failed:
        raise RoleError(f"departure failed at {', '.join(map(str, failed))} sessions")


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"
