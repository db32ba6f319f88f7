"""bench.py sections on live messaging: ``throughput``, ``latency`` and ``ask``.

Each section starts a raw forwarder and a broker, interleaves baseline and bus runs
(``--repeats`` of each), prints one line per run and adds its rows to ``results``.
Throughput runs also report CPU microseconds per message in the senders, the router
(broker or raw forwarder, read from /proc) and the receiver.
"""

from __future__ import annotations

import time

from typing import Any, Callable

from benchkit.config import Config, split_evenly
from benchkit.procs import Endpoints, Harness, Proc, broker_stats, measure_probe, proc_cpu_s
from benchkit.report import Results, Row
from benchkit.role_io import MESSAGE_BYTES

# =====================================================================================
# throughput
# =====================================================================================

def _drive(h: Harness, router: Proc, receiver: Proc, senders: list[Proc],
           timeout: float) -> dict:
    """Senders are ready: say go, collect results, make sure all of them are gone.

    The result is the receiver's, plus ``senders`` (their results), ``router_cpu_s``
    (CPU the forwarder or broker spent from go to the receiver's last message) and
    ``e2e_rate``: every message sent, warm-up included, over the time from go to the
    last one received (perf_counter is one clock for all processes here). Unlike the
    receiver's steady-state ``rate``, a backlog queued at the receiver during warm-up
    cannot inflate it.
    """
    try:
        for s in senders:
            s.expect("ready", 30)
        cpu0 = proc_cpu_s(router.pid)
        t_go = time.perf_counter()
        for s in senders:
            s.tell("go")
        result = receiver.expect("result", timeout)
        if result.get("complete") and result.get("t1"):
            result["e2e_rate"] = result["received"] / (result["t1"] - t_go)
        cpu1 = proc_cpu_s(router.pid)
        result["senders"] = [s.expect("result", 60) for s in senders]
        result["router_cpu_s"] = cpu1 - cpu0 if cpu0 is not None and cpu1 is not None else None
        return result
    finally:
        h.reap([receiver, *senders], timeout=10)


def measure_raw_throughput(h: Harness, fwd: Proc, ep: Endpoints, n_senders: int,
                           cfg: Config) -> dict:
    identity = h._next("recv-")
    receiver = h.spawn_role("raw_receiver", endpoint=ep.router, identity=identity,
                            warm=cfg.warm, count=cfg.count, timeout_s=cfg.run_timeout_s)
    senders: list[Proc] = []
    try:
        receiver.expect("ready", 30)
        for warm, count in zip(split_evenly(cfg.warm, n_senders),
                               split_evenly(cfg.count, n_senders)):
            senders.append(h.spawn_role("raw_sender", endpoint=ep.router, to=identity,
                                        warm=warm, count=count, size=MESSAGE_BYTES))
    except BaseException:
        h.reap([receiver, *senders], timeout=0)
        raise
    return _drive(h, fwd, receiver, senders, cfg.run_timeout_s + 15)


def measure_bus_throughput(h: Harness, broker: Proc, ep: Endpoints, n_senders: int,
                           cfg: Config, *,
                           mode: str = "pipelined", count: int | None = None,
                           warm: int | None = None, sender_endpoint: str | None = None,
                           before_senders: Callable[[str], None] | None = None,
                           spawn: Callable[..., Proc] | None = None) -> dict:
    """``sender_endpoint``: the senders' broker, when not the receiver's (another broker
    on the same database); ``before_senders(receiver id)`` runs before they start;
    ``spawn(role, **args)`` starts the roles (default: ``h.spawn_role``, the Python
    client's; ``scripts/bench_node.py`` passes the Node client's)."""
    spawn = spawn or h.spawn_role
    count = count or cfg.count
    warm = cfg.warm if warm is None else warm
    receiver = spawn("bus_receiver", endpoint=ep.router, warm=warm, count=count,
                     timeout_s=cfg.run_timeout_s)
    senders: list[Proc] = []
    try:
        to = receiver.expect("ready", 30)["session_id"]
        if before_senders is not None:
            before_senders(to)
        for w, c in zip(split_evenly(warm, n_senders), split_evenly(count, n_senders)):
            senders.append(spawn("bus_sender", endpoint=sender_endpoint or ep.router,
                                 to=to, warm=w,
                                 count=c, size=MESSAGE_BYTES, mode=mode,
                                 window=cfg.window))
    except BaseException:
        h.reap([receiver, *senders], timeout=0)
        raise
    return _drive(h, broker, receiver, senders, cfg.run_timeout_s + 15)


