"""PROTOCOL.md's worked example: one send, as the project's own code puts it on the wire.

Nothing here is typed by hand. Two :class:`client.protocol.ClientProtocol` objects (the
Python client's sans-IO protocol) say hello to a real :class:`broker.core.Engine`
(the broker's sans-IO core, on an in-memory store and a fixed clock); the frames
between them are packed exactly as ``client.transport`` and ``broker.server`` pack
them. The planner sends the coder one message; the section shows each frame of that
exchange as the reader's encoder must produce or accept it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from broker.core import Engine, Send
from broker.store.memory import MemoryStore
from client.protocol import ClientProtocol, Inbound, Welcome
from schemas.limits import MAX_FRAME_BYTES, MAX_INBOUND_FRAME_BYTES
from schemas.protocol import envelope, new_packer, pack_frames, unpack_frame

from .msgpack_notes import render
from broker.core.kernel import inputs

WALL = 1_767_225_600.0          # 2026-01-01 00:00:00 UTC, the broker's wall clock
SESSION_IDS = ("7e2b9c41-3d5a-4f08-9b6e-1a2c3d4e5f60", "c0de5eed-1b2a-4c3d-8e4f-5a6b7c8d9e0f")
SEND_ID = "0b9e8f3a-6c1d-4e27-a5f4-2d8c7b1e9a03"


@dataclass
class _Owed:
    request: dict


@dataclass
class _Peer:
    name: str
    conn: bytes                                 # the ROUTER's routing id for it
    protocol: ClientProtocol
    heard: list[bytes] = field(default_factory=list)


class _Wire:
    """Frames between client protocols and the engine, as the IO shells move them."""

    def __init__(self) -> None:
        ids, tokens = iter(SESSION_IDS), iter(["9f" * 32, "a5" * 32])
        self.engine = Engine(broker_id="b7e1c0de5a11", new_id=lambda: next(ids),
                             new_token=lambda: next(tokens), pub_endpoint="ipc:///tmp/x/presence.sock")
        self.engine.restore(MemoryStore(clock=lambda: WALL).load(), WALL)
        self.now = 0.0
        self.packb = new_packer()

    def from_client(self, peer: _Peer, peers: dict[bytes, _Peer]) -> list[bytes]:
        """Send what ``peer`` has due; deliver the broker's answers. Returns the frames sent."""
        frames = peer.protocol.frames_to_send(self.now)
        for frame in frames:
            commands = self.engine.handle(inputs.Frame(peer.conn, unpack_frame(frame, MAX_FRAME_BYTES), self.now, WALL))
            self.to_clients(commands, peers)
        return frames

    def to_clients(self, commands: list, peers: dict[bytes, _Peer]) -> None:
        boxes: dict[bytes, list[dict]] = {}
        for command in commands:
            if isinstance(command, Send):
                boxes.setdefault(command.identity, []).append(command.env)
        for conn, envs in boxes.items():
            frames, _ = pack_frames(envs, MAX_FRAME_BYTES, MAX_INBOUND_FRAME_BYTES, self.packb)
            for frame in frames:
                peers[conn].heard.append(frame)
                peers[conn].protocol.receive_frame(frame, self.now)


def _peer(name: str, conn: bytes, hello_id: str) -> _Peer:
    def hello() -> dict:
        return envelope("hello", id=hello_id, name=name, sessionKind="interactive",
                        instance=f"{name}-instance-1")
    return _Peer(name, conn, ClientProtocol(hello))


def exchange() -> dict[str, bytes | dict]:
    """Run the example; the frames and decoded answers by role."""
    wire = _Wire()
    planner = _peer("planner", b"\x00\x6b\x8b\x45\x67", "h-planner-1")
    coder = _peer("coder", b"\x00\x6b\x8b\x45\x68", "h-coder-1")
    peers = {planner.conn: planner, coder.conn: coder}
    hello, = wire.from_client(planner, peers)
    welcome = next(e.result for e in planner.protocol.next_events() if isinstance(e, Welcome))
    wire.from_client(coder, peers)
    coder.protocol.next_events()
    planner.protocol.next_events()         # coder's arrival, announced in-band
    planner.heard.clear()
    coder.heard.clear()
    wire.now = 0.25
    planner.protocol.request(SEND_ID, _Owed(envelope(
        "call", id=SEND_ID, action="send", to="coder", message="tests are red on main")))
    call, = wire.from_client(planner, peers)
    result, = planner.heard
    answer = next(a for e in planner.protocol.next_events() if isinstance(e, Inbound)
                  for _, a in e.answers)
    delivered, = coder.heard
    wire.now = 1.5
    planner.protocol.timers(wire.now)
    heartbeat, = wire.from_client(planner, peers)
    return {"hello": hello, "welcome": welcome, "call": call, "result": result,
            "answer": answer, "msg": delivered, "hb": heartbeat, "hb_answer": planner.heard[-1]}


def _frame(title: str, frame: bytes) -> list[str]:
    value = unpack_frame(frame, MAX_INBOUND_FRAME_BYTES)
    shown = value[0] if len(value) == 1 else value
    return [title, "", "```json", json.dumps(shown, ensure_ascii=False), "```", "",
            f"{len(frame)} bytes: `{frame.hex()}`", "", "```text", render(frame), "```", ""]


def describe() -> str:
    """The worked example section of PROTOCOL.md."""
    run = exchange()
    welcome = dict(run["welcome"])
    lines = ["The planner's hello (one frame; the client adds more fields, all optional):", "",
             "```json", json.dumps(unpack_frame(run["hello"])[0]), "```", "",
             "is answered by a `result` whose fields are the welcome (`ok` and the "
             "session's identity; `v`, `k` and `re` left out here):", "",
             "```json", json.dumps(welcome), "```", ""]
    lines += _frame("**1. The send (client → broker).** `intercom(action=\"send\", "
                    "to=\"coder\", message=\"tests are red on main\")` is one `call` "
                    "envelope in one frame:", run["call"])
    lines += _frame("**2. The answer (broker → planner).** A `result` whose `re` is the "
                    "call's `id`:", run["result"])
    lines += ["What the caller sees (the result without `v`, `k`, `re`):", "", "```json",
              json.dumps(run["answer"]), "```", ""]
    lines += _frame("**3. The delivery (broker → coder).** A `msg` (`sentAt` is the "
                    "broker's wall clock, seconds as a float 64):", run["msg"])
    lines += _frame("**4. The next heartbeat (planner → broker)**, a second after its "
                    "last frame, reports the bytes it has read since its hello:", run["hb"])
    lines += _frame("and the broker answers it:", run["hb_answer"])
    return "\n".join(lines)
