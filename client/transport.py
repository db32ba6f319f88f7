"""The client's connection: one DEALER socket, serviced by whichever thread holds it.

ZeroMQ sockets are not thread-safe, so the socket is touched only by the holder of
``_io_lock``. Usually that is the IO thread: it sleeps in an OS-level poll on the
socket's ZMQ_FD and a wake-up eventfd *without* the lock, then takes the lock to
flush what callers queued (coalesced into batch frames: one frame, many envelopes),
read what arrived, send a heartbeat when idle, and take the session back after the
broker restarts or forgets it: it says hello again with the session's id and token,
then resends every request still owed an answer, under the same ids (the broker
deduplicates them).

A blocking call (:meth:`Transport.call`) made while nobody holds the lock skips both
thread hand-offs: the calling thread takes the lock, sends its request itself and
services the socket until its own answer is in (answering everyone else's requests
and queueing inbound messages on the way, heartbeats included), then gives the
socket back. Pipelined requests (:meth:`Transport.request`) go through the outbox.

Invariant that makes the shared-socket scheme sound: whoever releases ``_io_lock``
has just seen ZMQ_EVENTS without POLLIN after its last send, so the edge-triggered
ZMQ_FD signals the IO thread for anything that arrives later.

Answers resolve :class:`Reply` objects: ``concurrent.futures.Future`` subclasses that
share one condition per transport, so making one is cheap and a whole frame of
answers is resolved under one lock acquisition.
"""

from __future__ import annotations

import collections
import math
import select
import threading
import time
from typing import Any, Callable

import zmq

from schemas.errors import BusError
from schemas.limits import HEARTBEAT_S, LIVENESS_S, MAX_FRAME_BYTES, MAX_INBOUND_FRAME_BYTES
from schemas.protocol import envelope, new_packer, pack_frames, unpack_frame

from .replies import FINISHED, OPEN, PENDING, Reply
from .waker import Waker
from .wire import expand_msgs, take_envelopes

_EPOLL = hasattr(select, "epoll")
_NOBLOCK = int(zmq.NOBLOCK)
_EVENTS = int(zmq.EVENTS)
_POLLIN = int(zmq.POLLIN)
_IDLE_POLL_S = HEARTBEAT_S / 2
# How long a caller waits for the IO thread to finish servicing the socket before it
# hands its call over instead of running it itself.
_TAKE_OVER_WAIT_S = 0.005
# Pipelined sends queued, while the IO thread is due to send them, before the
# sending thread lets it run.
_YIELD_EVERY = 256


