"""Raw baselines: what the bus is measured against, in the same run on the same machine.

A ROUTER forwarder process in the fast form (plain ``recv()``/``send(frame, flags)``
with precomputed int flags, a msgpack decode per message to read the destination,
poll once then drain with NOBLOCK), the DEALER senders, receivers and probes that use
it (one-way, echo, and the 4-hop ask relay), and a raw apsw loop with one transaction
per row of the broker's ``sticky`` table. Every function here is a role: it runs in
its own interpreter (see :mod:`benchkit.roles`).
"""

from __future__ import annotations

import os
import time

from benchkit.report import percentiles
from benchkit.role_io import HWM, MESSAGE_BYTES, Counter, emit, wait_go

BASELINE_DRAIN = 512           # frames per poll in the raw forwarder (broker: DRAIN_LIMIT)


def role_raw_forwarder(endpoint: str) -> None:
    """The fast-form ROUTER forwarder: route each message by its msgpack ``to``."""
    import msgpack
    import zmq

    ctx = zmq.Context()
    router = ctx.socket(zmq.ROUTER)
    router.linger = 0
    router.sndhwm = HWM
    router.rcvhwm = HWM
    router.setsockopt(zmq.ROUTER_MANDATORY, 1)
    router.bind(endpoint)
    poller = zmq.Poller()
    poller.register(router, zmq.POLLIN)
    emit("ready", pid=os.getpid())
    recv, send, unpackb = router.recv, router.send, msgpack.unpackb
    noblock = int(zmq.NOBLOCK)
    sndmore_noblock = int(zmq.SNDMORE | zmq.NOBLOCK)
    again = zmq.Again
    dropped = 0
    while True:
        if not poller.poll(1000):
            continue
        for _ in range(BASELINE_DRAIN):
            try:
                recv(noblock)             # sender identity (not forwarded)
            except again:
                break
            frame = recv()
            to = unpackb(frame)["to"]
            try:
                send(to, sndmore_noblock)
                send(frame, noblock)
            except (again, zmq.ZMQError):
                dropped += 1


def role_raw_receiver(endpoint: str, identity: str, warm: int, count: int,
                      timeout_s: float, idle_s: float = 10.0) -> None:
    import msgpack
    import zmq

    # The forwarder must know our identity before anyone sends to us.
    ctx, sock = _raw_dealer(endpoint, identity.encode(), rcvhwm=HWM)
    emit("ready", pid=os.getpid())
    sock.rcvtimeo = int(idle_s * 1000)
    counter = Counter(warm, count)
    recv, unpackb = sock.recv, msgpack.unpackb
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            frame = recv()
        except zmq.Again:
            break
        unpackb(frame)
        counter.t_last = time.perf_counter()
        if counter.hit():
            break
    emit("result", **counter.result())
    sock.close()
    ctx.term()


def role_raw_sender(endpoint: str, to: str, warm: int, count: int, size: int) -> None:
    import msgpack
    import zmq

    ctx = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    sock.linger = 5000
    sock.sndhwm = HWM
    sock.connect(endpoint)
    text = "x" * size
    dest = to.encode()
    send, packb = sock.send, msgpack.packb
    emit("ready", pid=os.getpid())
    wait_go()
    cpu0 = time.process_time()
    t0 = time.perf_counter()
    for i in range(warm + count):
        send(packb({"to": dest, "id": i, "m": text}))
    elapsed = time.perf_counter() - t0
    emit("result", sent=warm + count, send_rate=(warm + count) / elapsed,
         cpu_s=time.process_time() - cpu0)
    sock.close()
    ctx.term()


def role_raw_echo_probe(endpoint: str, n: int, warm: int) -> None:
    """One DEALER->ROUTER->DEALER round trip per sample, through the raw forwarder."""
    import msgpack
    import zmq

    ctx = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    sock.linger = 0
    sock.identity = f"probe-{os.getpid()}".encode()
    sock.connect(endpoint)
    frame = msgpack.packb({"to": sock.identity, "m": "x" * MESSAGE_BYTES})
    sock.rcvtimeo = 200
    for _ in range(100):               # until the forwarder knows us
        sock.send(frame)
        try:
            sock.recv()
            break
        except zmq.Again:
            continue
    sock.rcvtimeo = 5000
    while True:
        try:
            sock.recv(zmq.NOBLOCK)
        except zmq.Again:
            break
    emit("ready", pid=os.getpid())
    samples = []
    clock = time.perf_counter_ns
    for i in range(warm + n):
        t = clock()
        sock.send(frame)
        msgpack.unpackb(sock.recv())
        if i >= warm:
            samples.append(clock() - t)
    emit("result", **percentiles(samples))
    sock.close()
    ctx.term()


