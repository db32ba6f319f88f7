"""A throwaway broker for a script: ipc sockets in a fresh tmp dir, stopped by PID.

    broker = TmpBroker.start("--max-backlog-bytes", "65536")
    try: ... broker.endpoint, broker.env ...; broker.peer("frozen", "silent")
    finally: broker.stop()        # SIGCONT + kill every peer, SIGTERM the broker
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PEER = ROOT / "tests" / "integration" / "peer_process.py"


@dataclass
class TmpBroker:
    popen: subprocess.Popen
    data: Path
    env: dict
    peers: list[subprocess.Popen] = field(default_factory=list)

    @property
    def endpoint(self) -> str:
        return f"ipc://{self.data}/broker.sock"

    @classmethod
    def start(cls, *extra: str, timeout: float = 15.0, tree: Path = ROOT) -> "TmpBroker":
        """A broker of this checkout, or of another one (``tree``: run there, with its
        code first on PYTHONPATH), to compare two in one run."""
        data = Path(tempfile.mkdtemp(prefix="ic-s-", dir="/tmp"))
        env = dict(os.environ, PYTHONPATH=str(tree), HOME=str(data))
        popen = subprocess.Popen(
            [sys.executable, "-m", "broker", "--data-dir", str(data), "--endpoint",
             f"ipc://{data}/broker.sock", "--pub-endpoint", f"ipc://{data}/presence.sock", *extra],
            cwd=tree, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        while not (data / "broker.sock").exists():
            if time.monotonic() > deadline or popen.poll() is not None:
                popen.kill()
                popen.wait(10)
                raise SystemExit(f"the broker of {tree} did not start")
            time.sleep(0.02)
        return cls(popen, data, env)

    def peer(self, name: str, mode: str = "silent") -> tuple[subprocess.Popen, str]:
        """A session in its own process (tests/integration/peer_process.py); its id."""
        proc = subprocess.Popen([sys.executable, str(PEER), self.endpoint, name, mode],
                                env=self.env, stdout=subprocess.PIPE, text=True)
        self.peers.append(proc)
        return proc, proc.stdout.readline().strip()

    def stop(self) -> None:
        for proc in self.peers:
            try:
                os.kill(proc.pid, signal.SIGCONT)
                proc.kill()
            except ProcessLookupError:
                pass
            proc.wait(10)
        self.popen.send_signal(signal.SIGTERM)
        try:
            self.popen.wait(10)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait(10)
