#!/usr/bin/env python3
"""libzmq's own memory per connection: the floor under the broker's RSS per session.

    python3 scripts/router_rss.py                  # 1,000 DEALERs on one ROUTER, ipc
    python3 scripts/router_rss.py --peers 200 --silent

A bare pyzmq ROUTER (set up as the broker sets up its own: linger 0, high-water marks
100,000) in this process; a child process connects ``--peers`` DEALERs to it over
ipc, each sends one 200-byte frame and reads the ROUTER's answer (``--silent``: they
only connect). Printed: this process's VmRSS growth per connection, and whether the
bundled libzmq has the draft options that size the per-connection batch buffers
(ZMQ_IN_BATCH_SIZE / ZMQ_OUT_BATCH_SIZE). The broker's RSS per idle session
(``load_sessions.py``) is this figure plus the core's Python objects per session
(``core_cost.py --sessions N``) plus heap the presence traffic left behind.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import shutil
import tempfile
import time

import zmq


def vm_rss_kib() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS in /proc/self/status")


def dealers(endpoint: str, n: int, talk: bool, done, release) -> None:
    ctx = zmq.Context()
    socks = []
    for _ in range(n):
        sock = ctx.socket(zmq.DEALER)
        sock.linger = 0
        sock.connect(endpoint)
        if talk:
            sock.send(b"x" * 200)
        socks.append(sock)
    if talk:
        for sock in socks:
            sock.recv()
    done.set()
    release.wait(120)
    for sock in socks:
        sock.close()
    ctx.term()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--peers", type=int, default=1000)
    p.add_argument("--silent", action="store_true", help="peers connect and send nothing")
    args = p.parse_args()
    tmp = tempfile.mkdtemp(prefix="rrss-")
    endpoint = f"ipc://{tmp}/router.sock"
    ctx = zmq.Context()
    router = ctx.socket(zmq.ROUTER)
    router.linger = 0
    router.sndhwm = router.rcvhwm = 100_000      # as broker.startup.bind
    router.bind(endpoint)
    batch_options = "yes"
    try:
        router.setsockopt(zmq.IN_BATCH_SIZE, 8192)      # its default: only asks if it exists
    except (zmq.ZMQError, AttributeError):
        batch_options = "no (draft API not built in: EINVAL)"
    time.sleep(0.2)
    before = vm_rss_kib()
    done, release = mp.Event(), mp.Event()
    child = mp.Process(target=dealers, args=(endpoint, args.peers, not args.silent, done, release))
    child.start()
    try:
        if not args.silent:
            for _ in range(args.peers):
                identity, body = router.recv_multipart()
                router.send_multipart([identity, body])
        if not done.wait(120):
            raise RuntimeError("the peers did not connect within 120 s")
        time.sleep(1.0)               # the handshakes of the last ones
        after = vm_rss_kib()
    finally:
        release.set()
        child.join(30)
        router.close()
        ctx.term()
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"libzmq {zmq.zmq_version()} (pyzmq {zmq.__version__}), {args.peers} peers over ipc"
          f"{', silent' if args.silent else ', one frame each way'}")
    print(f"ROUTER process RSS: {before:,} -> {after:,} KiB: "
          f"{(after - before) / args.peers:.1f} KiB per connection")
    print(f"ZMQ_IN_BATCH_SIZE / ZMQ_OUT_BATCH_SIZE settable: {batch_options}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