class Transport:
    """Owns the DEALER socket; thread-safe public methods.

    ``on_inbound(msgs, events)`` gets the ``msg`` and ``event`` envelopes of each read,
    in arrival order, before the answers that arrived with or after them are resolved.
    It runs on whichever thread services the socket and must not block.
    """

    def __init__(self, endpoint: str, on_inbound: Callable[[list, list], None],
                 hello: Callable[[], dict], on_welcome: Callable[[dict], None]) -> None:
        self.endpoint = endpoint
        self._on_inbound = on_inbound
        self._hello = hello              # builds the hello envelope for (re)connects
        self._on_welcome = on_welcome
        self._outbox: collections.deque[dict] = collections.deque()
        # id -> reply (its request in ``reply.request``). No lock: single dict
        # operations are atomic, and closing sets _dead before it empties the dict
        # with popitem, so a request registered meanwhile is failed exactly once, by
        # whichever side pops it.
        self._owed: dict[str, Reply] = {}
        self._dead = False               # closed: new requests fail at once
        # Shared by all replies. Reentrant, as each Future's own is: concurrent.futures
        # wait() and as_completed() take the conditions of all their futures at once.
        self._cond = threading.Condition(threading.RLock())
        self._io_lock = threading.Lock()  # held by whoever touches the socket
        self._leading = False             # a caller (not the IO thread) holds _io_lock
        self._waker = Waker()
        self._closing = False
        self._hello_id: str | None = None
        self.connected = threading.Event()
        self.last_heard = 0.0
        self._last_sent = 0.0
        self._ctx = zmq.Context.instance()
        sock = self._ctx.socket(zmq.DEALER)
        sock.linger = 1000
        sock.sndhwm = 100_000
        sock.rcvhwm = 100_000
        sock.reconnect_ivl = 100
        sock.reconnect_ivl_max = 1000
        sock.connect(self.endpoint)
        self._sock = sock
        self._sock_open = True
        self._recv = sock.recv
        self._packb = new_packer()      # used only under _io_lock
        self._send_frame = sock.send
        self._getsockopt = sock.getsockopt
        self._sock_fd = sock_fd = sock.getsockopt(zmq.FD)
        # The IO thread sleeps in epoll (used without the lock); a leading caller
        # switches the socket's fd off there while it services the socket itself, so
        # its answer does not wake the IO thread too. Leaders poll with their own
        # poller, used only under the lock (poll objects must not be shared).
        if _EPOLL:
            self._io_poller = select.epoll()
            self._io_poller.register(sock_fd, select.EPOLLIN)
            self._io_poller.register(self._waker.fd, select.EPOLLIN)
        else:  # pragma: no cover - no epoll: leaders cannot stop the IO thread waking
            self._io_poller = select.poll()
            self._io_poller.register(sock_fd, select.POLLIN)
            self._io_poller.register(self._waker.fd, select.POLLIN)
        self._lead_poller = select.poll()
        self._lead_poller.register(sock_fd, select.POLLIN)
        self._lead_poller.register(self._waker.fd, select.POLLIN)
        self._thread = threading.Thread(target=self._run, name="intercom-client", daemon=True)
        self._thread.start()

    # -- public, any thread ---------------------------------------------------------

    def request(self, env: dict) -> Reply:
        """Send a request envelope (with ``id``); the future gets the broker's result."""
        return self._enqueue(env["id"], env)

    def request_send(self, to: str, msg_id: str, message: str) -> Reply:
        """A quiet plain send (``call``/``send`` of text to ``to``), queued as the
        tuple ``(to, id, message)``: runs of them to one target leave as one ``sends``
        envelope. The future gets the broker's answer for this id."""
        return self._enqueue(msg_id, (to, msg_id, message))

    def call(self, env: dict, timeout: float) -> dict | None:
        """Send a request and wait for its result; None after ``timeout`` seconds.

        When the socket is free, this thread sends and services it itself until the
        answer is in, instead of handing the request to the IO thread and waiting
        to be woken.
        """
        deadline = time.monotonic() + timeout
        reply = self._register(env["id"], env)
        if reply._state is PENDING:
            self._outbox.append(env)
            if not self.serve_until(lambda: reply._state is not PENDING, deadline):
                if not self._waker.pending:
                    self._waker.wake()
        try:
            return reply.result(max(0.0, deadline - time.monotonic()))
        except TimeoutError:
            self.forget(env["id"])
            return None

    def serve_until(self, done: Callable[[], bool], deadline: float | None) -> bool:
        """Service the socket on this thread until ``done()``, the monotonic
        ``deadline`` (None: no limit) or close, if the socket is free; False if it
        is not (another caller holds it, or the transport is closing)."""
        lock = self._io_lock
        if not (lock.acquire(False) or (not self._leading
                                        and lock.acquire(True, _TAKE_OVER_WAIT_S))):
            return False
        try:
            if not self._sock_open or self._closing:
                return False
            self._leading = True
            self._lead(done, deadline)
            return True
        finally:
            self._leading = False
            lock.release()
            if self._closing:
                self._waker.wake()    # the IO thread's close signal may have been read by this leader

    def post(self, env: dict) -> None:
        """Send an envelope that expects no answer."""
        self._outbox.append(env)
        if not self._waker.pending:
            self._waker.wake()

    def close(self, timeout: float = 2.0) -> None:
        self._closing = True
        self._waker.wake()
        self._thread.join(timeout)
        if not self._thread.is_alive():
            # Only once nobody polls them any more (a thread still stuck holding the
            # socket keeps them open: better a leak than a reused descriptor).
            self._waker.close()
        self._fail_owed(BusError("session_closed"))

    def forget(self, msg_id: str) -> None:
        """Stop waiting for ``msg_id`` (the caller gave up on it)."""
        self._owed.pop(msg_id, None)

    # -- internals shared by the IO thread and leading callers -----------------------------

    def _register(self, msg_id: str, request: dict | tuple) -> Reply:
        """A reply owed for ``request``; already failed when the transport is closed."""
        reply = Reply(self._cond, request)
        self._owed[msg_id] = reply
        if self._dead:
            self._refuse_closed(msg_id)
        return reply

    def _enqueue(self, msg_id: str, request: dict | tuple) -> Reply:
        """Register a pipelined request and queue it for the outbox's next flush."""
        reply = self._register(msg_id, request)
        if reply._state is not PENDING:
            return reply
        outbox = self._outbox
        outbox.append(request)
        if not self._waker.pending:
            self._waker.wake()
        elif not len(outbox) % _YIELD_EVERY:
            # The IO thread was woken to send these and waits for the interpreter,
            # which a thread that only queues gives up once per switch interval (5 ms):
            # hand it over now.
            time.sleep(0)
        return reply

    def _refuse_closed(self, msg_id: str) -> None:
        """A request registered after close began: fail it unless close already did."""
        reply = self._owed.pop(msg_id, None)
        if reply is not None:
            self._resolve([(reply, BusError("session_closed").reply())])

    def _lead(self, done: Callable[[], bool], deadline: float | None) -> None:
        """Holding ``_io_lock``: service the socket until ``done()``, the deadline
        passes or the transport closes."""
        self._service()
        if done() or self._closing:
            return               # no need to wait: the IO thread's watch stays as it is
        poll = self._lead_poller.poll
        wake_fd = self._waker.fd
        self._io_watch(False)
        try:
            while True:
                if deadline is None:
                    wait_s = _IDLE_POLL_S
                else:
                    wait_s = deadline - time.monotonic()
                    if wait_s <= 0:
                        return
                    if wait_s > _IDLE_POLL_S:
                        wait_s = _IDLE_POLL_S
                ready = poll(math.ceil(wait_s * 1000))
                for fd, _ in ready:
                    if fd == wake_fd:
                        self._waker.clear()
                self._timers(time.monotonic())
                self._service()
                if done() or self._closing:
                    return
        finally:
            # Level-triggered: this wakes the IO thread at once if input is waiting.
            self._io_watch(True)

    def _io_watch(self, on: bool) -> None:
        """Switch the IO thread's watch of the socket on or off (while a caller leads)."""
        if _EPOLL:
            self._io_poller.modify(self._sock_fd, select.EPOLLIN if on else 0)

    def _service(self) -> None:
        """Holding ``_io_lock``: send what is queued, read what arrived, until both
        are done; ends with a read that found nothing (see the module invariant)."""
        outbox = self._outbox
        while True:
            if outbox:
                self._flush()
            self._drain()
            if not outbox:
                return

    def _timers(self, now: float) -> float:
        """Heartbeat and liveness; returns seconds until they next need a look."""
        if now - self._last_sent >= HEARTBEAT_S:
            self._send([envelope("hb")])
        if self.connected.is_set() and now - self.last_heard > LIVENESS_S:
            # The broker went quiet: assume it restarted and take the session back.
            self.connected.clear()
            self._say_hello()
        return _IDLE_POLL_S

    def _say_hello(self) -> None:
        hello = self._hello()
        self._hello_id = hello["id"]
        self._outbox.appendleft(hello)

    def _flush(self) -> None:
        """Send everything queued, in order, in as few frames as the limits allow."""
        envs = take_envelopes(self._outbox)
        if envs:
            self._send(envs)

    def _send(self, envs: list[dict]) -> None:
        frames, oversize = pack_frames(envs, MAX_FRAME_BYTES, MAX_FRAME_BYTES, self._packb)
        for frame in frames:
            try:
                self._send_frame(frame, _NOBLOCK)
            except zmq.Again:
                self._send_frame(frame)   # queue full: wait for room rather than lose a request
        self._last_sent = time.monotonic()
        if oversize:
            self._refuse_oversize(oversize)

    def _refuse_oversize(self, envs: list[dict]) -> None:
        """Requests the broker would refuse unread: answer them here, at once."""
        answers = []
        for env in envs:
            size = len(self._packb(env))
            ids = env["ids"] if env.get("k") == "sends" else [env.get("id")]
            reply = BusError("request_too_large", size=size, limit=MAX_FRAME_BYTES).reply()
            answers.extend((msg_id, dict(reply)) for msg_id in ids if isinstance(msg_id, str))
        self._deliver([], [], answers)

    def _drain(self) -> None:
        recv, getsockopt = self._recv, self._getsockopt
        msgs: list[dict] = []
        events: list[dict] = []
        answers: list[tuple[str, dict]] = []
        try:
            self._read(recv, getsockopt, msgs, events, answers)
        finally:
            # Even when interrupted (a leader is a user's thread: KeyboardInterrupt),
            # what was read is queued and answered, not lost.
            if msgs or events or answers:
                self._deliver(msgs, events, answers)

    def _read(self, recv, getsockopt, msgs: list, events: list, answers: list) -> None:
        while getsockopt(_EVENTS) & _POLLIN:
            try:
                frame = recv(_NOBLOCK)
            except zmq.Again:
                break
            self.last_heard = time.monotonic()
            try:
                envs = unpack_frame(frame, MAX_INBOUND_FRAME_BYTES)
            except BusError:
                continue
            for env in envs:
                kind = env.get("k")
                if kind == "result":
                    re = env.get("re")
                    if re is not None and re == self._hello_id:
                        # What came before the welcome goes first; then the lists
                        # are reused for what follows it.
                        before = msgs[:], events[:], answers[:]
                        del msgs[:], events[:], answers[:]
                        self._deliver(*before)
                        self._welcomed(env)
                    elif env.get("code") == "not_connected":
                        if self.connected.is_set():
                            self.connected.clear()
                            self._say_hello()
                        # the request is resent after the new welcome
                    elif isinstance(re, str):
                        env.pop("v", None)
                        del env["k"]
                        del env["re"]
                        answers.append((re, env))
                elif kind == "msg":
                    msgs.append(env)
                elif kind == "msgs":
                    expand_msgs(env, msgs)
                elif kind == "acks":
                    ids = env.get("ids")
                    if ids.__class__ is list:
                        # A bare id stands for "acknowledged": the answer dict is made
                        # only for an id still owed (anything but str is skipped then).
                        answers.extend(ids)
                elif kind == "event":
                    events.append(env)

    def _deliver(self, msgs: list, events: list, answers: list) -> None:
        """Queue inbound envelopes, then resolve the answers that came with them:
        ``(id, answer)`` pairs, and bare ids of acknowledged sends."""
        if msgs or events:
            self._on_inbound(msgs, events)
        if not answers:
            return
        pop = self._owed.pop
        done = []
        for answer in answers:
            if answer.__class__ is str:
                reply = pop(answer, None)
                if reply is not None:
                    done.append((reply, {"ok": True, "delivered": True, "messageId": answer}))
            elif answer.__class__ is tuple:
                reply = pop(answer[0], None)
                if reply is not None:
                    done.append((reply, answer[1]))
        if done:
            self._resolve(done)

    def _resolve(self, done: list[tuple[Reply, Any]]) -> None:
        callbacks = []
        with self._cond:
            for reply, value in done:
                if reply._state in OPEN:
                    reply._result = value
                    reply._state = FINISHED
                    if reply.waiter_list:
                        for waiter in reply.waiter_list:
                            waiter.add_result(reply)
                    if reply.callback_list:
                        callbacks.append(reply)
            self._cond.notify_all()
        for reply in callbacks:
            reply._invoke_callbacks()

    def _welcomed(self, env: dict) -> None:
        self._hello_id = None
        result = _strip(env)
        self._on_welcome(result)
        if not env.get("ok"):
            return
        self.connected.set()
        pending = [reply.request for reply in list(self._owed.values())]
        self._outbox.extend(pending)

    def _fail_owed(self, error: BusError) -> None:
        self._dead = True
        owed = self._owed
        failed = []
        while True:
            try:
                _, reply = owed.popitem()
            except KeyError:
                break
            failed.append((reply, error.reply()))
        self._resolve(failed)

    # -- IO thread ----------------------------------------------------------------------

    def _run(self) -> None:
        poll = self._io_poller.poll
        lock = self._io_lock
        wake_fd = self._waker.fd
        ready: list = []
        try:
            with lock:
                self._say_hello()
                self._service()
            while True:
                with lock:
                    if self._closing:
                        if self._sock_open and self._outbox:
                            self._flush()
                        break
                    for fd, _ in ready:
                        if fd == wake_fd:
                            self._waker.clear()
                    wait_s = self._timers(time.monotonic())
                    self._service()
                ready = poll(wait_s if _EPOLL else wait_s * 1000)
        finally:
            with lock:
                self._sock_open = False
                self._sock.close()
                if _EPOLL:
                    self._io_poller.close()


def _strip(env: dict) -> dict[str, Any]:
    return {k: v for k, v in env.items() if k not in ("v", "k", "re")}
