"""Bus roles: our client library under load, each in its own interpreter.

Receivers count ``session.receive``; senders use the pipelined ``session.send_nowait``
(a bounded window of outstanding futures) or the blocking ``intercom(action="send")``;
the list and ask probes time ``intercom`` round trips; the ask responder loops
``receive`` + ``intercom(action="reply")``; the durable sender pipelines sticky sends
to workflow stage paths. See :mod:`benchkit.roles` for how they are run.
"""

from __future__ import annotations

import os
import time

from benchkit.report import percentiles
from benchkit.role_io import Counter, emit, wait_go


def _connect(name: str, endpoint: str, **kwargs):
    from client import Client

    return Client.connect(name=name, endpoint=endpoint, timeout=20, **kwargs)


def role_bus_receiver(endpoint: str, warm: int, count: int, timeout_s: float,
                      idle_s: float = 10.0, stage: str | None = None,
                      grant: str | None = None) -> None:
    """Count ``session.receive``; with ``stage`` (and the host's ``grant``), as a
    workflow stage session at that path."""
    session = (_connect("bench-recv", endpoint) if stage is None else
               _connect("bench-stage", endpoint, kind="stage", stage=stage, grant=grant))
    try:
        emit("ready", pid=os.getpid(), session_id=session.id)
        counter = Counter(warm, count)
        receive = session.receive
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            msg = receive(idle_s)
            if msg is None:
                break
            counter.t_last = time.perf_counter()
            if counter.hit():
                break
        emit("result", **counter.result())
    finally:
        session.close()


def role_bus_sender(endpoint: str, to: str, warm: int, count: int, size: int,
                    mode: str, window: int, guard: bool | dict | None = None) -> None:
    """``guard``: the session's flood and loop guard (see scripts/guard_cost.py)."""
    from collections import deque

    session = _connect(f"bench-send-{os.getpid()}", endpoint, guard=guard)
    text = "x" * size
    errors: dict[str, int] = {}
    try:
        emit("ready", pid=os.getpid(), session_id=session.id)
        wait_go()
        total = warm + count
        cpu0 = time.process_time()
        t0 = time.perf_counter()
        if mode == "pipelined":
            pending: deque = deque()
            send_nowait = session.send_nowait
            for _ in range(total):
                if len(pending) >= window:
                    result = pending.popleft().result(30)
                    if not result.get("ok"):
                        errors[result.get("code", "?")] = errors.get(result.get("code", "?"), 0) + 1
                pending.append(send_nowait(to, text))
            while pending:
                result = pending.popleft().result(30)
                if not result.get("ok"):
                    errors[result.get("code", "?")] = errors.get(result.get("code", "?"), 0) + 1
        else:
            intercom = session.intercom
            for _ in range(total):
                result = intercom(action="send", to=to, message=text)
                if not result.get("ok"):
                    errors[result.get("code", "?")] = errors.get(result.get("code", "?"), 0) + 1
        elapsed = time.perf_counter() - t0
        emit("result", sent=total, send_rate=total / elapsed, errors=errors,
             cpu_s=time.process_time() - cpu0)
    finally:
        session.close()


def role_bus_list_probe(endpoint: str, n: int, warm: int, sessions: int) -> None:
    """``intercom(action="list")`` round trips with ``sessions`` sessions connected."""
    others = [_connect(f"bench-idle-{i}", endpoint) for i in range(sessions - 1)]
    probe = _connect("bench-probe", endpoint)
    try:
        emit("ready", pid=os.getpid())
        samples = []
        clock = time.perf_counter_ns
        seen = None
        for i in range(warm + n):
            t = clock()
            result = probe.intercom(action="list")
            dt = clock() - t
            if not result.get("ok"):
                raise RuntimeError(f"list failed: {result}")
            seen = len(result["sessions"])
            if i >= warm:
                samples.append(dt)
        emit("result", visible=seen, **percentiles(samples))
    finally:
        for s in [probe, *others]:
            s.close()


def role_bus_ask_responder(endpoint: str, identity: str = "", idle_s: float = 30.0) -> None:
    """Loop ``receive`` then ``intercom(action="reply", replyTo=msg["id"])``."""
    session = _connect("bench-responder", endpoint)
    replies = 0
    errors: dict[str, int] = {}
    other = 0
    cpu0 = None
    try:
        emit("ready", pid=os.getpid(), session_id=session.id)
        receive, intercom = session.receive, session.intercom
        while True:
            msg = receive(idle_s)
            if cpu0 is None:
                cpu0 = time.process_time()
            if msg is None or msg.get("message") == "__stop__":
                break
            if not msg.get("expectsReply"):
                other += 1
                continue
            result = intercom(action="reply", replyTo=msg["id"], message="pong")
            if result.get("ok"):
                replies += 1
            else:
                errors[result.get("code", "?")] = errors.get(result.get("code", "?"), 0) + 1
        emit("result", replies=replies, errors=errors, other=other,
             cpu_s=time.process_time() - (cpu0 or 0.0))
    finally:
        session.close()


