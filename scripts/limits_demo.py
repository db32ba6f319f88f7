#!/usr/bin/env python3
"""Shows each resource bound refused, against a real broker started with small limits.

    python3 scripts/limits_demo.py

Starts ``python -m broker`` in a tmp dir with every ``--max-*`` flag set low, then
drives each bound past its limit through the public client and prints, per bound:
the flag and value, the call that went past it, and the code and text it got. A
last line says whether every bound answered its documented code (exit 0) or not.
The defaults are in the limits table of docs/operations.md (``python -m broker --help`` too).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from client import Client, ConnectError  # noqa: E402
sys.path.insert(0, str(ROOT / "scripts"))
from benchkit.tmp_broker import TmpBroker  # noqa: E402

FLAGS = {"--max-sessions": 3, "--max-sessions-per-connection": 2, "--max-backlog-bytes": 65536,
         "--max-runs-per-session": 1, "--max-run-entries": 3, "--max-run-bytes": 30000,
         "--max-sticky-bytes": 50000, "--max-groups": 3, "--max-conversations": 2,
         "--max-new-sessions-per-second": 1}


def hello_bye_loop(endpoint: str, rounds: int) -> dict:
    """Open and close a session ``rounds`` times on one raw connection (what churn
    looks like; our client opens a connection per session); the first refusal, or
    the last answer."""
    import msgpack
    import zmq

    from schemas.protocol import envelope, pack

    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.linger = 0
    sock.connect(endpoint)

    def request(env: dict) -> dict:
        sock.send(pack(env))
        while sock.poll(10_000):
            frame = msgpack.unpackb(sock.recv(), raw=False)
            for answer in frame if isinstance(frame, list) else [frame]:
                if answer.get("k") == "result" and answer.get("re") == env["id"]:
                    return answer
        return {"ok": False, "code": "no_answer", "error": "no answer within 10 s"}

    try:
        answer: dict = {}
        for n in range(rounds):
            answer = request(envelope("hello", id=f"h{n}", name="churner"))
            if not answer["ok"]:
                return answer
            request(envelope("bye", id=f"b{n}"))
        return answer
    finally:
        sock.close()


def main() -> int:
    extra = [str(part) for flag, value in FLAGS.items() for part in (flag, value)]
    broker = TmpBroker.start(*extra)
    endpoint, env = broker.endpoint, broker.env
    rows: list[tuple[str, str, str, str]] = []
    try:
        def connect(name: str, **kw):
            return Client.connect(name, endpoint=endpoint, timeout=15, **kw)

        def refused(flag: str, call: str, answer) -> None:
            if isinstance(answer, ConnectError):
                answer = {"ok": False, "code": answer.code, "error": str(answer)}
            rows.append((f"{flag} {FLAGS[flag]}", call, answer.get("code", "ok"),
                         answer.get("error", "")))

        refused("--max-new-sessions-per-second", "hello and bye 9 times on one connection",
                hello_bye_loop(endpoint, 9))
        for n in range(2):
            connect(f"conv{n}", agent="demo", channel=f"discord:{n}").close()
        try:
            connect("conv2", agent="demo", channel="discord:2")
        except ConnectError as exc:
            refused("--max-conversations", "a 3rd conversation of one agent", exc)
        host = connect("host")
        other = connect("other")
        try:
            connect("third")
        except ConnectError as exc:
            refused("--max-sessions-per-connection", "3rd connect from one process", exc)
        frozen, frozen_id = broker.peer("frozen")           # 3 sessions now, from two processes
        code = ("from client import Client, ConnectError\n"
                "try:\n    Client.connect('fourth', endpoint=%r, timeout=15)\n"
                "except ConnectError as exc:\n    print(exc.code, exc, sep='\\t')\n" % endpoint)
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                             text=True, timeout=30).stdout.strip().split("\t")
        rows.append(("--max-sessions 3", "4th session, from another process", out[0],
                     out[-1]))

        host.intercom(action="join", group="g1")
        refused("--max-groups", "join a 3rd group (default, g1, g2)",
                (host.intercom(action="join", group="g2"),
                 host.intercom(action="join", group="g3"))[1])

        host.intercom(action="leave", group="g2")
        host.intercom(action="leave", group="g1")
        host.register_run("run-a", [{"name": "plan"}])
        refused("--max-runs-per-session", "register a 2nd run", host.register_run("run-b", []))
        other.register_run("run-c", [{"name": "plan"}])
        host.intercom(action="send", to="workflow:run-a/plan", message="a" * 20_000)
        other.intercom(action="send", to="workflow:run-c/plan", message="c" * 29_000)
        refused("--max-sticky-bytes", "queue 2 KB with 49 KB kept broker-wide",
                host.intercom(action="send", to="workflow:run-a/plan", message="a" * 2_000))
        refused("--max-run-bytes", "queue 2 KB in a run keeping 29 KB",
                other.intercom(action="send", to="workflow:run-c/plan", message="c" * 2_000))
        for n in range(2):
            host.intercom(action="send", to=f"workflow:run-a/later{n}", message=f"entry {n}")
        refused("--max-run-entries", "queue a 4th entry in one run",
                host.intercom(action="send", to="workflow:run-a/later9", message="entry 9"))

        os.kill(frozen.pid, signal.SIGSTOP)
        answer = {"ok": True}
        for _ in range(100):
            answer = other.intercom(action="send", to=frozen_id, message="x" * 10_000)
            if not answer["ok"]:
                break
        refused("--max-backlog-bytes", "send 10 KB messages to a frozen consumer", answer)
        os.kill(frozen.pid, signal.SIGCONT)
        host.close(), other.close()
    finally:
        broker.stop()
    expected = {"--max-sessions": "too_many_sessions", "--max-sessions-per-connection": "too_many_sessions",
                "--max-groups": "too_many_groups", "--max-runs-per-session": "too_many_runs",
                "--max-run-entries": "run_full", "--max-run-bytes": "run_full",
                "--max-sticky-bytes": "sticky_storage_full", "--max-backlog-bytes": "target_backlogged",
                "--max-conversations": "too_many_conversations",
                "--max-new-sessions-per-second": "session_rate_limited"}
    ok = True
    for flag_value, call, code, text in rows:
        good = code == expected[flag_value.split()[0]]
        ok &= good
        print(f"{flag_value:<34} {call:<44} {code:<20} {'' if good else 'UNEXPECTED '}{text}")
    print("every bound refused with its code" if ok and len(rows) == len(expected)
          else "SOME BOUND DID NOT ANSWER AS DOCUMENTED")
    return 0 if ok and len(rows) == len(expected) else 1


if __name__ == "__main__":
    sys.exit(main())
