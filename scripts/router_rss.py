#!/usr/bin/env python3
"""libzmq's own memory per connection: the floor under the broker's RSS per session.

    python3 scripts/router_rss.py                  # 1,000 DEALERs on one ROUTER, ipc
    python3 scripts/router_rss.py --peers 200 --silent
    python3 scripts/router_rss.py --peers 200 --burst 1000   # + what a burst leaves behind

A bare pyzmq ROUTER (set up as the broker sets up its own: linger 0, high-water marks
100,000) in this process; a child process connects ``--peers`` DEALERs to it over
ipc, each sends one 200-byte frame and reads the ROUTER's answer (``--silent``: they
only connect). With ``--burst N`` the ROUTER then queues N 150-byte frames to every
peer before the peers read them all (as a join storm's presence events do), and the
RSS is read again once they have: what the peers' pipes keep after the burst.
Printed: this process's VmRSS growth per connection, and whether the
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


def dealers(endpoint: str, n: int, talk: bool, burst: int, done, go, drained, release) -> None:
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
    if burst:
        go.wait(120)
        for sock in socks:
            for _ in range(burst):
                sock.recv()
        drained.set()
    release.wait(120)
    for sock in socks:
        sock.close()
    ctx.term()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--peers", type=int, default=1000)
    p.add_argument("--silent", action="store_true", help="peers connect and send nothing")
    p.add_argument("--burst", type=int, default=0,
                   help="then queue N frames to each peer at once, and read RSS once drained")
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
    done, go, drained, release = mp.Event(), mp.Event(), mp.Event(), mp.Event()
    talk = not args.silent or bool(args.burst)      # a burst needs the peers' identities
    child = mp.Process(target=dealers, args=(endpoint, args.peers, talk, args.burst, done, go,
                                             drained, release))
    child.start()
    try:
        identities = []
        if talk:
            for _ in range(args.peers):
                identity, body = router.recv_multipart()
                router.send_multipart([identity, body])
                identities.append(identity)
        if not done.wait(120):
            raise RuntimeError("the peers did not connect within 120 s")
        time.sleep(1.0)               # the handshakes of the last ones
        after = vm_rss_kib()
        drained_rss = None
        if args.burst:
            frame = b"e" * 150
            for _ in range(args.burst):
                for identity in identities:
                    router.send_multipart([identity, frame])
            go.set()
            if not drained.wait(300):
                raise RuntimeError("the peers did not read the burst within 300 s")
            time.sleep(0.5)
            drained_rss = vm_rss_kib()
    finally:
        release.set()
        child.join(30)
        router.close()
        ctx.term()
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"libzmq {zmq.zmq_version()} (pyzmq {zmq.__version__}), {args.peers} peers over ipc"
          f"{', one frame each way' if talk else ', silent'}")
    print(f"ROUTER process RSS: {before:,} -> {after:,} KiB: "
          f"{(after - before) / args.peers:.1f} KiB per connection")
    if drained_rss is not None:
        print(f"after {args.burst} frames queued to each peer and read: {drained_rss:,} KiB: "
              f"{(drained_rss - after) / args.peers:.1f} KiB more per connection, kept")
    print(f"ZMQ_IN_BATCH_SIZE / ZMQ_OUT_BATCH_SIZE settable: {batch_options}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
