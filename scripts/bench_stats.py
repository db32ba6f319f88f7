"""What ``stats`` and the metrics endpoint cost a busy broker.

On one broker holding 1,000 sessions and 100 workflow runs (each run with queued
entries for its stages), prints:

* the time to answer ``stats`` (p50, p99, as a control connection sees it), asked
  back to back by another process;
* the p50 and p90 of a concurrent ask/reply round trip while those stats run,
  against the same ask measured just before with no stats (the baseline, same run,
  same broker), and the ratio;
* the time of a scrape of ``/metrics`` (p50, p99) and its size.

The sessions are raw DEALER sockets in a child process (hello, then heartbeats that
report what they read), in groups of ten, so the measuring process holds only its
own few sessions.
The broker runs with ``--metrics-port`` throughout, so its once-a-second snapshot is
in the baseline too.

Usage: python scripts/bench_stats.py [--sessions 1000] [--runs 100] [--asks 400]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import msgpack  # noqa: E402
import zmq  # noqa: E402

from client import Client  # noqa: E402
from client.reach import nobody_listens  # noqa: E402

GROUP = "bench"
ENTRIES_PER_RUN = 5


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def ms(seconds: float) -> str:
    return f"{seconds * 1000:8.3f} ms"


# -- the swarm (a child process) --------------------------------------------------------

def swarm(endpoint: str, sessions: int, runs: int) -> None:
    """Hold ``sessions`` raw sessions, the first ``runs`` of them hosting a run each;
    print "ready" once all are welcomed and queued, then heartbeat until stdin closes."""
    ctx = zmq.Context()
    socks, read = [], {}
    pack = msgpack.Packer(use_bin_type=True).pack
    for n in range(sessions):
        sock = ctx.socket(zmq.DEALER)
        sock.linger = 0
        sock.connect(endpoint)
        # Groups of ten: presence fans out to ten, not to a thousand, per hello.
        sock.send(pack({"v": 1, "k": "hello", "id": f"h{n}", "name": f"s{n}",
                        "group": f"{GROUP}-{n // 10}"}))
        socks.append(sock)
        read[sock] = 0
    poller = zmq.Poller()
    for sock in socks:
        poller.register(sock, zmq.POLLIN)
    answered: set[str] = set()

    def drain(timeout_ms: int) -> None:
        for sock, _ in poller.poll(timeout_ms):
            while sock.getsockopt(zmq.EVENTS) & zmq.POLLIN:
                frame = sock.recv()
                read[sock] += len(frame)
                value = msgpack.unpackb(frame, raw=False)
                for env in value if isinstance(value, list) else [value]:
                    if env.get("k") == "result" and env.get("ok"):
                        answered.add(env["re"])
                    elif env.get("k") == "result":
                        raise SystemExit(f"swarm: {env.get('re')} refused: {env.get('error')}")

    def wait_for(ids: set[str], what: str) -> None:
        deadline = time.monotonic() + 120
        while not ids <= answered:
            if time.monotonic() > deadline:
                raise SystemExit(f"swarm: {len(ids - answered)} {what} unanswered")
            drain(100)
            heartbeat()

    last_hb = [0.0]

    def heartbeat() -> None:
        if time.monotonic() - last_hb[0] >= 1.0:      # as often as a client's (HEARTBEAT_S)
            last_hb[0] = time.monotonic()
            for sock in socks:
                sock.send(pack({"v": 1, "k": "hb", "read": read[sock]}))

    wait_for({f"h{n}" for n in range(sessions)}, "hellos")
    stages = [{"name": "plan"}, {"name": "review", "children": [{"name": "deep"}]}]
    for n in range(runs):
        socks[n].send(pack({"v": 1, "k": "workflow", "id": f"w{n}", "op": "register_run",
                            "runId": f"run{n}", "stages": stages}))
    wait_for({f"w{n}" for n in range(runs)}, "register_run")
    for n in range(runs):
        for e in range(ENTRIES_PER_RUN):
            socks[n].send(pack({"v": 1, "k": "call", "id": f"q{n}-{e}", "action": "send",
                                "to": f"workflow:run{n}/plan", "message": f"entry {e}"}))
    wait_for({f"q{n}-{e}" for n in range(runs) for e in range(ENTRIES_PER_RUN)}, "queued sends")
    print("ready", flush=True)
    stop = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
    while not stop.is_set():
        drain(100)
        heartbeat()
    ctx.destroy(linger=0)


def stats_loop(endpoint: str, seconds: float, interval: float) -> None:
    """Ask ``stats`` every ``interval`` seconds (0: back to back) for ``seconds``; print
    the durations as JSON."""
    times = []
    with Client.connect(name="bench-stats", endpoint=endpoint, kind="control",
                        auto_start=False) as look:
        print("started", flush=True)
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            started = time.perf_counter()
            answer = look.stats()
            times.append(time.perf_counter() - started)
            assert answer["ok"], answer
            if interval:
                time.sleep(interval)      # the pace of stats --watch and top
    print(json.dumps({"times": times, "sessions": answer["sessions"]["local"],
                      "runs": answer["runs"]["live"], "entries": answer["queues"]["entries"]}),
          flush=True)


# -- the measuring process --------------------------------------------------------------

def ask_times(asker, count: int) -> list[float]:
    times = []
    for _ in range(count):
        started = time.perf_counter()
        answer = asker.intercom(action="ask", to="bench-responder", message="ping", timeout=10)
        times.append(time.perf_counter() - started)
        assert answer.get("ok"), answer
    return times


def responder(session, stop: threading.Event) -> None:
    while not stop.is_set():
        msg = session.receive(timeout=0.2)
        if msg is not None and msg.get("expectsReply"):
            session.intercom(action="reply", replyTo=msg["id"], message="pong")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def scrape_times(port: int, count: int) -> tuple[list[float], int]:
    times, size = [], 0
    for _ in range(count):
        started = time.perf_counter()
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as reply:
            size = len(reply.read())
        times.append(time.perf_counter() - started)
    return times, size


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--asks", type=int, default=400)
    parser.add_argument("--role", help=argparse.SUPPRESS)
    parser.add_argument("--endpoint", help=argparse.SUPPRESS)
    parser.add_argument("--seconds", type=float, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--interval", type=float, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.role == "swarm":
        swarm(args.endpoint, args.sessions, args.runs)
        return 0
    if args.role == "stats":
        stats_loop(args.endpoint, args.seconds, args.interval)
        return 0
    work = Path(tempfile.mkdtemp(prefix="ic-bs-", dir="/tmp"))
    endpoint, port = f"ipc://{work}/broker.sock", free_port()
    env = dict(os.environ, PYTHONPATH=str(ROOT), HOME=str(work))
    me = [sys.executable, str(Path(__file__).resolve())]
    procs: list[subprocess.Popen] = []
    try:
        log = open(work / "broker.log", "wb")
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "broker", "--data-dir", str(work), "--endpoint", endpoint,
             "--pub-endpoint", f"ipc://{work}/presence.sock", "--metrics-port", str(port),
             "--max-sessions-per-connection", "4096", "--max-new-sessions-per-second", "100000"],
            cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT))
        deadline = time.monotonic() + 30
        while nobody_listens(endpoint, grace_s=0.0) is not None:
            if time.monotonic() > deadline:
                raise SystemExit("no broker")
            time.sleep(0.05)
        swarm_proc = subprocess.Popen(me + ["--role", "swarm", "--endpoint", endpoint,
                                            "--sessions", str(args.sessions), "--runs",
                                            str(args.runs)], cwd=ROOT, env=env,
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        procs.append(swarm_proc)
        assert swarm_proc.stdout.readline().strip() == "ready", "the swarm did not get ready"
        stop = threading.Event()
        with Client.connect(name="bench-responder", endpoint=endpoint, group=GROUP,
                            auto_start=False) as answering, \
                Client.connect(name="bench-asker", endpoint=endpoint, group=GROUP,
                               auto_start=False) as asker:
            thread = threading.Thread(target=responder, args=(answering, stop), daemon=True)
            thread.start()
            ask_times(asker, 50)                                  # warm-up
            baseline = ask_times(asker, args.asks)

            def with_stats(interval: float) -> tuple[list[float], dict]:
                """Asks measured while another process asks for stats."""
                seconds = max(5.0, statistics.fmean(baseline) * args.asks * 3)
                looker = subprocess.Popen(me + ["--role", "stats", "--endpoint", endpoint,
                                                "--seconds", str(seconds), "--interval",
                                                str(interval)], cwd=ROOT, env=env,
                                          stdout=subprocess.PIPE, text=True)
                procs.append(looker)
                assert looker.stdout.readline().strip() == "started"
                asked = ask_times(asker, args.asks)
                return asked, json.loads(looker.stdout.readline())

            paced, _ = with_stats(1.0)
            loaded, looked = with_stats(0.0)
            stop.set()
            thread.join(5)
        scrapes, size = scrape_times(port, 50)
        stats = looked["times"]
        print(f"broker: {looked['sessions']} sessions, {looked['runs']} runs, "
              f"{looked['entries']} queued entries")
        print(f"stats answer        p50 {ms(pct(stats, 0.5))}  p99 {ms(pct(stats, 0.99))}  "
              f"({len(stats)} asked back to back)")
        b50, l50 = pct(baseline, 0.5), pct(loaded, 0.5)
        print(f"ask, no stats       p50 {ms(b50)}  p90 {ms(pct(baseline, 0.9))}  (baseline)")
        p50 = pct(paced, 0.5)
        print(f"ask, stats 1/s      p50 {ms(p50)}  p90 {ms(pct(paced, 0.9))}  "
              f"ratio {p50 / b50:.2f}x  (the pace of --watch and top)")
        print(f"ask, stats nonstop  p50 {ms(l50)}  p90 {ms(pct(loaded, 0.9))}  "
              f"ratio {l50 / b50:.2f}x  (stats asked back to back)")
        print(f"/metrics scrape     p50 {ms(pct(scrapes, 0.5))}  p99 {ms(pct(scrapes, 0.99))}  "
              f"({size} bytes)")
        return 0
    finally:
        for proc in reversed(procs):
            if proc.poll() is None:
                if proc.stdin is not None:
                    proc.stdin.close()
                proc.terminate()
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    proc.kill()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
