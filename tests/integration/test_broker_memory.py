"""What refused requests cost the broker process: nothing that outlives the answer.

Raw DEALERs open session after session, one connection each, as client processes
do (one connection saying hello again and again is churn, which the broker bounds);
each session sends one refused request carrying a big field and leaves before the
next one opens. The broker's VmRSS is read from /proc before and after.
"""

from __future__ import annotations

import uuid

import msgpack
import zmq

from schemas.limits import PROTOCOL_VERSION

FIELD = "x" * 250_000


def vm_rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise AssertionError(f"no VmRSS for pid {pid}")


def ask(sock: zmq.Socket, kind: str, **fields) -> dict:
    """Send one request and return its result (other frames are skipped)."""
    msg_id = str(uuid.uuid4())
    sock.send(msgpack.packb({"v": PROTOCOL_VERSION, "k": kind, "id": msg_id, **fields},
                            use_bin_type=True))
    while True:
        assert sock.poll(10_000), f"no answer to {kind} within 10 s"
        value = msgpack.unpackb(sock.recv(), raw=False)
        for env in value if isinstance(value, list) else [value]:
            if env.get("k") == "result" and env.get("re") == msg_id:
                return env


def refused_supervisor_asks(endpoint: str, count: int) -> None:
    """``count`` sessions come and go, each refused one supervisor ask with a big field:
    half an undeclared field, half the message (none of them has a parent)."""
    for n in range(count):
        sock = zmq.Context.instance().socket(zmq.DEALER)
        sock.linger = 0
        sock.connect(endpoint)
        try:
            assert ask(sock, "hello", name=f"child{n}")["ok"] is True
            big = {"message": "?", "junk": FIELD} if n % 2 else {"message": FIELD}
            answer = ask(sock, "supervisor", **big)
            assert answer["code"] == "not_supervisor", answer
            sock.send(msgpack.packb({"v": PROTOCOL_VERSION, "k": "bye"}, use_bin_type=True))
            # Answered after the bye was handled: the session has left.
            assert ask(sock, "probe")["code"] == "unknown_kind"
        finally:
            sock.close()


def test_refused_supervisor_asks_with_big_fields_leave_the_broker_memory_flat(broker):
    refused_supervisor_asks(broker.endpoint, 20)          # first-use costs, before the baseline
    before = vm_rss_mib(broker.pid)
    refused_supervisor_asks(broker.endpoint, 200)         # 50 MB sent
    grown = vm_rss_mib(broker.pid) - before
    assert grown < 20, f"the broker grew {grown:.1f} MiB for 200 refused requests of 250 KB"