def cpu_per_message(result: dict) -> dict[str, float | None]:
    """CPU microseconds per message in each part of the pipeline (all threads)."""
    sent = sum(s.get("sent", 0) for s in result.get("senders", []))
    received = result.get("received") or 0
    snd = sum(s.get("cpu_s", 0.0) for s in result.get("senders", []))
    out: dict[str, float | None] = {
        "senders": snd / sent * 1e6 if sent else None,
        "router": (result["router_cpu_s"] / received * 1e6
                   if result.get("router_cpu_s") is not None and received else None),
        "receiver": result["cpu_s"] / received * 1e6 if received and "cpu_s" in result else None,
    }
    parts = list(out.values())
    out["total"] = sum(parts) if all(p is not None for p in parts) else None
    return out


def _log_run(label: str, result: dict) -> None:
    cpu = cpu_per_message(result)
    extra = ""
    if cpu["total"] is not None:
        extra = (f"  cpu us/msg: snd {cpu['senders']:.1f} + router {cpu['router']:.1f}"
                 f" + rcv {cpu['receiver']:.1f} = {cpu['total']:.1f}")
    errors: dict[str, int] = {}
    for s in result.get("senders", []):
        for code, k in (s.get("errors") or {}).items():
            errors[code] = errors.get(code, 0) + k
    if result.get("senders"):
        rates = ", ".join(f"{s['send_rate'] / 1000:.0f}k" for s in result["senders"])
        extra += f"  (send rates: {rates})"
    if errors:
        extra += f"  ERRORS {errors}"
    if not result.get("complete", True):
        extra += f"  INCOMPLETE: received {result.get('received')}"
    steady = f"  (steady {result['rate']:,.0f})" if "e2e_rate" in result else ""
    print(f"  {label:<34} {result.get('e2e_rate', result.get('rate', 0)):>10,.0f} msg/s{steady}{extra}",
          flush=True)


