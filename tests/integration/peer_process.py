"""A peer session in its own process, for tests that kill it.

Usage: python peer_process.py ENDPOINT NAME MODE
MODE ``silent``: never answers; ``echo``: replies "echo: <message>" to every ask;
``print``: prints the id of every message it receives, one per line.
Prints the session id on the first line of stdout, then serves until killed.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from client import Client  # noqa: E402


def main() -> None:
    endpoint, name, mode = sys.argv[1:4]
    session = Client.connect(name=name, endpoint=endpoint, timeout=15)
    print(session.id, flush=True)
    while True:
        msg = session.receive(timeout=1.0)
        if msg is not None and mode == "print":
            print(msg["id"], flush=True)
        if msg is not None and mode == "echo" and msg.get("expectsReply"):
            session.intercom(action="reply", replyTo=msg["id"], message=f"echo: {msg['message']}")


if __name__ == "__main__":
    main()
