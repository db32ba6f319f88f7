"""What a kill -9 of one of two brokers on one database costs: time, loss, duplicates.

Broker A holds a workflow run (its host is on A, with both endpoints) and a live
receiver (also on A, with both endpoints); a sender on broker B keeps sending, one
send at a time, to the run's pending stage (sticky: answered ``queued``) and to the
receiver (live: answered ``delivered``). A is killed with SIGKILL mid-traffic. The
script prints, from the kill: when the host and the receiver were welcomed on B, when
B answered the first sticky send again (the run adopted), which refusals the sender
saw meanwhile, and then, after a stage session connects to B and takes everything:
how many sends answered ``queued`` it got, lost and twice, and the same for the live
receiver and ``delivered``.

Usage: python scripts/failover_times.py [--seconds-after 8] [--repeats 3]
"""

from __future__ import annotations

import argparse
import collections
import os
import shutil
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from benchkit.tmp_broker import TmpBroker  # noqa: E402
from client import Client  # noqa: E402
from tests.integration.multi_broker import wait_until as wait  # noqa: E402


MAX_STICKY = 45        # under the 50-entry cap of one stage's queue


def one_round(seconds_after: float, db: str | None = None) -> dict:
    """One kill -9 of broker A; ``db``: the brokers' database (default a SQLite file
    in a tmp dir; a postgresql:// URL for the PostgreSQL store)."""
    root = Path(tempfile.mkdtemp(prefix="ic-fo-", dir="/tmp"))
    db = db or str(root / "bus.db")
    a = TmpBroker.start("--db", db, "--broker-lease-s", "3")
    b = TmpBroker.start("--db", db, "--broker-lease-s", "3")
    both = [a.endpoint, b.endpoint]
    sessions = []
    try:
        host = Client.connect(name="host", endpoint=both, timeout=15)
        run = f"run-{uuid.uuid4().hex[:8]}"
        grants = host.register_run(run, [{"name": "plan"}])["grants"]
        receiver = Client.connect(name="receiver", endpoint=both, group=f"workflow:{run}",
                                  timeout=15)
        sender = Client.connect(name="sender", endpoint=b.endpoint, group=f"workflow:{run}",
                                timeout=15)
        sessions += [host, receiver, sender]
        target = f"workflow:{run}/plan"
        wait(lambda: sender.intercom(action="send", to=target, message="warm-up").get("queued"),
             15, "broker B forwards to the run's broker")
        wait(lambda: sender.intercom(action="send", to="receiver", message="warm-up").get("delivered"),
             15, "broker B reaches the receiver")
        got_live = collections.Counter()
        stop = threading.Event()

        def read_live():
            while not stop.is_set():
                msg = receiver.receive(0.2)
                if msg is not None:
                    got_live[msg["message"]] += 1

        reader = threading.Thread(target=read_live, daemon=True)
        reader.start()
        queued, delivered, refusals = ["warm-up"], [], collections.Counter()
        a_id = host.welcome["brokerId"]
        moved: dict[str, float] = {}
        first_queued_after = last_live_refused = None
        killed_at = None
        i = 0
        end = None
        while end is None or time.monotonic() < end:
            i += 1
            if killed_at is None and i == 2000:
                a.popen.kill()
                killed_at = time.monotonic()
                end = killed_at + seconds_after
            if killed_at is not None:
                for name, session in (("host", host), ("receiver", receiver)):
                    if name not in moved and session.connected and \
                            session.welcome.get("brokerId") not in (None, a_id):
                        moved[name] = time.monotonic() - killed_at
            if i % 100 == 0 and len(queued) < MAX_STICKY:
                sticky = sender.intercom(action="send", to=target, message=f"s{i}")
                if sticky.get("queued"):
                    queued.append(f"s{i}")
                    if killed_at is not None and first_queued_after is None:
                        first_queued_after = time.monotonic() - killed_at
                else:
                    refusals[f"sticky {sticky.get('code')}"] += 1
            live = sender.intercom(action="send", to="receiver", message=f"l{i}")
            if live.get("delivered"):
                delivered.append(f"l{i}")
            else:
                refusals[f"live {live.get('code')}"] += 1
                if killed_at is not None:
                    last_live_refused = time.monotonic() - killed_at
        stage = Client.connect(name="plan", kind="stage", stage=target, grant=grants[target],
                               transcript="plan-1", endpoint=b.endpoint, timeout=15)
        sessions.append(stage)
        got = collections.Counter()
        while True:
            msg = stage.receive(2.0)
            if msg is None:
                break
            got[msg["message"]] += 1
        stop.set()
        reader.join(2)
        return {
            "host_moved_s": moved.get("host"), "receiver_moved_s": moved.get("receiver"),
            "first_queued_after_s": first_queued_after, "last_live_refused_s": last_live_refused,
            "queued": len(queued), "queued_lost": sum(1 for m in queued if not got[m]),
            "queued_twice": sum(1 for m in got if got[m] > 1),
            "delivered": len(delivered), "delivered_lost": sum(1 for m in delivered if not got_live[m]),
            "delivered_twice": sum(1 for m in got_live if got_live[m] > 1),
            "refusals": dict(refusals),
        }
    finally:
        for session in sessions:
            try:
                session.close()
            except Exception:
                pass
        for broker in (a, b):
            if broker.popen.poll() is None:
                broker.stop()
        shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds-after", type=float, default=8.0)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    print(f"loadavg {os.getloadavg()[0]:.1f}")
    for n in range(args.repeats):
        r = one_round(args.seconds_after)
        nan = float("nan")
        print(f"round {n + 1}: after the kill, host on B at {r['host_moved_s'] or nan:.2f} s, "
              f"receiver at {r['receiver_moved_s'] or nan:.2f} s; first sticky send queued "
              f"again at {r['first_queued_after_s'] or nan:.2f} s; last live send refused at "
              f"{r['last_live_refused_s'] or nan:.2f} s")
        print(f"  sticky: {r['queued']} answered queued, {r['queued_lost']} lost, "
              f"{r['queued_twice']} twice; live: {r['delivered']} answered delivered, "
              f"{r['delivered_lost']} lost, {r['delivered_twice']} twice")
        print(f"  refusals meanwhile: {r['refusals'] or 'none'}")


if __name__ == "__main__":
    main()
