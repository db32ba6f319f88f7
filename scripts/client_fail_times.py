"""How long a client takes to say why it cannot connect: no broker, or a refused key.

Prints one line per case: the seconds ``Client.connect`` took to raise, and its code.
Cases: nothing at an ipc path (no socket file), a stale ipc socket file (bound, nobody
accepting, as after a kill -9), a TCP port that refuses, and a CURVE broker that
refuses the client's key (a real ``python -m broker --curve`` on loopback).

Usage: python scripts/client_fail_times.py
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from client import Client, ConnectError  # noqa: E402
from client.keys import from_directory  # noqa: E402
from client.reach import nobody_listens  # noqa: E402


def timed_failure(endpoint: str, **keys: str) -> tuple[float, str]:
    started = time.monotonic()
    try:
        Client.connect(name="probe", endpoint=endpoint, timeout=15, **keys).close()
    except ConnectError as error:
        return time.monotonic() - started, error.code
    return time.monotonic() - started, "connected"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wrong_key_case(tmp: Path) -> tuple[float, str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT), HOME=str(tmp))
    keys = tmp / "keys"
    subprocess.run([sys.executable, "-m", "broker", "keys", "--dir", str(keys), "--client",
                    "alice", "--client", "mallory"], cwd=ROOT, env=env, check=True,
                   capture_output=True)
    mallory_dir = tmp / "mallory"
    (mallory_dir / "clients").mkdir(parents=True)
    for name in ("mallory.key", "mallory.key_secret"):     # a key the broker does not allow
        shutil.move(str(keys / "clients" / name), str(mallory_dir / "clients" / name))
    shutil.copy(keys / "broker.key", mallory_dir / "broker.key")
    router = f"tcp://127.0.0.1:{free_port()}"
    broker = subprocess.Popen(
        [sys.executable, "-m", "broker", "--data-dir", str(tmp / "data"), "--endpoint", router,
         "--pub-endpoint", f"tcp://127.0.0.1:{free_port()}", "--curve", str(keys)],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 20
        while nobody_listens(router, 0.0) is not None:
            if broker.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"the CURVE broker did not start (exit {broker.poll()})")
            time.sleep(0.02)
        mallory = from_directory(mallory_dir, "mallory")
        return timed_failure(router, curve_server_key=mallory.server_key,
                             curve_public_key=mallory.public_key,
                             curve_secret_key=mallory.secret_key)
    finally:
        broker.send_signal(signal.SIGTERM)
        broker.wait(10)


def main() -> None:
    tmp = Path(tempfile.mkdtemp(prefix="ic-fail-", dir="/tmp"))
    try:
        rows = [("no broker, ipc (no socket file)", timed_failure(f"ipc://{tmp}/none.sock"))]
        with socket.socket(socket.AF_UNIX) as stale:
            stale.bind(str(tmp / "stale.sock"))
            rows.append(("no broker, ipc (stale socket file)",
                         timed_failure(f"ipc://{tmp}/stale.sock")))
        rows.append(("no broker, tcp (port refuses)",
                     timed_failure(f"tcp://127.0.0.1:{free_port()}")))
        rows.append(("authentication failed (CURVE, key not allowed)", wrong_key_case(tmp)))
        for what, (seconds, code) in rows:
            print(f"{what:<48} {seconds:6.3f} s  {code}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
