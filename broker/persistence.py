"""The persistence worker: a thread that owns the store's connection.

The IO shell sends it batches over an inproc PAIR socket; the worker drains every
batch that is waiting, applies them all in one transaction (group commit) and answers
with the tickets that are now durable. A failed transaction answers with the same
tickets marked failed, so nothing waits forever and nothing is claimed kept that
was not.

Frames, both msgpack:

* shell → worker: ``[[ticket_or_None, op], ...]`` or ``"stop"``;
* worker → shell: ``{"done": [tickets], "failed": [tickets], "error": str|None,
  "brokers": n|None, "frames": n}``; ``brokers`` counts other live brokers after a
  lease renewal, ``frames`` how many shell frames the report answers (so the shell
  knows when nothing is outstanding and can stop polling this socket).
"""

from __future__ import annotations

import threading
import time

import msgpack
import zmq

from .store import Store

WORKER_ENDPOINT = "inproc://intercom-persistence"


class PersistenceWorker(threading.Thread):
    def __init__(self, ctx: zmq.Context, store: Store, broker_id: str,
                 endpoint: str = WORKER_ENDPOINT) -> None:
        super().__init__(name="persistence", daemon=True)
        self.ctx = ctx
        self.store = store
        self.broker_id = broker_id
        self.endpoint = endpoint
        self.batches = 0
        self.ops = 0
        self.ready = threading.Event()

    def run(self) -> None:
        sock = self.ctx.socket(zmq.PAIR)
        sock.linger = 0
        sock.connect(self.endpoint)
        self.ready.set()
        try:
            self._serve(sock)
        finally:
            sock.close()
            self.store.close()

    def _serve(self, sock: zmq.Socket) -> None:
        while True:
            frames = [sock.recv()]
            while True:
                try:
                    frames.append(sock.recv(zmq.NOBLOCK))
                except zmq.Again:
                    break
            stop = False
            items: list = []
            for frame in frames:
                value = msgpack.unpackb(frame, raw=False)
                if value == "stop":
                    stop = True
                else:
                    items.extend(value)
            if items:
                report = self._commit(items)
                report["frames"] = len(frames) - stop
                sock.send(msgpack.packb(report, use_bin_type=True))
            if stop:
                return

    def _commit(self, items: list) -> dict:
        tickets = [ticket for ticket, _ in items if ticket is not None]
        ops = [tuple(op) for _, op in items]
        try:
            self.store.apply(ops)
        except Exception as exc:  # disk full, corrupt file: tell the shell, keep going
            return {"done": [], "failed": tickets, "error": repr(exc), "brokers": None}
        self.batches += 1
        self.ops += len(ops)
        brokers = None
        if any(op[0] == "lease" for op in ops):
            brokers = self.store.live_brokers(time.time(), exclude=self.broker_id)
        return {"done": tickets, "failed": [], "error": None, "brokers": brokers}
