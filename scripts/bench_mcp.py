"""What the MCP server (``python -m client mcp``) costs beside a direct client session.

Prints, each with its baseline measured in the same run against the same broker:

* bus ``send`` to the push (``notifications/claude/channel``) reaching the host, and
  bus ``send`` to ``wait`` returning it (p50 and p90 over N): baseline, ``send`` to a
  direct session's ``receive()`` returning it;
* tool-call overhead: ``intercom status`` through MCP against ``session.intercom(
  action="status")`` called directly, and an MCP call that does no bus work
  (``wait`` with ``timeout_s`` 0);
* the server process's RSS against a plain Python process holding one session.

The host side is the official SDK's stdio client, in this process.

Usage: python scripts/bench_mcp.py [N]   (default 200)
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from mcp.client.extension import NotificationBinding  # noqa: E402
from mcp.client.session import ClientSession  # noqa: E402
from mcp.client.stdio import StdioServerParameters, stdio_client  # noqa: E402
from pydantic import BaseModel  # noqa: E402

from client import Client  # noqa: E402
from client.reach import nobody_listens  # noqa: E402

N = int(sys.argv[1]) if len(sys.argv) > 1 else 200


class Push(BaseModel):
    content: str
    meta: dict


def pct(samples: list[float], q: float) -> float:
    s = sorted(samples)
    return s[min(len(s) - 1, int(q * len(s)))] * 1e3


def line(label: str, samples: list[float]) -> str:
    return f"{label:<46} p50 {pct(samples, 0.5):7.3f} ms  p90 {pct(samples, 0.9):7.3f} ms"


def rss_kib(pid: int) -> int:
    for row in Path(f"/proc/{pid}/status").read_text().splitlines():
        if row.startswith("VmRSS:"):
            return int(row.split()[1])
    return -1


def pid_of(marker: str) -> int:
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker.encode() in (entry / "cmdline").read_bytes():
                    return int(entry.name)
            except OSError:
                continue
    raise LookupError(marker)


def start_broker(data: Path) -> tuple[subprocess.Popen, str]:
    endpoint = f"ipc://{data}/broker.sock"
    proc = subprocess.Popen([sys.executable, "-m", "broker", "--data-dir", str(data), "--endpoint",
                             endpoint, "--pub-endpoint", f"ipc://{data}/presence.sock"],
                            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env=dict(os.environ, PYTHONPATH=str(ROOT)))
    deadline = time.monotonic() + 20
    while nobody_listens(endpoint, 0.0) is not None:
        if time.monotonic() > deadline or proc.poll() is not None:
            raise SystemExit("broker did not start")
        time.sleep(0.02)     # polling for the socket file, not a settle
    return proc, endpoint


def direct_baselines(endpoint: str) -> tuple[list[float], list[float]]:
    """send -> receive() on a direct session; and a direct status call."""
    with Client.connect(name="b-send", endpoint=endpoint, group="bench") as sender, \
            Client.connect(name="b-recv", endpoint=endpoint, group="bench") as receiver:
        latency = []
        for i in range(N):
            t0 = time.perf_counter()
            sender.intercom(action="send", to="b-recv", message=f"m{i}")
            receiver.receive(10)
            latency.append(time.perf_counter() - t0)
        status = []
        for _ in range(N):
            t0 = time.perf_counter()
            sender.intercom(action="status")
            status.append(time.perf_counter() - t0)
    return latency, status


def baseline_rss(endpoint: str, data: Path) -> int:
    code = ("import sys; from client import Client; "
            f"s = Client.connect(name='rss-base', endpoint={endpoint!r}, group='bench'); "
            "print('up', flush=True); sys.stdin.read(); s.close()")
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    proc.stdout.readline()
    try:
        return rss_kib(proc.pid)
    finally:
        proc.stdin.close()
        proc.wait(10)


async def through_mcp(endpoint: str, data: Path) -> dict:
    env = dict(os.environ, PYTHONPATH=str(ROOT), INTERCOM_DATA_DIR=str(data / "home"))
    arrived: asyncio.Queue = asyncio.Queue()

    async def pushed(params: Push) -> None:
        arrived.put_nowait(time.perf_counter())

    def params(name: str, *extra: str) -> StdioServerParameters:
        return StdioServerParameters(command=sys.executable, cwd=str(ROOT), env=env, args=[
            "-m", "client", "mcp", "--name", name, "--endpoint", endpoint, "--group", "bench",
            *extra])

    out: dict = {"push": [], "wait": [], "status": [], "noop": []}
    bindings = [NotificationBinding(method="notifications/claude/channel", params_type=Push,
                                    handler=pushed)]
    with Client.connect(name="m-send", endpoint=endpoint, group="bench") as sender:
        def send(name: str, i: int) -> float:
            t0 = time.perf_counter()
            sender.intercom(action="send", to=name, message=f"m{i}")
            return t0

        async with stdio_client(params("mcp-push")) as (r, w), \
                ClientSession(r, w, notification_bindings=bindings) as host:
            await host.initialize()
            out["rss_kib"] = rss_kib(pid_of("mcp-push"))
            for i in range(N):
                t0 = await asyncio.to_thread(send, "mcp-push", i)
                out["push"].append(await asyncio.wait_for(arrived.get(), 10) - t0)
                await host.call_tool("wait", {"timeout_s": 0})       # hand it over
            for _ in range(N):
                t0 = time.perf_counter()
                await host.call_tool("intercom", {"action": "status"})
                out["status"].append(time.perf_counter() - t0)
            for _ in range(N):
                t0 = time.perf_counter()
                await host.call_tool("wait", {"timeout_s": 0})
                out["noop"].append(time.perf_counter() - t0)
        async with stdio_client(params("mcp-wait", "--no-push")) as (r, w), \
                ClientSession(r, w) as host:
            await host.initialize()
            for i in range(N):
                waiting = asyncio.create_task(host.call_tool("wait", {"timeout_s": 10}))
                t0 = await asyncio.to_thread(send, "mcp-wait", i)
                result = await waiting
                out["wait"].append(time.perf_counter() - t0)
                assert "messages" in result.content[0].text
    return out


def main() -> None:
    data = Path(tempfile.mkdtemp(prefix="icb-", dir="/tmp"))
    broker, endpoint = start_broker(data)
    try:
        base_latency, base_status = direct_baselines(endpoint)
        base_rss = baseline_rss(endpoint, data)
        got = asyncio.run(through_mcp(endpoint, data))
    finally:
        broker.terminate()
        broker.wait(10)
        shutil.rmtree(data, ignore_errors=True)
    print(f"python -m client mcp against a direct client session, N={N}, same broker, same run")
    print(line("baseline: send -> direct receive()", base_latency))
    print(line("send -> push notification at the host", got["push"]))
    print(line("send -> wait returns it", got["wait"]))
    print(line("baseline: direct intercom status", base_status))
    print(line("MCP tools/call intercom status", got["status"]))
    print(line("MCP tools/call wait timeout_s=0 (no bus work)", got["noop"]))
    overhead = pct(got["status"], 0.5) - pct(base_status, 0.5)
    print(f"tool-call overhead (p50 MCP status - p50 direct status): {overhead:.3f} ms "
          f"({pct(got['status'], 0.5) / pct(base_status, 0.5):.1f}x)")
    print(f"RSS: MCP server {got['rss_kib'] / 1024:.1f} MiB; baseline python + one session "
          f"{base_rss / 1024:.1f} MiB")


if __name__ == "__main__":
    main()
