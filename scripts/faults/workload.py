"""The clients: worker processes that make traffic and record a history.

What it owns: the worker program (``python3 -m faults.workload``, run inside a client
host's namespace by :class:`Worker`) and the history it writes, one JSON line per event:

- ``invoke`` / ``complete``: an operation (``f``: register, send, ask, connect) with
  its op number, monotonic times, and the answer (``ok``, ``code``, ``queued``,
  ``delivered``, ``messageId``); every send and ask carries a unique ``token`` in
  its body, so a receipt names the operation it is for;
- ``recv``: a message a session took (``session`` label, ``id``, ``from``, ``to``,
  ``token``, time, and ``broker``: the id of the broker whose welcome the session had
  last, so a message that came after a failover shows where it came from);
- ``broker``: a receiving session's broker (its latest welcome's) when it changes;
- ``session``: a session's id when it connects and whenever it differs after a call;
- ``started``: an invoke job the responder was handed (an ``invocation`` event), each
  one recorded as it arrives, a second hand-over of one job too: its ``job`` id, the
  ``token`` its invoke carried as the reason, the broker the session was on.

Roles (``--role``): ``sticky`` is a workflow host that registers runs with a ``live``
stage (connected from the start) and a ``late`` one (connected only when the worker
is told ``drain``), and a sender on another broker that sends to both, round robin;
``live`` is two named sessions on different brokers, one sending and asking (and, on
a thread of its own, sending plain messages every interval, so an ask held by a
receiver cut off does not stop its sends), the other receiving and replying; ``invoke`` is two conversations of the agent
:data:`AGENT` on different brokers: an invoker that invokes the other (operation
``invoke``, its answer's job id kept as ``job``), and a responder that starts every
job handed to it, takes a short turn and finishes it (operation ``finish``). The
agent has ``invoke = true`` in every broker's data directory (``cluster.Broker``).
With ``--only a`` (``b``) the live role is its sender (its receiver) alone: the harness
runs the two in workers on two hosts when there is one broker, so that cutting the
receiver's host leaves its sender sending. Every session lists every broker's
endpoint (its home broker first). The worker
prints ``ready`` once its sessions are connected; on stdin it takes ``drain`` and
``stop``; a responder goes on serving until ``stop``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import threading
import time
from pathlib import Path

ASK_TIMEOUT_S = 8.0
RETRY_S = 0.5
PEER_WAIT_S = 20.0      # a peer on another broker shows within seconds once linked
AGENT = "faults"        # the invoke role's agent (cluster.Broker configures it)
TURN_S = 0.1            # a responder's turn, from the invocation to finish_invocation
HOMES: dict[str, str] = {}      # endpoint -> broker name (from --names)


class History:
    """JSON lines, written and flushed one at a time from any thread."""

    def __init__(self, path: Path) -> None:
        self.file = open(path, "a", buffering=1)
        self.lock = threading.Lock()
        self.ops = 0
        self.home: dict[str, str] = {}     # session label -> its home broker's name
        self.labels: dict[int, str] = {}   # id(session) -> its label

    def write(self, **event) -> None:
        event.setdefault("t", time.monotonic())
        with self.lock:
            self.file.write(json.dumps(event) + "\n")

    def call(self, f: str, label: str, do, keep: dict[str, str] | None = None, **fields) -> dict:
        """Run ``do()`` as operation ``f`` of session ``label``, recording its invoke
        and completion; ``side`` is the session's home broker. ``keep``: fields of the
        answer recorded in the completion too (answer key -> field name)."""
        with self.lock:
            self.ops += 1
            op = self.ops
        side, invoked = self.home.get(label), time.monotonic()
        self.write(type="invoke", op=op, f=f, session=label, side=side, t=invoked, **fields)
        try:
            answer = do()
        except Exception as exc:      # ConnectError and the like: an answer, recorded
            answer = {"ok": False, "code": getattr(exc, "code", type(exc).__name__),
                      "error": str(exc)[:200]}
        self.write(type="complete", op=op, f=f, session=label, side=side, invoked=invoked,
                   ok=bool(answer.get("ok")),
                   code=answer.get("code"), queued=bool(answer.get("queued")),
                   delivered=bool(answer.get("delivered")), messageId=answer.get("messageId"),
                   **{name: answer.get(key) for key, name in (keep or {}).items()}, **fields)
        return answer


class Worker:
    """One worker process in a client host (the harness's handle on it)."""

    def __init__(self, prefix: list[str], args: list[str], history: Path, env: dict, cwd: Path):
        self.history = history
        self.proc = subprocess.Popen([*prefix, sys.executable, "-m", "faults.workload",
                                      "--history", str(history), *args],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=open(history.with_suffix(".err"), "wb"),
                                     text=True, env=env, cwd=cwd)

    def wait_ready(self, timeout: float) -> None:
        """Wait for the worker's ``ready`` line. Raises RuntimeError."""
        import select
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if select.select([self.proc.stdout], [], [], 0.5)[0]:
                line = self.proc.stdout.readline()
                if line.strip() == "ready":
                    return
                if not line:
                    break
        err = self.history.with_suffix(".err").read_text(errors="replace")[-1500:]
        raise RuntimeError(f"worker {self.history.name} not ready: {err}")

    def tell(self, word: str) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.write(word + "\n")
            self.proc.stdin.flush()

    def stop(self, timeout: float = 30.0) -> None:
        try:
            self.tell("stop")
        except BrokenPipeError:
            pass
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)


