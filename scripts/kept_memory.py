#!/usr/bin/env python3
"""What keeping unacknowledged live messages (receipts) costs the broker in memory.

    python3 scripts/kept_memory.py                     # 100 sessions x 1,000 messages of 100 B
    python3 scripts/kept_memory.py --sessions 50 --messages 2000 --size 200
    python3 scripts/kept_memory.py --run-length 1       # sends round robin: one message a delivery

Two runs, each on a fresh broker of its own (``python -m broker`` on ipc sockets in a
tmp dir, default windows; see benchkit.tmp_broker): N receiver sessions on raw DEALER
sockets (a hello each, in a child process), and one sender session (the Python client)
that sends each receiver ``--messages`` live messages of ``--size`` bytes with
``send_nowait`` (``--run-length`` messages to one receiver before the next: the
default, all of them, lets the client pack them into ``sends`` envelopes, as a bulk
sender does). The receivers read every frame the broker writes, and send ``hb`` every
0.25 s, as the Python client does; they differ only in the ``read`` they report:

``kept``  ``read: 0`` always: the broker keeps every message (the receipts rule: until
          the client reports it read), as for a receiver whose client never acknowledges;
``read``  the bytes they read (as the Python client reports): kept messages are let go.

The sender waits every ``--window`` messages (1,000) until the receivers have what it
sent and have reported it (an ``hb``, then a ``status`` call whose answer shows the
broker read the report): so the read run holds at most a window unacknowledged at
once, and its RSS is not the peak of a burst kept until the next report (CPython
keeps the memory it grew to). Once every receiver has every message and reported,
the broker's VmRSS is read from /proc/<pid>/status.

Printed per run: RSS at start, with the sessions connected, after the messages; the
growth per session and per message; the last message's receipt (``status`` with
``messageId``: ``delivered`` when kept, ``read`` when read); then the difference
kept - read (what keeping costs: in all, per session, per message) and the ratio of
the two growths; and for the kept run, RSS once the receivers report everything read
at last (CPython rarely hands freed memory back: expect no change).

``--broker-tree DIR`` runs the broker of another checkout, e.g. a worktree of the
commit before receipts, where nothing is kept: its growth is what the traffic alone
leaves (the ids each receiver's dedup remembers, the allocator's high water), so the
read run's excess over it is what receipts hold once messages are read.
Figures only, no assertions; about 15 s for the defaults.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for _path in (ROOT, ROOT / "scripts"):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

import zmq  # noqa: E402

from benchkit.tmp_broker import TmpBroker  # noqa: E402
from schemas.protocol import envelope, pack, unpack_frame  # noqa: E402

HB_EVERY_S = 0.25          # the Python client reports reads 0.25 s after a message (ACK_DELAY_S)
STEP_TIMEOUT_S = 60.0


def vm_kib(pid: int, field: str = "VmRSS") -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/{pid}/status")


# -- the receivers (a child process) -----------------------------------------------------

class Receivers:
    """N DEALER sockets, one session each: every frame read and counted; ``hb`` every
    HB_EVERY_S with ``read`` = the bytes read since the hello, or 0 while not ``acking``."""

    def __init__(self, endpoint: str, n: int, prefix: str, acking: bool) -> None:
        self.ctx = zmq.Context()
        self.acking = acking
        self.socks: list = []
        self.poller = zmq.Poller()
        for i in range(n):
            sock = self.ctx.socket(zmq.DEALER)
            sock.linger = 0
            sock.rcvhwm = 0           # read everything the broker writes: no push-back here
            sock.connect(endpoint)
            sock.send(pack(envelope("hello", id=f"h{i}", name=f"{prefix}{i}",
                                    sessionKind="interactive")))
            self.socks.append(sock)
            self.poller.register(sock, zmq.POLLIN)
        self.read = [0] * n
        self.msgs = [0] * n
        self.welcomed = [False] * n
        self.settles = 0
        self.settled = [False] * n
        self.index = {sock: i for i, sock in enumerate(self.socks)}
        self.next_hb = time.monotonic() + HB_EVERY_S

    def service(self, wait_ms: int = 20) -> None:
        for sock, _ in self.poller.poll(wait_ms):
            i = self.index[sock]
            while True:
                try:
                    frame = sock.recv(zmq.NOBLOCK)
                except zmq.Again:
                    break
                self.read[i] += len(frame)
                for env in unpack_frame(frame, 1 << 30):
                    kind = env.get("k")
                    if kind == "msgs":
                        self.msgs[i] += len(env.get("ids") or ())
                    elif kind == "msg":
                        self.msgs[i] += 1
                    elif kind == "result" and env.get("re") == f"h{i}" and env.get("ok"):
                        self.welcomed[i] = True
                    elif kind == "result" and env.get("re") == f"s{self.settles}":
                        self.settled[i] = True
        if time.monotonic() >= self.next_hb:
            self.next_hb = time.monotonic() + HB_EVERY_S
            self.beat()

    def beat(self) -> None:
        for i, sock in enumerate(self.socks):
            if self.welcomed[i]:
                sock.send(pack(envelope("hb", read=self.read[i] if self.acking else 0)))

    def settle(self) -> None:
        """An hb on every socket, then a ``status`` call, and wait for every call's
        answer: the broker handles a connection's envelopes in order, so it has read
        the report by then."""
        self.settles += 1
        self.beat()
        self.next_hb = time.monotonic() + HB_EVERY_S
        tag = f"s{self.settles}"
        for sock in self.socks:
            sock.send(pack(envelope("call", id=tag, action="status")))
        self.settled = [False] * len(self.socks)
        deadline = time.monotonic() + STEP_TIMEOUT_S
        while not all(self.settled) and time.monotonic() < deadline:
            self.service()
        if not all(self.settled):
            raise RuntimeError(f"{self.settled.count(False)} receivers' status calls unanswered")


def receivers_main(endpoint: str, n: int, prefix: str, acking: bool, conn) -> None:
    crowd = Receivers(endpoint, n, prefix, acking)
    deadline = time.monotonic() + STEP_TIMEOUT_S
    while not all(crowd.welcomed) and time.monotonic() < deadline:
        crowd.service()
    conn.send(("welcomed", sum(crowd.welcomed)))
    try:
        while True:
            crowd.service()
            if conn.poll():
                command, *rest = conn.recv()
                if command == "sync":          # until each has its count, then a settled hb
                    expected = rest[0]
                    deadline = time.monotonic() + STEP_TIMEOUT_S
                    while any(got < want for got, want in zip(crowd.msgs, expected)) \
                            and time.monotonic() < deadline:
                        crowd.service()
                    crowd.settle()
                    conn.send(("synced", sum(crowd.msgs), min(crowd.msgs), sum(crowd.read)))
                elif command == "ack":         # report everything read at last
                    crowd.acking = True
                    crowd.settle()
                    conn.send(("acked", sum(crowd.read)))
                elif command == "stop":
                    break
    finally:
        for sock in crowd.socks:
            sock.close()
        crowd.ctx.term()


# -- one run -------------------------------------------------------------------------------

def receipt(sender, msg_id: str | None) -> str:
    """The receipt's state, or the refusal's code (a broker without receipts)."""
    answer = sender.intercom(action="status", messageId=msg_id)
    return answer.get("state") or answer.get("code") or "?"


def one_run(mode: str, args) -> dict:
    from client import Client
    broker = TmpBroker.start(tree=args.broker_tree or ROOT)
    pid = broker.popen.pid
    parent, child = mp.Pipe()
    prefix = f"{mode}-r"
    proc = mp.Process(target=receivers_main, args=(broker.endpoint, args.sessions, prefix,
                                                   mode == "read", child))
    sender = None
    out: dict = {"mode": mode}
    try:
        time.sleep(0.5)
        out["start"] = vm_kib(pid)
        proc.start()
        if not parent.poll(STEP_TIMEOUT_S):
            raise RuntimeError("the receivers did not connect")
        _, welcomed = parent.recv()
        if welcomed != args.sessions:
            raise RuntimeError(f"only {welcomed} of {args.sessions} receivers were welcomed")
        sender = Client.connect(name=f"{mode}-sender", endpoint=broker.endpoint)
        time.sleep(0.5)
        out["connected"] = vm_kib(pid)
        text = "m" * args.size
        began = time.monotonic()
        futures: list = []
        answers: list = []
        expected = [0] * args.sessions
        unsynced = 0
        syncs = 0

        def sync() -> tuple:
            """Every send so far answered, and every receiver has what it was sent and
            has reported (its read, or 0) in an hb the broker answered."""
            answers.extend(f.result(STEP_TIMEOUT_S) for f in futures)
            futures.clear()
            parent.send(("sync", list(expected)))
            if not parent.poll(STEP_TIMEOUT_S + 10):
                raise RuntimeError("the receivers did not get every message")
            return parent.recv()

        for start in range(0, args.messages, args.run_length):
            count = min(args.run_length, args.messages - start)
            for i in range(args.sessions):
                target = f"{prefix}{i}"
                futures += [sender.send_nowait(target, text) for _ in range(count)]
                expected[i] += count
                unsynced += count
                if args.window and unsynced >= args.window:
                    sync()
                    syncs += 1
                    unsynced = 0
        _, got, least, read = sync()
        out["send_s"] = time.monotonic() - began
        out["syncs"] = syncs
        refused = [a for a in answers if not a.get("ok")]
        out["refused"] = len(refused)
        if refused:
            out["first_refusal"] = refused[0]
        out.update(received=got, least=least, read_bytes=read)
        time.sleep(0.3)
        out["after"] = vm_kib(pid)
        out["hwm"] = vm_kib(pid, "VmHWM")
        last = answers[-1].get("messageId")
        out["receipt_last"] = receipt(sender, last)
        if mode == "kept":
            parent.send(("ack",))
            if parent.poll(STEP_TIMEOUT_S):
                parent.recv()
                time.sleep(0.3)
                out["after_ack"] = vm_kib(pid)
                out["receipt_after_ack"] = receipt(sender, last)
        parent.send(("stop",))
    finally:
        if sender is not None:
            sender.close()
        proc.join(15)
        if proc.is_alive():
            proc.kill()
            proc.join(5)
        broker.stop()
    return out


def mib(kib: float) -> str:
    return f"{kib / 1024:,.1f} MiB"


def report(runs: dict[str, dict], args) -> None:
    n, m = args.sessions, args.messages
    total = n * m
    print(f"{n} sessions x {m:,} live messages of {args.size} B ({total:,} in all), "
          f"sent with send_nowait in runs of {min(args.run_length, m):,} to one receiver"
          + (f"; broker from {args.broker_tree}" if args.broker_tree else ""))
    width = 22
    print(f"{'':34}" + "".join(f"{name:>{width}}" for name in runs))
    rows = [("broker RSS at start", lambda r: mib(r["start"])),
            ("with the sessions connected", lambda r: mib(r["connected"])),
            ("after the messages", lambda r: mib(r["after"])),
            ("  peak (VmHWM)", lambda r: mib(r["hwm"])),
            ("growth from connected", lambda r: mib(r["after"] - r["connected"])),
            ("  per session", lambda r: f"{(r['after'] - r['connected']) / n:,.1f} KiB"),
            ("  per message", lambda r: f"{(r['after'] - r['connected']) * 1024 / total:,.0f} B"),
            ("sessions' cost (connected-start)/N", lambda r: f"{(r['connected'] - r['start']) / n:,.1f} KiB"),
            ("sending took (syncs)", lambda r: f"{r['send_s']:.1f} s ({r['syncs']})"),
            ("refused sends", lambda r: str(r["refused"])),
            ("received (least per session)", lambda r: f"{r['received']:,} ({r['least']:,})"),
            ("receipt of the last message", lambda r: r["receipt_last"])]
    for title, cell in rows:
        print(f"{title:34}" + "".join(f"{cell(r):>{width}}" for r in runs.values()))
    kept, read = runs.get("kept"), runs.get("read")
    if kept and read:
        diff = (kept["after"] - kept["connected"]) - (read["after"] - read["connected"])
        print()
        print(f"keeping costs (kept growth - read growth): {mib(diff)} in all, "
              f"{diff / n:,.1f} KiB per session, {diff * 1024 / total:,.0f} B per unacknowledged "
              f"message ({args.size} B of text each: x{diff * 1024 / total / args.size:.1f})")
        grown = read["after"] - read["connected"]
        if grown > 0:
            print(f"ratio of growths kept / read: {(kept['after'] - kept['connected']) / grown:.2f}")
        print(f"ratio of RSS after the messages kept / read: {kept['after'] / read['after']:.2f}")
        if "after_ack" in kept:
            print(f"kept run, once the receivers reported everything read: {mib(kept['after_ack'])} "
                  f"({mib(kept['after_ack'] - kept['after'])} from before; receipt of the last: "
                  f"{kept['receipt_after_ack']})")
    for r in runs.values():
        if r.get("refused"):
            print(f"{r['mode']}: first refusal: {r['first_refusal']}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sessions", type=int, default=100)
    p.add_argument("--messages", type=int, default=1000, help="per session")
    p.add_argument("--size", type=int, default=100, help="bytes of text per message")
    p.add_argument("--run-length", type=int, default=1000,
                   help="messages sent to one receiver before the next (1: round robin)")
    p.add_argument("--window", type=int, default=1000,
                   help="messages sent before the sender waits until the receivers have them "
                        "and reported (0: never): what the read run holds at once")
    p.add_argument("--only", choices=("kept", "read"), help="one of the two runs")
    p.add_argument("--broker-tree", type=Path, metavar="DIR",
                   help="run the broker from another checkout (e.g. a worktree of the commit "
                        "before receipts, where nothing is kept: both runs then show what "
                        "the traffic alone leaves)")
    args = p.parse_args()
    args.run_length = max(1, args.run_length)
    began = time.monotonic()
    runs = {}
    for mode in ("kept", "read"):
        if args.only in (None, mode):
            runs[mode] = one_run(mode, args)
    report(runs, args)
    print(f"({time.monotonic() - began:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
