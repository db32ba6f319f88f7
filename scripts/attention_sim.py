#!/usr/bin/env python3
"""Every message handed to the model exactly once, whichever route takes it.

    python3 scripts/attention_sim.py                  # 60 messages, seed 1
    python3 scripts/attention_sim.py --messages 200 --seed 7 --gap 0.05

A real broker (benchkit.tmp_broker), one ``python -m client mcp`` server driven by the
MCP SDK's stdio client acting as the host, and a sender session (the Python client)
that sends ``--messages`` numbered messages at random moments (a pause of up to
``--gap`` seconds before each). Meanwhile the host takes random steps, as a Claude
Code session does between a person and its model:

``tool``    a tool call (``intercom list``): its result's ``inbox`` carries messages;
``stop``    the model ends its turn: the real hook command, ``python -m client hook
            Stop`` with the host's JSON on stdin (``stop_hook_active`` true right after
            a block); a block carries messages and the turn goes on;
``prompt``  a person's prompt: ``python -m client hook UserPromptSubmit``; its added
            context carries messages.

Once the sender is done, ``wait`` takes whatever is left. Every message id handed over
by any route is recorded; printed: sent, handed over once, twice or more, never (the
last two must be 0), the count per route, the stops blocked and let through, and the
receipts the sender reads afterwards (every message ``seen``). Figures only, no
assertions; about 20-40 s for the defaults (each hook is a process of its own).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import random
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for _path in (ROOT, ROOT / "scripts"):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from mcp.client.session import ClientSession  # noqa: E402
from mcp.client.stdio import StdioServerParameters, stdio_client  # noqa: E402

from benchkit.tmp_broker import TmpBroker  # noqa: E402
from client import Client  # noqa: E402

NAME = "sim-host"
GROUP = "sim"
HOST_INPUT = {"session_id": "sim-1", "transcript_path": "/tmp/sim-1.jsonl", "cwd": str(ROOT),
              "permission_mode": "default"}
STEPS = ("tool", "stop", "prompt")


class Ledger:
    """Every hand-over, by route."""

    def __init__(self) -> None:
        self.times: collections.Counter[str] = collections.Counter()    # id -> handed over
        self.routes: collections.Counter[str] = collections.Counter()   # route -> messages
        self.steps: collections.Counter[str] = collections.Counter()

    def handed(self, route: str, messages: list[dict]) -> None:
        for message in messages:
            self.times[message["id"]] += 1
            self.routes[route] += 1


def hook(env: dict, event: str, payload: dict) -> dict | None:
    """The hook command as a host runs it: its printed JSON, or None."""
    done = subprocess.run([sys.executable, "-m", "client", "hook", event, "--name", NAME],
                          input=json.dumps({**HOST_INPUT, "hook_event_name": event, **payload}),
                          capture_output=True, text=True, cwd=ROOT, env=env, timeout=30)
    if done.returncode != 0 or "Traceback" in done.stderr:
        raise SystemExit(f"the {event} hook failed ({done.returncode}): {done.stderr}")
    return json.loads(done.stdout) if done.stdout else None


def carried(text: str) -> list[dict]:
    return json.loads(text.partition("\n")[2])["messages"]


async def tool(host: ClientSession, name: str, arguments: dict) -> dict:
    result = await asyncio.wait_for(host.call_tool(name, arguments), 60)
    return json.loads(result.content[0].text)


async def drive(host: ClientSession, env: dict, ledger: Ledger, rng: random.Random,
                sending: threading.Event) -> None:
    after_block = False
    while sending.is_set():
        step = "tool" if after_block and rng.random() < 0.5 else rng.choice(STEPS)
        ledger.steps[step] += 1
        if step == "tool":
            ledger.handed("tool result inbox", (await tool(host, "intercom",
                                                           {"action": "list"}))["inbox"])
            after_block = False
        elif step == "stop":
            output = await asyncio.to_thread(hook, env, "Stop",
                                             {"stop_hook_active": after_block})
            after_block = output is not None
            ledger.steps["stop blocked" if after_block else "stop let through"] += 1
            if after_block:
                ledger.handed("Stop hook block", carried(output["reason"]))
        else:
            output = await asyncio.to_thread(hook, env, "UserPromptSubmit",
                                             {"prompt": "anything new?"})
            after_block = False
            if output is not None:
                ledger.handed("UserPromptSubmit context",
                              carried(output["hookSpecificOutput"]["additionalContext"]))


def send_all(sender, count: int, gap: float, seed: int, ids: list[str],
             sending: threading.Event) -> None:
    rng = random.Random(seed + 1)
    try:
        for i in range(count):
            time.sleep(rng.uniform(0, gap))        # the sender's own pace
            answer = sender.intercom(action="send", to=NAME, message=f"message {i}")
            assert answer["ok"], answer
            ids.append(answer["messageId"])
    finally:
        sending.clear()


async def simulate(broker: TmpBroker, sender, args: argparse.Namespace
                   ) -> tuple[Ledger, list[str]]:
    env = dict(broker.env, INTERCOM_DATA_DIR=str(broker.data / "home"))
    params = StdioServerParameters(command=sys.executable, cwd=str(ROOT), env=env, args=[
        "-m", "client", "mcp", "--name", NAME, "--endpoint", broker.endpoint, "--group", GROUP,
        "--no-push"])
    ledger, ids, sending = Ledger(), [], threading.Event()
    rng = random.Random(args.seed)
    with open(broker.data / "mcp.stderr", "w") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write), \
                ClientSession(read, write) as host:
            await host.initialize()
            ledger.handed("SessionStart context",
                          carried(start["hookSpecificOutput"]["additionalContext"])
                          if (start := await asyncio.to_thread(hook, env, "SessionStart",
                                                               {"source": "startup"}))
                          else [])
            sending.set()
            sends = threading.Thread(target=send_all, args=(
                sender, args.messages, args.gap, args.seed, ids, sending))
            sends.start()
            await drive(host, env, ledger, rng, sending)
            await asyncio.to_thread(sends.join)
            deadline = time.monotonic() + 30
            while sum(1 for i in ids if ledger.times[i]) < len(ids) and time.monotonic() < deadline:
                ledger.handed("wait (after the sender)",
                              (await tool(host, "wait", {"timeout_s": 2}))["messages"])
    return ledger, ids


def receipts_seen(sender, ids: list[str], timeout: float = 15.0) -> int:
    """How many of ``ids`` the sender's receipts say ``seen`` (a receipt is the sender's)."""
    deadline = time.monotonic() + timeout
    while True:
        seen = sum(1 for i in ids if sender.receipt(i).get("state") == "seen")
        if seen == len(ids) or time.monotonic() > deadline:
            return seen
        time.sleep(0.1)        # polling the broker's answer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=60)
    parser.add_argument("--gap", type=float, default=0.3, help="longest pause before a send (s)")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    broker = TmpBroker.start()
    started = time.monotonic()
    try:
        with Client.connect(name="sim-sender", endpoint=broker.endpoint, group=GROUP) as sender:
            ledger, ids = asyncio.run(simulate(broker, sender, args))
            seen = receipts_seen(sender, ids)
    finally:
        broker.stop()
        shutil.rmtree(broker.data, ignore_errors=True)
    times = [ledger.times[i] for i in ids]
    strays = sorted(set(ledger.times) - set(ids))
    print(f"attention_sim: {args.messages} messages, seed {args.seed}, gap <= {args.gap:g} s, "
          f"{time.monotonic() - started:.1f} s")
    print(f"sent                     {len(ids)}")
    print(f"handed over once         {times.count(1)}")
    print(f"handed over twice or more {sum(1 for t in times if t >= 2)}")
    print(f"never handed over        {times.count(0)}")
    print(f"handed over, not sent    {len(strays)}")
    print("per route:")
    for route, count in ledger.routes.most_common():
        print(f"  {route:<28} {count}")
    print("host steps:  " + ", ".join(f"{step} {ledger.steps[step]}" for step in (
        "tool", "stop", "stop blocked", "stop let through", "prompt")))
    print(f"receipts 'seen' at the sender: {seen} of {len(ids)}")


if __name__ == "__main__":
    main()