# -- the worker program ----------------------------------------------------------------

def connect(history: History, label: str, endpoints: list[str], keys, stop: threading.Event,
            **kwargs):
    """A session (its home broker: the first of ``endpoints``), retried until it
    connects or ``stop``; None when stopped."""
    from client import Client
    history.home[label] = HOMES[endpoints[0]]
    while not stop.is_set():
        session = None

        def attempt():
            nonlocal session
            session = Client.connect(endpoint=endpoints, timeout=15, curve_server_key=keys.server_key,
                                     curve_public_key=keys.public_key,
                                     curve_secret_key=keys.secret_key, **kwargs)
            return {"ok": True}
        history.call("connect", label, attempt)
        if session is not None:
            history.labels[id(session)] = label
            history.write(type="session", session=label, id=session.id, name=kwargs.get("name"))
            return session
        stop.wait(RETRY_S)
    return None


def receive_loop(history: History, label: str, session, stop: threading.Event,
                 reply: bool = False) -> None:
    """Take every message until ``stop``, recording each (and answering asks), with the
    broker that last welcomed the session (a ``broker`` line when that changes)."""
    broker = None
    while not stop.is_set():
        msg = session.receive(0.3)
        if session.welcome.get("brokerId") != broker:
            broker = session.welcome.get("brokerId")
            history.write(type="broker", session=label, broker=broker)
        if msg is None:
            continue
        history.write(type="recv", session=label, id=msg.get("id"), sender=msg.get("from"),
                      to=msg.get("target"), token=msg.get("message"), broker=broker)
        if reply and msg.get("expectsReply"):
            session.intercom(action="reply", message=f"re:{msg.get('message')}")


def watch_id(history: History, label: str, session, known: dict) -> None:
    if session.id != known.get(label):
        known[label] = session.id
        history.write(type="session", session=label, id=session.id,
                      reason=session.welcome.get("reason"), broker=session.welcome.get("brokerId"))


def wait_listed(history: History, what: str, stop: threading.Event, listed) -> None:
    """Ask ``listed()`` again until it is true (a peer on another broker, told over
    their link), ``stop``, or :data:`PEER_WAIT_S`; a ``note`` line when it never was."""
    deadline = time.monotonic() + PEER_WAIT_S
    while not stop.is_set() and not listed():
        if time.monotonic() > deadline:
            history.write(type="note", what=f"not within {PEER_WAIT_S:g} s: {what}")
            return
        stop.wait(0.2)       # asking the broker again