def _raw_dealer(endpoint: str, identity: bytes, rcvhwm: int | None = None):
    """A DEALER with ``identity`` that the raw forwarder already knows (hello echo)."""
    import msgpack
    import zmq

    ctx = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    sock.linger = 0
    if rcvhwm is not None:
        sock.rcvhwm = rcvhwm
    sock.identity = identity
    sock.connect(endpoint)
    hello = msgpack.packb({"to": identity, "m": "hello"})
    sock.rcvtimeo = 200
    for _ in range(100):
        sock.send(hello)
        try:
            sock.recv()
            break
        except zmq.Again:
            continue
    else:
        raise RuntimeError("forwarder did not echo the hello")
    while True:                      # drop stray hello echoes
        try:
            sock.recv(zmq.NOBLOCK)
        except zmq.Again:
            break
    sock.rcvtimeo = -1
    return ctx, sock


def role_raw_ask_responder(endpoint: str, identity: str) -> None:
    """DEALER B of the raw ask baseline: answer every ping back through the forwarder."""
    import msgpack

    me = identity.encode()
    ctx, sock = _raw_dealer(endpoint, me)
    emit("ready", pid=os.getpid())
    recv, send, packb, unpackb = sock.recv, sock.send, msgpack.packb, msgpack.unpackb
    answered = 0
    cpu0 = None
    while True:
        req = unpackb(recv())
        if cpu0 is None:
            cpu0 = time.process_time()
        if req.get("m") == "stop":
            break
        send(packb({"to": req["from"], "from": me, "re": req["id"], "m": "pong"}))
        answered += 1
    emit("result", replies=answered, cpu_s=time.process_time() - (cpu0 or 0.0))
    sock.close()
    ctx.term()


def role_raw_ask_probe(endpoint: str, to: str, n: int, warm: int) -> None:
    """DEALER A: A -> forwarder -> B -> forwarder -> A, one round trip per sample."""
    import msgpack

    me = f"asker-{os.getpid()}".encode()
    dest = to.encode()
    ctx, sock = _raw_dealer(endpoint, me)
    sock.rcvtimeo = 10_000
    emit("ready", pid=os.getpid())
    wait_go()
    recv, send, packb, unpackb = sock.recv, sock.send, msgpack.packb, msgpack.unpackb
    samples = []
    clock = time.perf_counter_ns
    cpu0 = time.process_time()
    for i in range(warm + n):
        t = clock()
        send(packb({"to": dest, "from": me, "id": i, "m": "ping"}))
        answer = unpackb(recv())
        dt = clock() - t
        if answer.get("re") != i or answer.get("m") != "pong":
            raise RuntimeError(f"unexpected raw answer {answer!r} to ping {i}")
        if i >= warm:
            samples.append(dt)
    cpu_s = time.process_time() - cpu0
    send(packb({"to": dest, "from": me, "id": -1, "m": "stop"}))
    time.sleep(0.05)
    emit("result", cpu_s=cpu_s, **percentiles(samples))
    sock.close()
    ctx.term()


def role_raw_apsw_insert(path: str, count: int, sync: str, size: int) -> None:
    """One transaction per row into a fresh db: the sticky table, WAL, given sync mode."""
    import uuid

    import apsw
    import msgpack

    from broker.store.sqlite_schema import SCHEMA

    conn = apsw.Connection(path)
    conn.setbusytimeout(5000)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute(f"PRAGMA synchronous={sync}")
    with conn:
        conn.execute(SCHEMA)
    text = "x" * size
    sender = str(uuid.uuid4())
    rows = [(i + 1, "bench-raw", f"workflow:bench-raw/s{i // 50}", sender,
             "bench-durable-raw", str(uuid.uuid4())) for i in range(count)]
    emit("ready", pid=os.getpid())
    execute = conn.execute
    sql = ("INSERT INTO sticky (seq, run_id, target, sender_id, sender_name, message_id, message, "
           "attachments, sent_at, ack, position, not_in_known_set) "
           "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)")
    packb = msgpack.packb
    t0 = time.perf_counter()
    for row in rows:
        with conn:
            execute(sql, (*row, text, packb([], use_bin_type=True), time.time(), 1, 1, 0))
    elapsed = time.perf_counter() - t0
    (n,), = conn.execute("SELECT count(*) FROM sticky")
    conn.close()
    emit("result", rows=n, rate=count / elapsed, elapsed_s=elapsed, sync=sync)