def section_throughput(h: Harness, cfg: Config, results: Results) -> None:
    print(f"throughput: {cfg.count:,} measured + {cfg.warm:,} warm-up messages of "
          f"{MESSAGE_BYTES} bytes per run, window {cfg.window}, {cfg.repeats} repeat(s)",
          flush=True)
    fwd, raw_ep = h.start_forwarder()
    broker, bus_ep = h.start_broker(cfg.profile_broker)
    runs: dict[str, list[dict]] = {}
    try:
        for rep in range(cfg.repeats):
            for n in cfg.senders:
                raw = measure_raw_throughput(h, fwd, raw_ep, n, cfg)
                _log_run(f"[{rep + 1}] raw forwarder, {n} sender(s)", raw)
                runs.setdefault(f"raw{n}", []).append(raw)
                bus = measure_bus_throughput(h, broker, bus_ep, n, cfg)
                _log_run(f"[{rep + 1}] broker send_nowait, {n} sender(s)", bus)
                runs.setdefault(f"bus{n}", []).append(bus)
            blocking = measure_bus_throughput(h, broker, bus_ep, 1, cfg, mode="blocking",
                                              count=cfg.blocking_count,
                                              warm=max(200, cfg.blocking_count // 10))
            _log_run(f"[{rep + 1}] broker blocking intercom, 1 sender", blocking)
            runs.setdefault("blocking1", []).append(blocking)
    finally:
        h.stop(fwd)
        h.stop(broker, timeout=30)
    stats = broker_stats(broker)
    results.extra["throughput"] = runs
    results.extra["broker_stats_throughput"] = stats

    def rates(key: str) -> list[float]:
        return [r.get("e2e_rate", r["rate"]) for r in runs[key]]

    for n in cfg.senders:
        results.add(Row("throughput", f"live send, {n} sender(s)", "msg/s", rates(f"bus{n}"),
                        rates(f"raw{n}"), base_label=f"raw ROUTER forwarder, {n} DEALER sender(s)"
                        if n == cfg.senders[0] else "", target=0.70))
    results.add(Row("throughput", "blocking intercom send, 1 sender", "msg/s",
                    rates("blocking1"),
                    note="one broker round trip per message (secondary line, no baseline)"))
    for n in cfg.senders:
        ours = [cpu_per_message(r) for r in runs[f"bus{n}"]]
        base = [cpu_per_message(r) for r in runs[f"raw{n}"]]
        for part in ("senders", "router", "receiver", "total"):
            o = [c[part] for c in ours if c[part] is not None]
            b = [c[part] for c in base if c[part] is not None]
            if o:
                results.add(Row(f"cpu{n}", f"CPU per msg, {n} sender(s): {part}", "us/msg", o,
                                b or None, note=(
                                    "CPU time (all threads) / messages; router = broker vs "
                                    "raw forwarder; ratio = times more CPU than raw"
                                    if n == cfg.senders[0] and part == "senders" else "")))
    drops = {k: v for k, v in stats.items() if k.startswith(("dropped", "refused", "internal"))}
    if stats:
        print(f"  broker counters: frames_in={stats.get('frames_in')} "
              f"frames_out={stats.get('frames_out')} {drops or 'no drops/refusals'}", flush=True)


# =====================================================================================
# latency
# =====================================================================================

def section_latency(h: Harness, cfg: Config, results: Results) -> None:
    print(f"latency: {cfg.latency_n:,} round trips after {cfg.latency_warm} warm-up, "
          f"{cfg.latency_sessions} sessions connected for list, {cfg.repeats} repeat(s)",
          flush=True)
    fwd, raw_ep = h.start_forwarder()
    broker, bus_ep = h.start_broker()
    echo: list[dict] = []
    lists: list[dict] = []
    try:
        for rep in range(cfg.repeats):
            e = measure_probe(h, "raw_echo_probe", endpoint=raw_ep.router, n=cfg.latency_n,
                              warm=cfg.latency_warm)
            echo.append(e)
            print(f"  [{rep + 1}] raw DEALER->ROUTER->DEALER echo  p50 {e['p50_us']:7.0f} us"
                  f"  p99 {e['p99_us']:7.0f} us", flush=True)
            li = measure_probe(h, "bus_list_probe", endpoint=bus_ep.router, n=cfg.latency_n,
                               warm=cfg.latency_warm, sessions=cfg.latency_sessions)
            lists.append(li)
            print(f"  [{rep + 1}] intercom list ({li['visible']} visible)    p50 "
                  f"{li['p50_us']:7.0f} us  p99 {li['p99_us']:7.0f} us", flush=True)
    finally:
        h.stop(fwd)
        h.stop(broker, timeout=30)
    results.extra["latency"] = {"echo": echo, "list": lists}
    results.add(Row("latency", "list round trip p50", "us", [r["p50_us"] for r in lists],
                    [r["p50_us"] for r in echo], base_label="raw DEALER->ROUTER->DEALER echo "
                    "(same forwarder), p50 / p99; ratio = how many times slower"))
    results.add(Row("latency", "list round trip p99", "us", [r["p99_us"] for r in lists],
                    [r["p99_us"] for r in echo]))


# =====================================================================================
# ask
# =====================================================================================

def measure_ask(h: Harness, router: Proc, responder_role: str, probe_role: str,
                cfg: Config, probe_endpoint: str | None = None,
                before_probe: Callable[[str], None] | None = None,
                spawn: Callable[..., Proc] | None = None, **args: Any) -> dict:
    """One ask run: responder up, probe measures; CPU per round trip of each process.
    ``probe_endpoint``: the asker's broker, when not the responder's; ``spawn(role,
    **args)``: how roles start (default ``h.spawn_role``)."""
    spawn = spawn or h.spawn_role
    identity = h._next("responder-")
    responder = spawn(responder_role, identity=identity, **args)
    probe = None
    try:
        to = responder.expect("ready", 30).get("session_id") or identity
        if before_probe is not None:
            before_probe(to)
        probe_args = dict(args, endpoint=probe_endpoint) if probe_endpoint else args
        probe = spawn(probe_role, to=to, n=cfg.ask_n, warm=cfg.ask_warm, **probe_args)
        probe.expect("ready", 60)
        cpu0 = proc_cpu_s(router.pid)
        probe.tell("go")
        result = probe.expect("result", 120)
        cpu1 = proc_cpu_s(router.pid)
        result["responder"] = responder.expect("result", 10)
    finally:
        h.reap([p for p in (probe, responder) if p is not None], timeout=5)
    trips = cfg.ask_n + cfg.ask_warm
    result["cpu_us"] = {
        "asker": result["cpu_s"] / trips * 1e6,
        "router": (cpu1 - cpu0) / trips * 1e6 if cpu0 is not None and cpu1 is not None else None,
        "responder": result["responder"].get("cpu_s", 0.0) / trips * 1e6,
    }
    return result


def _cpu_text(cpu: dict) -> str:
    parts = [f"{k} {v:.0f}" for k, v in cpu.items() if v is not None]
    return "cpu us/trip: " + ", ".join(parts)


def section_ask(h: Harness, cfg: Config, results: Results) -> None:
    print(f"ask: {cfg.ask_n:,} ask/reply round trips after {cfg.ask_warm} warm-up, "
          f"{cfg.repeats} repeat(s)", flush=True)
    fwd, raw_ep = h.start_forwarder()
    broker, bus_ep = h.start_broker()
    raw_runs: list[dict] = []
    bus_runs: list[dict] = []
    try:
        for rep in range(cfg.repeats):
            raw = measure_ask(h, fwd, "raw_ask_responder", "raw_ask_probe", cfg,
                              endpoint=raw_ep.router)
            raw_runs.append(raw)
            print(f"  [{rep + 1}] raw A->ROUTER->B->ROUTER->A     p50 {raw['p50_us']:6.0f} us"
                  f"  p99 {raw['p99_us']:6.0f} us  ({_cpu_text(raw['cpu_us'])})", flush=True)
            bus = measure_ask(h, broker, "bus_ask_responder", "bus_ask_probe", cfg,
                              endpoint=bus_ep.router)
            bus_runs.append(bus)
            answered = bus["responder"]
            extra = ""
            if (answered.get("errors") or answered.get("other") or not bus.get("stop_ok")
                    or answered.get("replies") != cfg.ask_n + cfg.ask_warm):
                extra = (f"  ANOMALY: replies {answered.get('replies')}, responder errors "
                         f"{answered.get('errors')}, other {answered.get('other')}, "
                         f"stop ok {bus.get('stop_ok')}")
            print(f"  [{rep + 1}] intercom ask -> receive+reply  p50 {bus['p50_us']:6.0f} us"
                  f"  p99 {bus['p99_us']:6.0f} us  ({_cpu_text(bus['cpu_us'])}){extra}",
                  flush=True)
    finally:
        h.stop(fwd)
        h.stop(broker, timeout=30)
    results.extra["ask"] = {"raw": raw_runs, "bus": bus_runs}
    results.add(Row("ask", "ask/reply round trip p50", "us", [r["p50_us"] for r in bus_runs],
                    [r["p50_us"] for r in raw_runs], target_max=1.3,
                    base_label="raw DEALER A->ROUTER->DEALER B->ROUTER->DEALER A (4 hops, "
                    "fast-form forwarder, msgpack at each hop); ratio = how many times slower"))
    results.add(Row("ask", "ask/reply round trip p99", "us", [r["p99_us"] for r in bus_runs],
                    [r["p99_us"] for r in raw_runs]))


