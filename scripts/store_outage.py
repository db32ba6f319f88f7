"""What a broker cut off from PostgreSQL (packets dropped, not refused) costs a sender.

A throwaway PostgreSQL server, a proxy in front of it that can go silent
(tests/blackhole_proxy.py: nothing answered, nothing refused, as a cut network looks
from the broker's side) and one broker on it. A host registers a run and sends sticky
sends to it one after another; after a warm-up the proxy goes silent and the script
times each durable send's answer (``store_unavailable`` expected), then heals the
proxy and times until a send is ``queued`` again. The client waits up to 60 s per
call, so a slow answer is measured rather than cut at the usual 10 s.

``--cut nft`` (root, nftables) drops the server's packets on loopback instead of
using the proxy: the kernel then acknowledges nothing, as on a real network, so
libpq's own TCP timeouts apply too; the proxy (the default) is harsher: a statement
in flight is acknowledged by the proxy's kernel and never answered, so only a bound
the broker keeps itself ends the wait.

``--tree DIR`` runs the broker from another checkout of the project (for a before /
after comparison: ``git worktree add /tmp/before <commit>``); the client is this one.

Usage: python scripts/store_outage.py [--sends 8] [--repeats 2] [--cut proxy|nft] [--tree DIR]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.blackhole_proxy import BlackholeProxy  # noqa: E402
from tests.postgres_server import PostgresServer, start_server  # noqa: E402


def start_broker(tree: Path, db: str) -> tuple[subprocess.Popen, Path]:
    data = Path(tempfile.mkdtemp(prefix="ic-o-", dir="/tmp"))
    env = dict(os.environ, PYTHONPATH=str(tree), HOME=str(data))
    proc = subprocess.Popen(
        [sys.executable, "-m", "broker", "--data-dir", str(data), "--db", db,
         "--endpoint", f"ipc://{data}/broker.sock", "--pub-endpoint", f"ipc://{data}/pub.sock"],
        cwd=tree, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 20
    while not (data / "broker.sock").exists():
        if time.monotonic() > deadline or proc.poll() is not None:
            proc.kill()
            raise SystemExit("the broker did not start")
        time.sleep(0.02)
    return proc, data


class NftCut:
    """Drops every packet to or from ``port`` on this host (nftables; root)."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.table = f"ic_outage_{uuid.uuid4().hex[:8]}"

    def drop(self) -> None:
        rules = (f"add table inet {self.table}\n"
                 f"add chain inet {self.table} input {{ type filter hook input priority -10; }}\n"
                 f"add rule inet {self.table} input tcp dport {self.port} drop\n"
                 f"add rule inet {self.table} input tcp sport {self.port} drop\n")
        subprocess.run(["nft", "-f", "-"], input=rules, text=True, check=True)

    def heal(self) -> None:
        subprocess.run(["nft", "delete", "table", "inet", self.table], check=False,
                       stderr=subprocess.DEVNULL)

    def close(self) -> None:
        self.heal()


def one_round(server: PostgresServer, tree: Path, sends: int, cut: str) -> dict:
    from client import Client
    proxy = BlackholeProxy(server.port) if cut == "proxy" else NftCut(server.port)
    schema = server.take_schema()
    proc, data = start_broker(tree, f"postgresql://postgres@127.0.0.1:{proxy.port}/postgres"
                                    f"?schema={schema}")
    host = None
    try:
        host = Client.connect(name="host", endpoint=f"ipc://{data}/broker.sock", timeout=60)
        run = f"run-{uuid.uuid4().hex[:8]}"
        assert host.register_run(run, [{"name": "st"}])["ok"]
        count = 0

        def send() -> tuple[dict, float]:
            nonlocal count
            count += 1
            started = time.monotonic()
            answer = host.intercom(action="send", to=f"workflow:{run}/st", message=f"m{count}")
            return answer, time.monotonic() - started

        for _ in range(20):
            assert send()[0].get("queued"), "a warm-up send was not queued"
        proxy.drop()
        during = []
        for _ in range(sends):
            answer, seconds = send()
            during.append((answer.get("code") or ("queued" if answer.get("queued") else "?"),
                           seconds))
        proxy.heal()
        healed = time.monotonic()
        refused = 0
        while not (answer := send()[0]).get("queued"):
            refused += 1
            if time.monotonic() - healed > 60:
                raise SystemExit(f"no send queued 60 s after the heal: {answer}")
        return {"during": during, "back_s": time.monotonic() - healed, "refused_after": refused}
    finally:
        if host is not None:
            host.close()
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
        proxy.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sends", type=int, default=8, help="durable sends timed while cut off")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--cut", choices=["proxy", "nft"], default="proxy",
                        help="how the server is cut off (default: a silent proxy)")
    parser.add_argument("--tree", type=Path, default=ROOT,
                        help="the checkout to run the broker from (default: this one)")
    args = parser.parse_args()
    tree = args.tree.resolve()
    commit = subprocess.run(["git", "-C", str(tree), "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True).stdout.strip()
    print(f"cut: {args.cut}; broker from {tree} ({commit}); loadavg {os.getloadavg()[0]:.1f}", flush=True)
    server = start_server()
    try:
        for rep in range(args.repeats):
            r = one_round(server, tree, args.sends, args.cut)
            times = [seconds for _, seconds in r["during"]]
            codes = sorted({code for code, _ in r["during"]})
            print(f"[{rep + 1}] cut off: {len(times)} durable sends answered {'/'.join(codes)}: "
                  f"first {times[0]:.2f} s, then median {statistics.median(times[1:]):.3f} s, "
                  f"max {max(times[1:]):.2f} s (each: "
                  f"{', '.join(f'{t:.2f}' for t in times)}); healed: queued again after "
                  f"{r['back_s']:.2f} s ({r['refused_after']} refused in between)", flush=True)
    finally:
        server.destroy()


if __name__ == "__main__":
    main()
