"""The client's connection: one IO thread that owns the DEALER socket.

ZeroMQ sockets are not thread-safe, so callers on any thread hand envelopes to the IO
thread through a deque and a wake-up pipe, and wait on futures. The IO thread
coalesces everything waiting into batch frames (one frame, many envelopes), sends a
heartbeat when idle, and takes the session back after the broker restarts or forgets
it: it says hello again with the session's id and token, then resends every request
still owed an answer, under the same ids (the broker deduplicates them).
"""

from __future__ import annotations

import collections
import os
import threading
import time
from concurrent.futures import Future
from typing import Any, Callable

import zmq

from schemas.errors import BusError
from schemas.limits import HEARTBEAT_S, LIVENESS_S, MAX_BATCH
from schemas.protocol import envelope, pack, unpack_frame

_NOBLOCK = zmq.NOBLOCK


class Transport:
    """Owns the DEALER socket on its own thread. Thread-safe public methods."""

    def __init__(self, endpoint: str, on_message: Callable[[dict], None],
                 hello: Callable[[], dict], on_welcome: Callable[[dict], None]) -> None:
        self.endpoint = endpoint
        self._on_message = on_message
        self._hello = hello              # builds the hello envelope for (re)connects
        self._on_welcome = on_welcome
        self._outbox: collections.deque[dict] = collections.deque()
        self._owed: dict[str, tuple[dict, Future]] = {}   # id -> (request, future)
        self._owed_lock = threading.Lock()
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._wake_pending = False
        self._closing = False
        self._hello_id: str | None = None
        self.connected = threading.Event()
        self.last_heard = 0.0
        self._ctx = zmq.Context.instance()
        self._thread = threading.Thread(target=self._run, name="intercom-client", daemon=True)
        self._thread.start()

    # -- public, any thread ---------------------------------------------------------

    def request(self, env: dict) -> Future:
        """Send a request envelope (with ``id``); the future gets the broker's result."""
        future: Future = Future()
        with self._owed_lock:
            self._owed[env["id"]] = (env, future)
        self.post(env)
        return future

    def post(self, env: dict) -> None:
        """Send an envelope that expects no answer."""
        self._outbox.append(env)
        if not self._wake_pending:
            self._wake_pending = True
            try:
                os.write(self._wake_w, b"x")
            except BlockingIOError:
                pass

    def close(self, timeout: float = 2.0) -> None:
        self._closing = True
        self.post(envelope("wake"))
        self._thread.join(timeout)
        for fd in (self._wake_r, self._wake_w):
            try:
                os.close(fd)
            except OSError:
                pass
        self._fail_owed(BusError("session_closed"))

    # -- IO thread ----------------------------------------------------------------------

    def _run(self) -> None:
        sock = self._ctx.socket(zmq.DEALER)
        sock.linger = 1000
        sock.sndhwm = 100_000
        sock.rcvhwm = 100_000
        sock.reconnect_ivl = 100
        sock.reconnect_ivl_max = 1000
        sock.connect(self.endpoint)
        self._sock = sock
        poller = zmq.Poller()
        poller.register(sock, zmq.POLLIN)
        poller.register(self._wake_r, zmq.POLLIN)
        self._say_hello()
        last_sent = time.monotonic()
        try:
            while not self._closing:
                ready = dict(poller.poll(HEARTBEAT_S * 1000 / 2))
                if self._wake_r in ready:
                    self._wake_pending = False
                    try:
                        os.read(self._wake_r, 4096)
                    except BlockingIOError:
                        pass
                if sock in ready:
                    self._drain(sock)
                if self._outbox:
                    self._flush(sock)
                    last_sent = time.monotonic()
                now = time.monotonic()
                if now - last_sent >= HEARTBEAT_S:
                    self._send(sock, [envelope("hb")])
                    last_sent = now
                if self.connected.is_set() and now - self.last_heard > LIVENESS_S:
                    # The broker went quiet: assume it restarted and take the session back.
                    self.connected.clear()
                    self._say_hello()
            if self._outbox:
                self._flush(sock)
        finally:
            sock.close()

    def _say_hello(self) -> None:
        hello = self._hello()
        self._hello_id = hello["id"]
        self._outbox.appendleft(hello)

    def _flush(self, sock: zmq.Socket) -> None:
        batch = []
        outbox = self._outbox
        while outbox:
            env = outbox.popleft()
            if env.get("k") == "wake":
                continue
            batch.append(env)
            if len(batch) == MAX_BATCH:
                self._send(sock, batch)
                batch = []
        if batch:
            self._send(sock, batch)

    def _send(self, sock: zmq.Socket, batch: list[dict]) -> None:
        frame = pack(batch[0] if len(batch) == 1 else batch)
        try:
            sock.send(frame, _NOBLOCK)
        except zmq.Again:
            sock.send(frame)   # queue full: wait for room rather than lose a request

    def _drain(self, sock: zmq.Socket) -> None:
        while True:
            try:
                frame = sock.recv(_NOBLOCK)
            except zmq.Again:
                return
            self.last_heard = time.monotonic()
            try:
                envs = unpack_frame(frame)
            except BusError:
                continue
            for env in envs:
                self._dispatch(env)

    def _dispatch(self, env: dict) -> None:
        kind = env.get("k")
        if kind == "result":
            re = env.get("re")
            if re is not None and re == self._hello_id:
                self._welcomed(env)
                return
            if env.get("code") == "not_connected":
                if self.connected.is_set():
                    self.connected.clear()
                    self._say_hello()
                return   # the request is resent after the new welcome
            with self._owed_lock:
                owed = self._owed.pop(re, None) if re is not None else None
            if owed is not None:
                owed[1].set_result(_strip(env))
        elif kind in ("msg", "event"):
            self._on_message(env)

    def _welcomed(self, env: dict) -> None:
        self._hello_id = None
        if not env.get("ok"):
            self._on_welcome(_strip(env))
            return
        self._on_welcome(_strip(env))
        self.connected.set()
        with self._owed_lock:
            pending = [request for request, _ in self._owed.values()]
        self._outbox.extend(pending)

    def _fail_owed(self, error: BusError) -> None:
        with self._owed_lock:
            owed, self._owed = self._owed, {}
        for _, future in owed.values():
            if not future.done():
                future.set_result(error.reply())

    def forget(self, msg_id: str) -> None:
        """Stop waiting for ``msg_id`` (the caller gave up on it)."""
        with self._owed_lock:
            self._owed.pop(msg_id, None)


def _strip(env: dict) -> dict[str, Any]:
    return {k: v for k, v in env.items() if k not in ("v", "k", "re")}
