"""The client's driver: one DEALER socket, and the threads that take turns on it.

What to send, and what the broker's frames mean, is :class:`ClientProtocol` (no IO);
this module moves its frames, runs its timers and hands on what it reports.

Invariants:

* The socket, the protocol's socket side and the lead poller are touched only by the
  holder of ``_io_lock``: the IO thread, or a *leader*, a caller blocked in
  :meth:`Transport.call` or :meth:`Transport.serve_until` that took the lock while it
  was free. A leader services the socket itself (everyone's answers, inbound messages
  and timers on the way) until its own wait is over, saving both thread hand-offs.
  ``_leading`` is set meanwhile: a caller that finds the IO thread holding the lock
  waits up to ``_TAKE_OVER_WAIT_S`` for it, one that finds a leader does not.
* ZMQ_FD is edge-triggered: it signals a change of ZMQ_EVENTS, not waiting input. So
  a holder services until a read finds nothing (:meth:`Transport._service`), and
  whoever releases the lock has just seen ZMQ_EVENTS without POLLIN after its last
  send: anything that arrives later signals the IO thread, or the next leader (which
  therefore waits at once when it has nothing to send).
* The IO thread sleeps in epoll on ZMQ_FD and the waker *without* the lock, waking at
  least every ``timer_interval_s`` for the timers (a leader runs them when its wait
  times out, and at most every ``_LEAD_TIMERS_S`` when woken by input). A leader
  switches ZMQ_FD off there while it leads, so its answer does not wake the IO
  thread too, and on again after (level-triggered: that wakes the IO thread at once
  if input waits).
* Any thread may queue (``request``, ``request_send``, ``post``): the protocol's
  caller side takes no lock; then a wake-up, unless one is pending already.
* ``on_inbound`` and ``on_welcome`` run on the servicing thread and must not block.
  Messages are handed on before the answers that came with or after them resolve;
  the answers of one read resolve under one acquisition of ``_cond``.
* Bounded inbox: a holder reads a frame only while the session's inbox is under
  ``inbox_limit_bytes``, or while a :meth:`Transport.call` waits, under that plus a
  reserve (:func:`_reserve`: its answer may sit behind messages, a frame of them).
  Otherwise reading pauses: unread frames stay in ZeroMQ's queue (``RCVHWM``) and
  the kernel's buffers, which push back on the broker. While paused the broker's
  silence proves nothing (no reconnect); a call still waiting at its timeout is
  answered ``inbox_full``; whoever takes from the inbox calls :meth:`room_made`,
  which wakes the IO thread to read again once there is room.
* Close: the IO thread flushes what is queued and closes the socket, then every owed
  request fails with ``session_closed``.
"""

from __future__ import annotations

import math
import select
import threading
import time
from typing import Callable

import zmq

from schemas.limits import MAX_INBOUND_FRAME_BYTES

from .broker_choice import BrokerChoice
from .protocol import ClientProtocol, Inbound, State
from .handshakes import HandshakeWatch
from .keys import CurveKeys
from .replies import FINISHED, PENDING, Reply, resolve
from .waker import Waker

_EPOLL = hasattr(select, "epoll")
_NOBLOCK = int(zmq.NOBLOCK)
_EVENTS = int(zmq.EVENTS)
_POLLIN = int(zmq.POLLIN)
# How long a caller waits for the IO thread to finish servicing the socket before it
# hands its call over instead of running it itself.
_TAKE_OVER_WAIT_S = 0.005
# Pipelined sends queued, while the IO thread is due to send them, before the
# sending thread lets it run.
_YIELD_EVERY = 256
# Frames ZeroMQ queues unread: enough to keep a fast reader busy (a frame carries up
# to 50 messages), few enough that a paused reader does not hold a backlog itself
# (a frame may be up to MAX_INBOUND_FRAME_BYTES): the broker holds it instead.
_RCVHWM = 32
# A leader woken by input runs the protocol's timers at most this often (a wait that
# times out always runs them): they fire by the second, and cost a few calls a wake-up.
_LEAD_TIMERS_S = 0.01


def _reserve(limit: int) -> int:
    """How far past ``limit`` reading goes while a call waits for its answer: the
    limit again, and at least one whole frame from the broker."""
    return max(limit, MAX_INBOUND_FRAME_BYTES)


