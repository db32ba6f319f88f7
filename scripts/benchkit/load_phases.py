"""load_sessions.py phases, run in this order against one :class:`~benchkit.load_run.Run`.

``phase_connect``   workers open their shares of the N sessions; connect rate and
                    latency, and when the watcher had every ``session_joined``
``phase_latency``   p50/p99 of ``list`` and ``status`` from the probe, all N connected
``phase_fanout``    the probe sends one message to each of 100 random worker sessions
``phase_presence``  the last worker is SIGKILLed: one ``session_left`` per session of it
``phase_close``     the workers close their sessions; the watcher must see them leave

Each phase adds rows (``run.row``), records problems (``run.problem``) and samples
the broker's /proc stats (``run.sample``).
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import time
import uuid

from benchkit.load_observers import Prober
from benchkit.load_run import Run
from benchkit.load_worker import FANOUT_MARK
from benchkit.report import pct


def phase_connect(run: Run) -> None:
    for i, share in enumerate(run.shares):
        run.spawn_worker(i, share)
    for w in run.workers:
        w.expect("started", 60)
    mark = run.watcher.mark()
    prober = Prober(run.probe).__enter__()
    t0 = time.monotonic()
    for w in run.workers:
        w.send(cmd="go")
    latencies: list[float] = []
    t_last = t0
    for i, w in enumerate(run.workers):
        res = w.expect("connected", run.connect_timeout + 30)
        t_last = max(t_last, time.monotonic())
        run.connected[i] = res["n"]
        latencies += res["latencies"]
        if res["n_errors"]:
            run.problem(f"worker{i}: {res['n_errors']} connect failures, e.g. {res['errors'][:3]}")
    total = time.monotonic() - t0
    n_ok = sum(run.connected.values())
    run.row("sessions connected", f"{n_ok}/{run.n} (+ watcher, probe)")
    run.row("connect: total time", f"{total:.2f} s  ({n_ok / total:.0f} connects/s, "
                                   f"{run.p} workers in parallel)")
    run.row("connect: per-connect latency",
            f"p50 {pct(latencies, 50) * 1e3:.1f} ms  p99 {pct(latencies, 99) * 1e3:.1f} ms  "
            f"max {max(latencies, default=float('nan')) * 1e3:.1f} ms")
    if n_ok != run.n:
        run.problem(f"only {n_ok} of {run.n} sessions connected")

    # Presence catch-up: the watcher must see every worker session join.
    for w in run.workers:
        w.send(cmd="ids")
    for w in run.workers:
        for name, sid in w.expect("ids", 30)["ids"]:
            run.ids[sid] = name

    def all_joined(evs):
        return {sid for _, e, _, sid in evs if e == "session_joined"} >= set(run.ids)

    ok = run.watcher.wait_for(all_joined, 60, mark)
    prober.__exit__()
    evs = run.watcher.snapshot(mark)
    joins = [t for t, e, _, sid in evs if e == "session_joined" and sid in run.ids]
    if ok and joins:
        run.row("presence: watcher saw all joins",
                f"{max(joins) - t0:.2f} s after go ({max(0.0, max(joins) - t_last):.2f} s "
                f"after the last worker finished)")
    else:
        run.problem(f"watcher saw {len(set(joins))} of {len(run.ids)} session_joined in 60 s")
    run.row("status latency during connect storm", prober.summary())
    if prober.bad:
        run.problem(f"{prober.bad} status calls failed during the connect storm")
    st = run.sample(f"{n_ok} connected")
    run.broker_cpu_connect = st.get("cpu_s", 0.0) - run.rss[0][1].get("cpu_s", 0.0)
    run.row("broker CPU during connect phase", f"{run.broker_cpu_connect:.2f} s")
    rss_per_session(run, st, n_ok, "just connected")
    if run.args.idle_s > 0:
        # Idle memory is the measurement: a connection's libzmq state grows with the
        # traffic it has carried (heartbeats included), so it is read again later.
        time.sleep(run.args.idle_s)
        run.alive()
        rss_per_session(run, run.sample(f"{n_ok} idle {run.args.idle_s:g} s"), n_ok,
                        f"after {run.args.idle_s:g} s idle")


def rss_per_session(run: Run, st: dict, n: int, when: str) -> None:
    """The broker's resident memory per connected session, over what it held before
    the sessions connected (goal of issue 20: at most 20 KiB at 1,000 idle)."""
    base = run.rss[0][1].get("VmRSS")
    if base is None or "VmRSS" not in st or not n:
        return
    run.row(f"broker RSS per session, {when}",
            f"{(st['VmRSS'] - base) * 1024 / n:.1f} KiB ({st['VmRSS']:.1f} MiB for {n} "
            f"sessions, {base:.1f} MiB before)")


def phase_latency(run: Run) -> None:
    calls = run.args.calls
    expected_visible = sum(run.connected.values()) + 1        # workers' + watcher
    for action in ("list", "status"):
        for _ in range(max(10, calls // 10)):            # warm-up
            run.alive()
            run.probe.intercom(action=action)
        times: list[float] = []
        bad: list[dict] = []
        size = None
        for _ in range(calls):
            run.alive()
            t = time.perf_counter()
            res = run.probe.intercom(action=action)
            times.append(time.perf_counter() - t)
            if not res.get("ok"):
                bad.append(res)
            elif action == "list":
                size = len(res.get("sessions", []))
            else:
                size = res.get("visibleSessions")
        what = "rows" if action == "list" else "visibleSessions"
        run.row(f"{action}: latency ({calls} calls)",
                f"p50 {pct(times, 50) * 1e3:.2f} ms  p99 {pct(times, 99) * 1e3:.2f} ms  "
                f"max {max(times) * 1e3:.2f} ms  [{what}={size}]")
        if bad:
            run.problem(f"{action}: {len(bad)} failed calls, e.g. {bad[0]}")
        if size != expected_visible:
            run.problem(f"{action}: {what}={size}, expected {expected_visible}")


def phase_fanout(run: Run) -> None:
    k = min(run.args.fanout, len(run.ids))
    rng = random.Random(run.args.seed)
    targets = rng.sample(sorted(run.ids), k)
    mark = FANOUT_MARK + uuid.uuid4().hex[:8]
    send_times: list[float] = []
    send_bad: list[dict] = []
    t0 = time.monotonic()
    for j, sid in enumerate(targets):
        run.alive()
        t = time.perf_counter()
        res = run.probe.intercom(action="send", to=sid, message=f"{mark} #{j}")
        send_times.append(time.perf_counter() - t)
        if not (res.get("ok") and res.get("delivered", True)):
            send_bad.append(res)
    t_sent = time.monotonic()
    target_set = set(targets)
    deadline = time.monotonic() + 20
    while True:
        counts = run.poll_counts(run.workers, 10)
        got: dict[str, int] = {}
        for c in counts:
            got.update(c["fanout"])
        received = sum(1 for sid in targets if got.get(sid, 0) >= 1)
        if received == k or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    t_done = time.monotonic()
    dupes = sum(max(0, got.get(sid, 0) - 1) for sid in targets)
    stray = sum(n for sid, n in got.items() if sid not in target_set)
    run.row(f"fan-out: 1 sender -> {k} random sessions",
            f"{received}/{k} received, {dupes} duplicates, {stray} misdirected; "
            f"sends {t_sent - t0:.2f} s (p50 {pct(send_times, 50) * 1e3:.2f} ms, "
            f"p99 {pct(send_times, 99) * 1e3:.2f} ms), all in by {t_done - t0:.2f} s")
    if send_bad:
        run.problem(f"fan-out: {len(send_bad)} sends failed, e.g. {send_bad[0]}")
    if received != k or dupes or stray:
        run.problem(f"fan-out: {received}/{k} received, {dupes} duplicates, {stray} misdirected")
    per_worker = [sum(n for sid, n in c["fanout"].items()) for c in counts]
    run.row("fan-out: received per worker", " + ".join(map(str, per_worker)))
    disc = sum(c["disconnected"] for c in counts)
    if disc:
        run.problem(f"{disc} worker sessions report not connected (transport reconnecting)")
    run.sample("after fan-out")


def phase_presence(run: Run) -> None:
    victim_i = len(run.workers) - 1
    victim = run.workers[victim_i]
    prefix = f"w{victim_i}-"
    n_victim = run.n_victim = run.connected.get(victim_i, 0)
    mark = run.watcher.mark()
    # Spurious departures so far: a worker session left before anything was killed.
    early = [(name, sid) for _, e, name, sid in run.watcher.snapshot()
             if e == "session_left"]
    if early:
        run.problem(f"{len(early)} session_left before the kill (sessions expired under "
                    f"load?), e.g. {early[:3]}")
    liveness = 3.0
    budget = liveness + 0.5 + 1.5        # liveness + broker sweep interval + margin

    def victim_lefts(evs):
        return [t for t, e, name, _ in evs if e == "session_left" and name.startswith(prefix)]

    with Prober(run.probe) as prober:
        t_kill = time.monotonic()
        os.kill(victim.pid, signal.SIGKILL)
        run.watcher.wait_for(lambda evs: len(victim_lefts(evs)) >= n_victim,
                             liveness + 12, mark)
        time.sleep(0.5)       # anything extra arriving right after
    evs = run.watcher.snapshot(mark)
    lefts = victim_lefts(evs)
    others = [name for _, e, name, _ in evs if e == "session_left" and not name.startswith(prefix)]
    rc = victim.stop(signal.SIGKILL, 5)
    run.workers.remove(victim)
    if lefts:
        first, last = min(lefts) - t_kill, max(lefts) - t_kill
        within = sum(1 for t in lefts if t - t_kill <= budget)
        run.row(f"presence: SIGKILL worker{victim_i} ({n_victim} sessions)",
                f"{len(lefts)}/{n_victim} session_left, first {first:.2f} s, "
                f"last {last:.2f} s after kill; {within} within {budget:g} s")
        if len(lefts) != n_victim:
            run.problem(f"presence: {len(lefts)}/{n_victim} session_left after SIGKILL")
        if last > budget:
            run.problem(f"presence: last session_left {last:.2f} s after kill (> {budget:g} s)")
    else:
        run.problem(f"presence: no session_left within {liveness + 12:g} s of SIGKILL")
    if others:
        run.problem(f"presence: {len(others)} session_left for sessions not killed: {others[:5]}")
    run.row("status latency during mass expiry", prober.summary())
    if prober.bad:
        run.problem(f"{prober.bad} status calls failed during the mass expiry")
    if rc != -signal.SIGKILL:
        run.problem(f"killed worker exit status {rc}, expected -9")
    for sid in [sid for sid, name in run.ids.items() if name.startswith(prefix)]:
        del run.ids[sid]
    res = run.probe.intercom(action="status")
    expected = len(run.ids) + 1
    if res.get("visibleSessions") != expected:
        run.problem(f"after kill: status visibleSessions={res.get('visibleSessions')}, "
                    f"expected {expected}")
    run.sample("after SIGKILL")


def phase_close(run: Run) -> None:
    mark = run.watcher.mark()
    t0 = time.monotonic()
    counts = run.poll_counts(run.workers, 10)
    for c in counts:
        if c["other_msgs"]:
            run.problem(f"a worker received {c['other_msgs']} unexpected messages")
    prober = Prober(run.probe).__enter__()
    for w in run.workers:
        w.send(cmd="close")
    ev_total: dict[str, int] = {}
    close_s: list[float] = []
    for w in run.workers:
        res = w.expect("closed", 60 + run.n * 0.05)
        close_s.append(res["elapsed"])
        for k, v in res["events"].items():
            ev_total[k] = ev_total.get(k, 0) + v
        if res["errors"]:
            run.problem(f"{w.name}: {res['errors']} errors while closing sessions")
        if res["not_connected"]:
            run.problem(f"{w.name}: {res['not_connected']} sessions were not connected at "
                        f"close (reconnecting after the broker dropped them)")
    for w in list(run.workers):
        try:
            w.popen.wait(20)
        except subprocess.TimeoutExpired:
            run.problem(f"{w.name} (pid {w.pid}) did not exit within 20 s after closing")
        rc = w.stop()
        if rc != 0:
            run.problem(f"{w.name} exit status {rc}; stderr tail {w.stderr_tail()!r}")
        elif w.stderr_tail().strip():
            run.problem(f"{w.name} wrote to stderr: {w.stderr_tail(300)!r}")
        run.workers.remove(w)
    remaining = set(run.ids)
    ok = run.watcher.wait_for(
        lambda evs: {sid for _, e, _, sid in evs if e == "session_left"} >= remaining, 30, mark)
    prober.__exit__()
    left = {sid for _, e, _, sid in run.watcher.snapshot(mark) if e == "session_left"}
    run.row("close: worker sessions",
            f"{len(remaining)} closed in {max(close_s, default=0):.2f} s (slowest worker); "
            f"watcher saw {len(left & remaining)}/{len(remaining)} leave "
            f"by {time.monotonic() - t0:.2f} s")
    run.row("status latency during mass close", prober.summary())
    if prober.bad:
        run.problem(f"{prober.bad} status calls failed during the mass close")
    if not ok:
        run.problem(f"close: watcher saw only {len(left & remaining)}/{len(remaining)} leave")
    run.row("presence events taken (surviving workers)",
            ", ".join(f"{k} {v}" for k, v in sorted(ev_total.items())) or "none")
    # Whole-run check on the watcher: each worker session joined once and left once.
    all_evs = run.watcher.snapshot()
    joins = [sid for _, e, name, sid in all_evs if e == "session_joined" and name.startswith("w")]
    if len(joins) != len(set(joins)):
        run.problem(f"watcher: {len(joins) - len(set(joins))} repeated session_joined "
                    f"(sessions expired and came back)")
    run.watcher.halt.set()
    run.watcher.join(2)
    for s in run.sessions:
        s.close()
    run.sessions.clear()
    time.sleep(1.0)
    run.sample("all closed")
