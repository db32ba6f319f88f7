"""The observer: who holds what, sampled every half second, from a host no fault cuts.

What it owns: the sampler program (``python3 -m faults.sampler``, run in the observer
host's namespace by :func:`start_sampler`) and its JSON lines:

- ``pg``: the ``runs`` table's owner of every run and the ``brokers`` rows, read from
  PostgreSQL (an unanswered read is a ``pg`` line with ``error``);
- ``overview``: one broker's own view, asked over an operator control connection
  (the brokers' own CURVE key) to that broker alone: its broker id, the runs it
  holds in memory and the sessions it serves itself (mirrors left out).

Each broker is asked from a thread of its own, so a paused broker delays only its
own samples; a call that gets no answer is recorded as such and the connection is
opened again. Times are monotonic, comparable with the workers' histories.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import threading
import time
from pathlib import Path

EVERY_S = 0.5
CALL_S = 2.0


class Lines:
    def __init__(self, path: Path) -> None:
        self.file = open(path, "a", buffering=1)
        self.lock = threading.Lock()

    def write(self, **event) -> None:
        event.setdefault("t", time.monotonic())
        with self.lock:
            self.file.write(json.dumps(event) + "\n")


def sample_postgres(out: Lines, url: str, schema: str, stop: threading.Event) -> None:
    import psycopg
    conn = None
    while not stop.wait(EVERY_S):
        asked = time.monotonic()
        try:
            if conn is None or conn.closed:
                conn = psycopg.connect(url, autocommit=True, connect_timeout=2,
                                       options="-c statement_timeout=2000")
            runs = conn.execute(f"SELECT run_id, owner FROM {schema}.runs").fetchall()
            brokers = conn.execute(f"SELECT broker_id, endpoint, lease_until FROM {schema}.brokers"
                                   ).fetchall()
            now = conn.execute("SELECT extract(epoch FROM now())").fetchone()[0]
            out.write(type="pg", asked=asked, owners=dict(runs), now=float(now),
                      brokers=[list(b) for b in brokers])
        except Exception as exc:      # the server down or cut: recorded, tried again
            out.write(type="pg", asked=asked, error=str(exc)[:200])
            if conn is not None:
                conn.close()
            conn = None


def sample_broker(out: Lines, name: str, endpoint: str, keys, stop: threading.Event) -> None:
    from client import Client
    session = None
    while not stop.wait(EVERY_S):
        asked = time.monotonic()
        try:
            if session is None:
                session = Client.connect(name="observer", kind="control", endpoint=endpoint,
                                         timeout=CALL_S, curve_server_key=keys.server_key,
                                         curve_public_key=keys.public_key,
                                         curve_secret_key=keys.secret_key)
            answer = session._call("overview", {}, timeout=CALL_S)
        except Exception as exc:
            answer = {"ok": False, "code": getattr(exc, "code", type(exc).__name__)}
        if not answer.get("ok"):
            out.write(type="overview", broker=name, asked=asked, error=answer.get("code"))
            if session is not None:
                session.close()
            session = None
            continue
        out.write(type="overview", broker=name, asked=asked, brokerId=answer.get("brokerId"),
                  runs=[w["runId"] for w in answer.get("workflows", [])],
                  sessions=[s["id"] for s in answer.get("sessions", []) if not s.get("broker")])
    if session is not None:
        session.close()


def start_sampler(prefix: list[str], out: Path, url: str, schema: str, brokers: dict[str, str],
                  keys: Path, env: dict, cwd: Path) -> subprocess.Popen:
    """The sampler process; it stops when its stdin closes."""
    return subprocess.Popen([*prefix, sys.executable, "-m", "faults.sampler", "--out", str(out),
                             "--url", url, "--schema", schema, "--keys", str(keys),
                             "--brokers", json.dumps(brokers)],
                            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                            stderr=open(out.with_suffix(".err"), "wb"), env=env, cwd=cwd)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--url", required=True)
    parser.add_argument("--schema", required=True)
    parser.add_argument("--keys", required=True)
    parser.add_argument("--brokers", required=True, help="JSON: name -> endpoint")
    args = parser.parse_args()
    from client.keys import from_directory
    keys = from_directory(args.keys, operator=True)
    out, stop = Lines(args.out), threading.Event()
    threads = [threading.Thread(target=sample_postgres, args=(out, args.url, args.schema, stop))]
    threads += [threading.Thread(target=sample_broker, args=(out, name, endpoint, keys, stop))
                for name, endpoint in json.loads(args.brokers).items()]
    for thread in threads:
        thread.start()
    sys.stdin.read()          # until the harness closes it
    stop.set()
    for thread in threads:
        thread.join(CALL_S + 5)


if __name__ == "__main__":
    main()