def sticky(args, history: History, keys, endpoints: list[str], stop, drain) -> list:
    home = rotated(endpoints, args.index)
    host = connect(history, "host", home, keys, stop, name=f"{args.tag}-host{args.index}")
    deadline = time.monotonic() + PEER_WAIT_S
    while host.intercom(action="status").get("broker", {}).get("otherBrokersLive", 0) \
            < len(endpoints) - 1 and time.monotonic() < deadline:
        stop.wait(0.2)       # asking the broker again: leases are read every second
    runs, sessions, threads = {}, [host], []
    for k in range(args.runs):
        run = f"{args.tag}-w{args.index}-r{k}"
        while not stop.is_set():
            answer = history.call("register", "host", lambda: host.register_run(
                run, [{"name": "live"}, {"name": "late"}]), run=run)
            if answer.get("ok"):
                runs[run] = answer["grants"]
                break
            stop.wait(RETRY_S)
    for run, grants in runs.items():
        label = f"{run}/live"
        stage = connect(history, label, home, keys, stop, name="live", kind="stage",
                        stage=f"workflow:{run}/live", grant=grants[f"workflow:{run}/live"],
                        transcript=label)
        sessions.append(stage)
        threads.append(threading.Thread(target=receive_loop, args=(history, label, stage, stop)))
    sender = connect(history, "sender", rotated(endpoints, args.index + 1), keys, stop,
                     name=f"{args.tag}-sender{args.index}")
    sessions.append(sender)
    for run in runs:       # a run's stages take sends from members of its group
        while not stop.is_set() and not history.call("join", "sender", lambda: sender.intercom(
                action="join", group=f"workflow:{run}"), run=run).get("ok"):
            stop.wait(RETRY_S)
    for thread in threads:
        thread.start()
    print("ready", flush=True)
    known: dict = {}
    watch_id(history, "sender", sender, known)
    n = 0
    while not drain.is_set() and not stop.is_set():
        run = list(runs)[n % len(runs)]
        stage = ("live", "late")[(n // len(runs)) % 2]
        token = f"{args.tag}/w{args.index}/{n}"
        history.call("send", "sender", lambda: sender.intercom(
            action="send", to=f"workflow:{run}/{stage}", message=token),
            token=token, to=f"workflow:{run}/{stage}")
        watch_id(history, "sender", sender, known)
        n += 1
        drain.wait(args.interval)
    for run, grants in runs.items():
        label = f"{run}/late"
        stage = connect(history, label, home, keys, stop, name="late", kind="stage",
                        stage=f"workflow:{run}/late", grant=grants[f"workflow:{run}/late"],
                        transcript=label)
        if stage is None:
            break
        sessions.append(stage)
        thread = threading.Thread(target=receive_loop, args=(history, label, stage, stop))
        thread.start()
        threads.append(thread)
    return sessions + threads


def live(args, history: History, keys, endpoints: list[str], stop, drain) -> list:
    a_name, b_name = f"{args.tag}-a{args.index}", f"{args.tag}-b{args.index}"
    if args.only == "b":      # the receiver alone (its sender is a worker on another host)
        b = connect(history, "b", rotated(endpoints, args.index + 1), keys, stop, name=b_name)
        receiver = threading.Thread(target=receive_loop, args=(history, "b", b, stop, True))
        receiver.start()
        print("ready", flush=True)
        return [b, receiver]
    held = []
    if args.only != "a":
        b = connect(history, "b", rotated(endpoints, args.index + 1), keys, stop, name=b_name)
        receiver = threading.Thread(target=receive_loop, args=(history, "b", b, stop, True))
        receiver.start()
        held = [b, receiver]
    a = connect(history, "a", rotated(endpoints, args.index), keys, stop, name=a_name)
    wait_listed(history, f"{b_name} listed", stop, lambda: any(   # b's broker told a's
        row.get("name") == b_name for row in a.intercom(action="list").get("sessions", [])))
    print("ready", flush=True)
    known: dict = {}
    watch_id(history, "a", a, known)
    # Plain sends of their own, every interval: the loop below waits on each ask, which
    # a receiver cut off holds until it is back, so without them a cut of the
    # receiver's clients would see next to no live sends while it holds.
    pacer = threading.Thread(target=pace, args=(args, history, a, b_name, drain, stop))
    pacer.start()
    n = 0
    while not drain.is_set() and not stop.is_set():
        token = f"{args.tag}/l{args.index}/{n}"
        if n % 2:
            history.call("ask", "a", lambda: a.intercom(action="ask", to=b_name, message=token,
                                                         timeout=ASK_TIMEOUT_S),
                         token=token, to=b_name)
        else:
            history.call("send", "a", lambda: a.intercom(action="send", to=b_name, message=token),
                         token=token, to=b_name)
        watch_id(history, "a", a, known)
        if held:
            watch_id(history, "b", held[0], known)
        n += 1
        drain.wait(args.interval)
    return [a, *held, pacer]


def pace(args, history: History, a, b_name: str, drain, stop) -> None:
    """Session ``a``'s plain sends to ``b_name``, one every interval until ``drain``
    (tokens ``<tag>/l<index>/p<n>``), whatever the asks wait for."""
    n = 0
    while not drain.is_set() and not stop.is_set():
        token = f"{args.tag}/l{args.index}/p{n}"
        history.call("send", "a", lambda: a.intercom(action="send", to=b_name, message=token),
                     token=token, to=b_name)
        n += 1
        drain.wait(args.interval)


def invoke(args, history: History, keys, endpoints: list[str], stop, drain) -> list:
    target = f"discord:{args.tag}-responder{args.index}"
    responder = connect(history, "responder", rotated(endpoints, args.index + 1), keys, stop,
                        name=f"{args.tag}-responder{args.index}", agent=AGENT, channel=target)
    invoker = connect(history, "invoker", rotated(endpoints, args.index), keys, stop,
                      name=f"{args.tag}-invoker{args.index}", agent=AGENT,
                      channel=f"discord:{args.tag}-invoker{args.index}")
    server = threading.Thread(target=serve, args=(history, "responder", responder, stop))
    server.start()
    wait_listed(history, f"{target} listed connected", stop, lambda: any(   # told over the link
        row.get("session") == target and row.get("connected")
        for row in invoker.list_sessions().get("sessions", [])))
    print("ready", flush=True)
    known: dict = {}
    watch_id(history, "invoker", invoker, known)
    watch_id(history, "responder", responder, known)
    n = 0
    while not drain.is_set() and not stop.is_set():
        token = f"{args.tag}/j{args.index}/{n}"
        history.call("invoke", "invoker", lambda: invoker.invoke(session=target, reason=token),
                     keep={"id": "job"}, token=token, to=target)
        watch_id(history, "invoker", invoker, known)
        watch_id(history, "responder", responder, known)
        n += 1
        drain.wait(args.interval)
    return [invoker, responder, server]


def serve(history: History, label: str, session, stop: threading.Event) -> None:
    """Start every job handed to ``session`` until ``stop``: record it, take a turn of
    :data:`TURN_S`, finish it. A job handed over twice is recorded twice."""
    while not stop.is_set():
        event = session.next_event(0.3)
        if event is None or event.get("event") != "invocation":
            continue
        job = event.get("id")
        history.write(type="started", session=label, job=job, token=event.get("reason"),
                      sender=event.get("fromSession"), broker=session.welcome.get("brokerId"))
        stop.wait(TURN_S)
        history.call("finish", label, lambda: session.finish_invocation(job, ok=True), job=job)


def rotated(endpoints: list[str], start: int) -> list[str]:
    start %= len(endpoints)
    return endpoints[start:] + endpoints[:start]


ROLES = {"sticky": sticky, "live": live, "invoke": invoke}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--history", type=Path, required=True)
    parser.add_argument("--role", choices=sorted(ROLES), required=True)
    parser.add_argument("--index", type=int, required=True)
    parser.add_argument("--endpoints", required=True)
    parser.add_argument("--names", required=True, help="the brokers' names, as --endpoints")
    parser.add_argument("--keys", required=True)
    parser.add_argument("--tag", required=True)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--interval", type=float, default=0.3)
    parser.add_argument("--only", choices=("a", "b"),
                        help="live role: only the sender a, or only the receiver b")
    args = parser.parse_args()
    from client.keys import from_directory
    keys = from_directory(args.keys, "alice")
    HOMES.update(zip(args.endpoints.split(","), args.names.split(",")))
    history = History(args.history)
    stop, drain = threading.Event(), threading.Event()

    def commands():
        for line in sys.stdin:
            if line.strip() == "drain":
                drain.set()
            elif line.strip() == "stop":
                break
        drain.set()
        stop.set()
    threading.Thread(target=commands, daemon=True).start()
    held = ROLES[args.role](args, history, keys, args.endpoints.split(","), stop, drain)
    stop.wait()
    for one in held:
        if isinstance(one, threading.Thread):
            one.join(10)
    for one in held:
        if not isinstance(one, threading.Thread):
            stats = one.inbox_statistics()
            history.write(type="final", session=history.labels.get(id(one)), id=one.id,
                          connected=one.connected, broker=one.welcome.get("brokerId"),
                          duplicates_dropped=stats.duplicates_dropped)
            one.close()

if __name__ == "__main__":
    main()