class Transport:
    """Owns the DEALER socket; thread-safe public methods. ``hello()`` builds a hello;
    ``on_inbound(msgs, events)`` gets the ``msg`` and ``event`` envelopes of each read,
    ``on_welcome(result)`` each answer to a hello. ``inbox_size()`` is what the
    session's inbox holds, bounded by ``inbox_limit_bytes`` (0: no bound)."""

    def __init__(self, endpoint: str | list[str], on_inbound: Callable[[list, list], None],
                 hello: Callable[[], dict], on_welcome: Callable[[dict], None],
                 curve: CurveKeys | None = None, inbox_size: Callable[[], int] | None = None,
                 inbox_limit_bytes: int = 0) -> None:
        # Failover: the brokers sharing one database, tried in turn (client.broker_choice).
        self._brokers = BrokerChoice([endpoint] if isinstance(endpoint, str) else list(endpoint))
        endpoint = self._brokers.current
        self._inbox_size = inbox_size
        self.inbox_limit_bytes = inbox_limit_bytes if inbox_size is not None else 0
        self._calls_waiting = 0           # callers in call(): reading may use the reserve
        self._on_inbound = on_inbound
        self._on_welcome = on_welcome
        self._protocol = protocol = ClientProtocol(hello)
        self._request = protocol.request      # bound once: the pipelined send path is hot
        self._queued = protocol.queued
        # Shared by all replies. Reentrant, as each Future's own is: concurrent.futures
        # wait() and as_completed() take the conditions of all their futures at once.
        self._cond = threading.Condition(threading.RLock())
        self._io_lock = threading.Lock()  # held by whoever touches the socket
        self._leading = False             # a caller (not the IO thread) holds _io_lock
        self._closing = False
        self._timers_at = 0.0             # a leader woken by input runs timers from then
        self._waker = Waker()
        self._sock = sock = zmq.Context.instance().socket(zmq.DEALER)
        sock.linger = 1000
        sock.sndhwm = 100_000
        sock.rcvhwm = _RCVHWM
        sock.reconnect_ivl = 100
        sock.reconnect_ivl_max = 1000
        self._curve = curve
        if curve is not None:
            sock.curve_serverkey = curve.server_key.encode()
            sock.curve_publickey = curve.public_key.encode()
            sock.curve_secretkey = curve.secret_key.encode()
        # Until the first handshake succeeds (see client.handshakes).
        self.handshakes = HandshakeWatch(sock, curve is not None, self._detach_monitor)
        sock.connect(endpoint)
        # pyzmq's own send, without its Python wrapper (which only adds the DRAFT
        # routing_id and group arguments): one call less per frame.
        self._send = super(zmq.Socket, sock).send
        self._sock_open = True
        self._sock_fd = sock.getsockopt(zmq.FD)
        # Without epoll, leaders cannot stop the IO thread waking (see _io_watch).
        self._io_poller = select.epoll() if _EPOLL else select.poll()
        self._lead_poller = select.poll()
        for fd in (self._sock_fd, self._waker.fd):
            self._io_poller.register(fd, select.POLLIN)    # EPOLLIN is POLLIN
            self._lead_poller.register(fd, select.POLLIN)
        self._thread = threading.Thread(target=self._run, name="intercom-client", daemon=True)
        self._thread.start()

    @property
    def connected(self) -> bool:
        return self._protocol.connected

    @property
    def reading_paused(self) -> bool:
        return self._protocol.reading_paused

    def room_made(self) -> None:
        """Something was taken from the inbox (any thread): resume reading if paused
        and there is room now."""
        if self._protocol.reading_paused and self._may_read() and not self._waker.pending:
            self._waker.wake()

    def silent_since(self) -> float | None:
        """Wall-clock time the broker was last heard from (None: never)."""
        heard = self._protocol.last_heard
        return time.time() - (time.monotonic() - heard) if heard else None

    def heard_since(self, moment: float) -> bool:
        """Whether the broker sent anything after the monotonic ``moment``."""
        return self._protocol.last_heard > moment

    # -- public, any thread ---------------------------------------------------------

    def request(self, env: dict) -> Reply:
        """Send a request envelope (with ``id``); the future gets the broker's result."""
        return self._enqueue(env["id"], env)

    def request_send(self, to: str, msg_id: str, message: str) -> Reply:
        """A quiet plain send of text to ``to``, queued as ``(to, id, message)``: runs
        of them to one target leave as one ``sends`` envelope. The future gets the
        broker's answer for this id."""
        return self._enqueue(msg_id, (to, msg_id, message))

    def call(self, env: dict, timeout: float,
             on_answer: Callable[[dict], None] | None = None) -> dict | None:
        """Send a request and wait for its result; None after ``timeout`` seconds.

        When the socket is free, this thread sends and services it itself until the
        answer is in, instead of handing the request to the IO thread and waiting
        to be woken. ``on_answer(result)``, if given, runs on the thread that reads
        the answer, before anything read after it is acted on; never for a request
        given up on, as this call then returns None.
        """
        made_at = time.monotonic()
        deadline = made_at + timeout
        reply = Reply(self._cond, env)
        reply.made_at = made_at           # an ask resent after a reconnect keeps its deadline
        if on_answer is not None:
            reply.add_done_callback(lambda done: on_answer(done._result))
        refusal = self._request(env["id"], reply)
        self._calls_waiting += 1          # GIL-atomic enough: a hint for _may_read
        try:
            if refusal is not None:
                resolve(self._cond, [(reply, refusal)])
            elif not self.serve_until(lambda: reply._state is not PENDING, deadline):
                if not self._waker.pending:
                    self._waker.wake()
            return reply.result(max(0.0, deadline - time.monotonic()))
        except TimeoutError:
            self._protocol.forget(env["id"])
            if reply._state is FINISHED:
                return reply._result      # answered as it timed out: it counts
            return None
        finally:
            self._calls_waiting -= 1

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
        self._protocol.post(env)
        if not self._waker.pending:
            self._waker.wake()

    def last_reports(self) -> dict:
        """What a ``bye`` tells: the bytes read, and the newest message the program took."""
        protocol = self._protocol
        fields = {"read": protocol.read_bytes}
        if protocol.reports.seen_through is not None:
            fields["seenThrough"] = protocol.reports.seen_through
        return fields

    def saw(self, message_id: str) -> None:
        """The program took ``message_id`` (any thread): told in a coming heartbeat."""
        self._protocol.reports.seen_through = message_id

    def resync(self) -> None:
        """From ``on_welcome`` only: say hello again (see ClientProtocol.resync)."""
        self._protocol.resync()

    @property
    def auth_monitor(self) -> zmq.Socket | None:
        """The handshake watch's monitor while it watches, else None."""
        return self.handshakes.monitor

    def _detach_monitor(self) -> None:
        with self._io_lock:
            self._stop_watching()

    def _stop_watching(self) -> None:
        """Holding ``_io_lock``: detach the handshake monitor while the socket is open
        (see client.handshakes)."""
        if self._sock_open and self.handshakes.watching:
            self._sock.disable_monitor()

    def close(self, timeout: float = 2.0) -> None:
        self._closing = True
        self._waker.wake()
        self._thread.join(timeout)
        if not self._thread.is_alive():
            # Only once nobody polls them any more (a thread still stuck holding the
            # socket keeps them open: better a leak than a reused descriptor).
            self._waker.close()
        if not self._thread.is_alive():
            self.handshakes.forget()    # detached from the socket as it closed
        resolve(self._cond, self._protocol.close())

    # -- internals ---------------------------------------------------------------------

    def _enqueue(self, msg_id: str, request: dict | tuple) -> Reply:
        """Queue a pipelined request for the next flush; its reply."""
        reply = Reply(self._cond, request)
        refusal = self._request(msg_id, reply)
        if refusal is not None:
            resolve(self._cond, [(reply, refusal)])
        elif not self._waker.pending:
            self._waker.wake()
        elif not self._queued() % _YIELD_EVERY:
            # The IO thread was woken to send these and waits for the interpreter,
            # which a thread that only queues gives up once per switch interval (5 ms):
            # hand it over now.
            time.sleep(0)
        return reply

    def _lead(self, done: Callable[[], bool], deadline: float | None) -> None:
        """Holding ``_io_lock``: service the socket until ``done()``, the deadline
        passes or the transport closes."""
        protocol = self._protocol
        if protocol.wants_to_send() or protocol.reading_paused:
            self._service()
        # Else nothing to do before the wait: the last holder ended on a read that
        # found nothing, so ZMQ_FD signals whatever came since (the poll below sees it).
        if done() or self._closing:
            return               # no need to wait: the IO thread's watch stays as it is
        poll = self._lead_poller.poll
        wake_fd = self._waker.fd
        self._io_watch(False)
        try:
            while True:
                wait_s = self._timer_wait_s()
                if deadline is not None:
                    wait_s = min(wait_s, deadline - time.monotonic())
                    if wait_s <= 0:
                        return
                ready = poll(math.ceil(wait_s * 1000))
                for fd, _ in ready:
                    if fd == wake_fd:
                        self._waker.clear()
                if not ready or time.monotonic() >= self._timers_at:
                    self._timers()
                self._service()
                if done() or self._closing:
                    return
        finally:
            self._io_watch(True)

    def _timer_wait_s(self) -> float:
        """How long the socket's holder may wait before the timers are due: at most
        the protocol's timer interval, less when held sends may go again sooner."""
        interval = self._protocol.timer_interval_s     # the welcome may change it
        due = self._protocol.next_due()
        if due is None:
            return interval
        return min(interval, max(0.001, due - time.monotonic()))

    def _timers(self) -> None:
        """Holding ``_io_lock``: the protocol's timers, then failover if it is due."""
        now = time.monotonic()
        self._timers_at = now + _LEAD_TIMERS_S
        self._protocol.timers(now)
        target = self._brokers.failover(self._protocol.state is State.GREETING, now)
        if target is not None:
            self._move(target)

    def _follow_redirect(self) -> None:
        """Holding ``_io_lock``: the broker sent the hello elsewhere (a stage's run is
        held by another broker): the socket moves there, or says hello again here."""
        target, self._protocol.redirect = self._protocol.redirect, None
        target = self._brokers.redirected(target, self._protocol.redirect_key,
                                          self._protocol.redirects)
        if target is not None:
            self._move(target)

    def _move(self, target: str) -> None:
        old = self._brokers.moved(target)
        try:
            self._sock.disconnect(old)
        except zmq.ZMQError:
            pass
        if self._curve is not None:
            key = self._brokers.server_keys.get(target, self._curve.server_key)
            self._sock.curve_serverkey = key.encode()
        self._sock.connect(target)
        self._protocol.redial()

    def _io_watch(self, on: bool) -> None:
        """Switch the IO thread's watch of the socket on or off (while a caller leads)."""
        if _EPOLL:
            self._io_poller.modify(self._sock_fd, select.EPOLLIN if on else 0)

    def _service(self) -> None:
        """Holding ``_io_lock``: send what is due, read what arrived, until both are
        done; ends with a read that found nothing (see the module invariants)."""
        wants_to_send = self._protocol.wants_to_send
        while True:
            if wants_to_send():
                self._flush()
            self._drain()
            if self._protocol.redirect is not None:
                self._follow_redirect()
            if not wants_to_send():
                return

    def _flush(self) -> None:
        """Send what is due. Requests refused as too large are answered by the next
        :meth:`_deliver` (the drain that follows every flush)."""
        send = self._send
        for frame in self._protocol.frames_to_send(time.monotonic()):
            try:
                send(frame, _NOBLOCK)
            except zmq.Again:
                send(frame)               # queue full: wait for room rather than lose a request

    def _may_read(self) -> bool:
        limit = self.inbox_limit_bytes
        if not limit:
            return True
        size = self._inbox_size()
        return size < limit or (self._calls_waiting > 0 and size < limit + _reserve(limit))

    def _drain(self) -> None:
        recv, getsockopt = self._sock.recv, self._sock.getsockopt
        protocol = self._protocol
        receive_frame, monotonic = protocol.receive_frame, time.monotonic
        bounded = self.inbox_limit_bytes > 0
        if protocol.reading_paused and self._may_read():
            # Room again (a take woke us): resume even if nothing is waiting to be read.
            protocol.resume_reading(monotonic())
        read = False
        try:
            # EVENTS is read even when paused: it consumes ZMQ_FD's signal, which
            # would otherwise keep the IO thread's poll waking.
            while getsockopt(_EVENTS) & _POLLIN:
                if bounded:
                    if read:
                        self._deliver()   # the inbox counts what was read so far
                    if not self._may_read():
                        protocol.reading_paused = True
                        break
                    if protocol.reading_paused:
                        protocol.resume_reading(monotonic())
                try:
                    frame = recv(_NOBLOCK)
                except zmq.Again:
                    break
                read = True
                receive_frame(frame, monotonic())
        finally:
            # Even when interrupted (a leader is a user's thread: KeyboardInterrupt),
            # what was read is queued and answered, not lost.
            self._deliver()

    def _deliver(self) -> None:
        """Act on what the protocol reports, in its order."""
        for event in self._protocol.next_events():
            if event.__class__ is Inbound:
                if event.msgs or event.events:
                    self._on_inbound(event.msgs, event.events)
                if event.answers:
                    resolve(self._cond, event.answers)
            else:
                self._on_welcome(event.result)

    # -- IO thread ----------------------------------------------------------------------

    def _run(self) -> None:
        poll = self._io_poller.poll
        scale = 1 if _EPOLL else 1000         # epoll takes seconds, poll milliseconds
        lock = self._io_lock
        wake_fd = self._waker.fd
        protocol = self._protocol
        ready: list = []
        try:
            with lock:
                self._service()       # the first hello
            while True:
                with lock:
                    if self._closing:
                        if protocol.wants_to_send():
                            self._flush()
                            self._deliver()       # requests refused as too large
                        break
                    for fd, _ in ready:
                        if fd == wake_fd:
                            self._waker.clear()
                    self._timers()
                    self._service()
                    wait = self._timer_wait_s() * scale     # the protocol's: under the lock
                ready = poll(wait)
        finally:
            with lock:
                self._stop_watching()
                self._sock_open = False
                self._sock.close()
                if _EPOLL:
                    self._io_poller.close()
