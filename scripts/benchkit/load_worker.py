"""load_sessions.py worker role: one process holding its share of the N sessions.

Run as ``load_sessions.py --role worker --role-args JSON``. It says ``started``, waits
for ``{"cmd": "go"}``, opens its sessions one after another (``connected``), drains
every session's inbox and presence events continuously, answers ``ids`` and
``counts``, and on ``close`` (or stdin EOF) closes its sessions (``closed``). A
lifetime watchdog ends it whatever happens.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from typing import Any

FANOUT_MARK = "fanout-"


def worker_main(args: dict) -> int:
    index, count, endpoint = args["index"], args["count"], args["endpoint"]
    connect_timeout = args["connect_timeout"]
    # Watchdog: whatever happens, this process does not outlive the run.
    watchdog = threading.Timer(args["lifetime"], lambda: os._exit(3))
    watchdog.daemon = True
    watchdog.start()
    out_lock = threading.Lock()

    def emit(event: str, **fields: Any) -> None:
        line = json.dumps({"event": event, **fields})
        with out_lock:
            sys.stdout.write(line + "\n")
            sys.stdout.flush()

    import zmq

    from client import Client

    ctx = zmq.Context.instance()
    if count + 64 > ctx.max_sockets:
        # libzmq's default is 1023 sockets per context and every session is one socket.
        ctx.max_sockets = count + 64
    emit("started", pid=os.getpid())
    line = sys.stdin.readline()
    if json.loads(line or "{}").get("cmd") != "go":
        return 0

    sessions: list = []
    lock = threading.Lock()
    fanout: dict[str, int] = {}
    other_msgs = 0
    events: dict[str, int] = {}
    stop = threading.Event()

    def drain() -> None:
        # What a runtime does: take every inbound message and presence event.
        nonlocal other_msgs
        while not stop.is_set():
            with lock:
                current = list(sessions)
            for s in current:
                while (msg := s.receive(0)) is not None:
                    text = msg.get("message") or ""
                    if text.startswith(FANOUT_MARK):
                        fanout[s.id] = fanout.get(s.id, 0) + 1
                    else:
                        other_msgs += 1
                while (ev := s.next_event(0)) is not None:
                    name = str(ev.get("event"))
                    events[name] = events.get(name, 0) + 1
            stop.wait(0.1)

    drainer = threading.Thread(target=drain, name="drain", daemon=True)
    drainer.start()

    latencies: list[float] = []
    errors: list[str] = []
    t0 = time.perf_counter()
    deadline = time.monotonic() + args["phase_timeout"]
    for i in range(count):
        if time.monotonic() > deadline:
            errors.append(f"connect phase deadline passed after {i} sessions")
            break
        t = time.perf_counter()
        try:
            s = Client.connect(name=f"w{index}-s{i}", endpoint=endpoint, timeout=connect_timeout)
        except Exception as exc:   # ConnectError and anything else: report, keep going
            errors.append(f"w{index}-s{i}: {type(exc).__name__}: {exc}")
            continue
        latencies.append(time.perf_counter() - t)
        with lock:
            sessions.append(s)
    emit("connected", n=len(sessions), elapsed=time.perf_counter() - t0,
         latencies=[round(x, 6) for x in latencies], errors=errors[:10], n_errors=len(errors))

    try:
        for line in sys.stdin:          # EOF (parent gone or done) ends the loop
            cmd = json.loads(line).get("cmd")
            if cmd == "ids":
                emit("ids", ids=[[s.name, s.id] for s in sessions])
            elif cmd == "counts":
                emit("counts", fanout=dict(fanout), other_msgs=other_msgs, events=dict(events),
                     disconnected=sum(1 for s in sessions if not s.connected))
            elif cmd == "close":
                break
    finally:
        stop.set()
        drainer.join(5)
        t = time.perf_counter()
        close_errors = 0
        # A session not connected at close says no bye: the broker only expires it.
        not_connected = sum(1 for s in sessions if not s.connected)
        for s in sessions:
            try:
                s.close()
            except Exception:
                close_errors += 1
        emit("closed", elapsed=time.perf_counter() - t, errors=close_errors, events=dict(events),
             not_connected=not_connected)
    return 0