def role_bus_ask_probe(endpoint: str, to: str, n: int, warm: int) -> None:
    """``intercom(action="ask", to=<responder id>, message="ping")`` round trips."""
    session = _connect("bench-asker", endpoint)
    try:
        emit("ready", pid=os.getpid())
        wait_go()
        intercom = session.intercom
        samples = []
        clock = time.perf_counter_ns
        cpu0 = time.process_time()
        for i in range(warm + n):
            t = clock()
            result = intercom(action="ask", to=to, message="ping")
            dt = clock() - t
            if not result.get("ok") or result.get("message") != "pong":
                raise RuntimeError(f"ask {i} failed: {result}")
            if i >= warm:
                samples.append(dt)
        cpu_s = time.process_time() - cpu0
        stop = intercom(action="send", to=to, message="__stop__")
        emit("result", stop_ok=bool(stop.get("ok")), cpu_s=cpu_s, **percentiles(samples))
    finally:
        session.close()


def role_bus_durable_sender(endpoint: str, count: int, warm: int, window: int, size: int,
                            run_rows: int = 0, stages: int = 4) -> None:
    """Host session(s): register runs, pipeline sticky sends to pending/future stages.

    Targets rotate over the run's ``stages`` registered (PENDING) stages and future
    paths ``s<k>``, so no target exceeds the 50-per-target limit. Warm-up goes to its
    own run. ``run_rows`` > 0 spreads the measured entries over runs of that many.
    Only ``queued`` answers count; every other answer is tallied by code.
    """
    from collections import deque

    from schemas.limits import QUEUED_PER_TARGET

    session = _connect(f"bench-durable-{os.getpid()}", endpoint)
    text = "x" * size
    tag = f"bench-{os.getpid()}"
    stage_specs = [{"name": f"st{k}"} for k in range(stages)]
    answers = {"queued_all": 0, "not_ok": {}, "ok_not_queued": 0, "not_in_known_set": 0}
    runs: dict[str, int] = {}            # run id -> queued answers

    def register(run_id: str) -> None:
        result = session.register_run(run_id, stage_specs)
        if not result.get("ok"):
            raise RuntimeError(f"register_run {run_id} failed: {result}")
        runs[run_id] = 0

    def targets_for(run_id: str, rows: int) -> list[str]:
        n_targets = max(stages, -(-rows // QUEUED_PER_TARGET))
        return [f"workflow:{run_id}/st{k}" if k < stages else f"workflow:{run_id}/s{k}"
                for k in range(n_targets)]

    def plan(prefix: str, rows: int, per_run: int) -> list[str]:
        """One destination per message, in send order."""
        out: list[str] = []
        per_run = per_run or rows
        for r in range(-(-rows // per_run) if rows else 0):
            run_id = f"{prefix}-{r}"
            register(run_id)
            k = min(per_run, rows - r * per_run)
            targets = targets_for(run_id, k)
            out.extend(targets[i % len(targets)] for i in range(k))
        return out

    def tally(result: dict, run_id: str) -> bool:
        if not result.get("ok"):
            code = result.get("code", "?")
            answers["not_ok"][code] = answers["not_ok"].get(code, 0) + 1
            return False
        if result.get("queued") is not True:
            answers["ok_not_queued"] += 1
            return False
        if result.get("notInKnownSet"):
            answers["not_in_known_set"] += 1
        answers["queued_all"] += 1
        runs[run_id] += 1
        return True

    def pump(dests: list[str], marks: dict[str, float] | None = None) -> int:
        queued = 0
        done = 0
        pending: deque = deque()
        send_nowait = session.send_nowait
        half = len(dests) // 2
        for to in dests:
            if len(pending) >= window:
                future, run_id = pending.popleft()
                queued += tally(future.result(60), run_id)
                done += 1
                if marks is not None and done == half:
                    marks["half"] = time.monotonic()
            pending.append((send_nowait(to, text), to[len("workflow:"):].split("/", 1)[0]))
        while pending:
            future, run_id = pending.popleft()
            queued += tally(future.result(60), run_id)
            done += 1
            if marks is not None and done == half:
                marks["half"] = time.monotonic()
        return queued

    try:
        warm_dests = plan(f"{tag}-warm", warm, 0)
        pump(warm_dests)
        dests = plan(tag, count, run_rows)
        emit("ready", pid=os.getpid(), session_id=session.id)
        wait_go()
        marks: dict[str, float] = {}
        cpu0 = time.process_time()
        t0 = time.monotonic()
        queued = pump(dests, marks)
        t1 = time.monotonic()
        th = marks.get("half", t1)
        half = len(dests) // 2
        emit("result", sent=len(dests), queued=queued, t0=t0, t1=t1, rate=queued / (t1 - t0),
             first_half_rate=half / (th - t0) if th > t0 else None,
             second_half_rate=(len(dests) - half) / (t1 - th) if t1 > th else None,
             cpu_s=time.process_time() - cpu0, runs=runs, **answers)
    finally:
        session.close()


