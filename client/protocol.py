"""The client's side of the wire protocol, sans IO: what to send, and what came back.

:class:`ClientProtocol` has no socket, thread or clock (the h11 model). Its driver
hands it every frame the broker sends with the monotonic time (:meth:`receive_frame`),
calls :meth:`timers` at least every :attr:`~ClientProtocol.timer_interval_s`, sends the frames of
:meth:`frames_to_send`, and acts on :meth:`next_events` in their order:
:class:`Inbound` (queue its messages and presence events, then resolve its answers)
and :class:`Welcome` (the broker's answer to a hello).

Theory of operation:

* Each request owed an answer is in the owed table, id -> owed object (the driver's
  reply future; the protocol reads only its ``request``: the envelope, or the
  ``(to, id, message)`` tuple of a plain send), in the order it was made. An answer
  pops its entry, so it is answered at most once; an answer for an id not owed (given
  up, answered already, never asked) is dropped.
* The connection is the state machine :data:`_NEXT`, keyed (state, input). Entering
  GREETING makes a hello due; it is built when the next frames are, so it carries
  what the session knows (its memberships as acknowledged). Nothing else leaves while
  not CONNECTED: requests made meanwhile wait in the outbox. Entering CONNECTED
  rebuilds the outbox: every owed request sent before, in order, under its own id
  (the broker deduplicates them), then what waited, less any request given up on
  (:meth:`forget`) meanwhile. So a request whose caller was told it failed is never
  sent later, and one sent before an outage reaches a restarted broker only as a
  stale frame ahead of the hello, which it refuses ``not_connected`` (an input
  here, not an answer). An ask goes again with what is left of its own timeout, and
  ``ASK_RESEND_DELAY_S`` after the welcome: a restarted broker knows only the
  sessions that said hello again, and its answer to an id is final (a retry gets
  the same one), so an ask resent before its target is back would fail for good.
* What arrived before a welcome is reported before it, what arrived after, after it.
* The broker's welcome names its liveness window (``livenessS``): the session says
  it is alive every third of it (:func:`~schemas.limits.heartbeat_s`) and takes the
  broker for gone after hearing nothing for that long. Until a welcome, the defaults.
* Receipts: what was read and seen rides on heartbeats, as :mod:`client.reports` says.
* While the driver pauses reading (its inbox is full) silence proves nothing: the
  broker's frames wait unread, so SILENCE is not an input then.
* Closing is a latch outside the state machine (any thread sets it): every owed
  request fails with ``session_closed``, and so does every request made later.

Threads: no lock. The caller side (:meth:`request`, :meth:`post`, :meth:`forget`,
:meth:`close`, :attr:`queued`) only appends to the outbox deque and sets or pops
single keys of the owed dict, which CPython does atomically: any thread, any time.
Close sets the latch, then empties the table; a request that finds the latch set
pops its own entry; whichever side pops an entry answers it, exactly once. The rest
is the socket side: one thread at a time, the one the driver lets touch the socket.
"""

from __future__ import annotations

import enum
import math
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable, Protocol

from schemas.errors import REDIRECTS, BusError
from schemas.limits import (HEARTBEAT_S, LIVENESS_S, MAX_BACKLOG_BYTES, MAX_FRAME_BYTES,
                            MAX_INBOUND_FRAME_BYTES, MIN_LIVENESS_S, heartbeat_s)
from schemas.protocol import envelope, new_packer, pack_frames, unpack_frame

from .backpressure import Holds
from .reports import Reports
from .requeue import requeue, resend
from .wire import expand_msgs, take_envelopes

DEFAULT_REPORT_BYTES = MAX_BACKLOG_BYTES // 8   # until a welcome tells the broker's bound
# A live peer says hello to a restarted broker within a heartbeat (answered
# not_connected) and a reconnect interval (at most 1 s): twice that, and a little.
ASK_RESEND_DELAY_S = 2 * HEARTBEAT_S + 0.5
# A hello refused with one of these and an ``endpoint`` is said again there: the broker
# holding the stage's workflow run, or this one once it has taken over the run.
REDIRECT_CODES = REDIRECTS
# A run moves between brokers only once its old host's lease has ended (seconds to a
# minute), so a stage told "moving" keeps asking, with pauses that double up to 2 s,
# for a minute; a broker that keeps saying it makes the session ask the next endpoint.
REDIRECT_DELAY_S = 0.2       # the first pause before a hello to the same broker again
REDIRECT_DELAY_MAX_S = 2.0
REDIRECT_PATIENCE_S = 60.0   # redirected in a row this long without a welcome: it stands
ROTATE_AFTER = 3             # "moving" from one broker this often in a row: try another


class Owed(Protocol):
    """What the protocol keeps for a request owed an answer: the driver's reply."""

    request: dict | tuple              # what was queued; queued again after a re-welcome


class State(enum.Enum):
    GREETING = "greeting"      # a hello is due or out, and not answered yet
    CONNECTED = "connected"    # welcomed: the broker knows this session
    REFUSED = "refused"        # the broker refused the last hello: requests time out


class Input(enum.Enum):
    WELCOME = "welcome"              # the current hello answered ok
    REFUSAL = "refusal"              # the current hello answered with an error
    NOT_CONNECTED = "not_connected"  # a request answered not_connected: broker forgot us
    SILENCE = "silence"              # nothing heard from the broker for its liveness window
    RESYNC = "resync"                # the welcome missed a change acknowledged meanwhile


# (state, input) -> next state. A pair not listed changes nothing: while greeting, a
# not_connected answer is served by the hello already due or out, and silence is
# expected (no session to hear from yet); a refused session stays refused.
_NEXT: dict[tuple[State, Input], State] = {
    (State.GREETING, Input.WELCOME): State.CONNECTED,
    (State.GREETING, Input.REFUSAL): State.REFUSED,
    (State.CONNECTED, Input.NOT_CONNECTED): State.GREETING,
    (State.CONNECTED, Input.SILENCE): State.GREETING,
    (State.CONNECTED, Input.RESYNC): State.GREETING,
}


@dataclass(frozen=True, slots=True)
class Inbound:
    """What arrived (or was refused here) since the last event, in arrival order:
    ``msg`` envelopes (``msgs`` expanded) and ``event`` envelopes to queue first, then
    ``(owed, answer)`` pairs to resolve, each owed object already out of the table."""

    msgs: list[dict]
    events: list[dict]
    answers: list[tuple[Any, dict]]


@dataclass(frozen=True, slots=True)
class Welcome:
    """The answer to the current hello without ``v``, ``k`` and ``re``: ``ok`` and the
    session's identity, or the broker's refusal."""

    result: dict[str, Any]


class ClientProtocol:
    """One session's protocol state. ``hello()`` builds a hello envelope (with ``id``)
    from what the session knows, on the socket side, whenever one is due."""

    def __init__(self, hello: Callable[[], dict]) -> None:
        self._hello = hello
        self._outbox: deque = deque()          # envelopes and plain-send tuples, in order
        self._owed: dict[str, Owed] = {}
        self.closed = False
        self.state = State.GREETING
        self.last_heard = 0.0                  # monotonic time of the broker's last frame
        self._last_sent = 0.0
        self._hello_due = True
        self._hello_id: str | None = None     # the hello out; its answer is the welcome
        # Where the broker sent this session's hello (the driver moves the socket and
        # clears it); hellos redirected since the last welcome; a hello held until then.
        self.redirect: str | None = None
        self.redirect_key: str | None = None     # the CURVE server key there, if named
        self.redirects = 0                     # in a row (the driver rotates on it)
        self._redirect_since: float | None = None
        self._hello_at: float | None = None
        self._heartbeat_due = False
        self.liveness_s = LIVENESS_S           # the broker's window, from its welcome
        self._heartbeat_s = HEARTBEAT_S
        # Bytes read since the hello, and as last told: the broker bounds what this
        # session may leave unread (its backlog), so reads are reported as they go.
        self.read_bytes = 0
        self._reported = 0
        self._report_every = DEFAULT_REPORT_BYTES
        self.reports = Reports()               # read and seen, for the receipts
        self.reading_paused = False            # set by the driver: see the theory above
        self._deferred: list[str] = []         # ids of asks to resend at _deferred_at
        self._holds = Holds()                  # plain sends waiting for a backlogged target
        self._probes: deque = deque()          # held sends due again: before the outbox
        self._deferred_at = 0.0
        self._packb = new_packer()             # socket side only
        self._msgs: list[dict] = []
        self._events: list[dict] = []
        self._answers: list[tuple[Any, dict]] = []
        self._ready: list[Inbound | Welcome] = []
        # Items queued and not taken yet (any thread): a C method, as senders call it often.
        self.queued: Callable[[], int] = self._outbox.__len__

    @property
    def connected(self) -> bool:
        return self.state is State.CONNECTED

    # -- caller side: any thread --------------------------------------------------------

    def request(self, msg_id: str, owed: Owed) -> dict | None:
        """Queue ``owed.request`` (id ``msg_id``) and owe ``owed`` its answer.

        Returns None, or once closed the ``session_closed`` answer to give ``owed`` now
        (None then too if :meth:`close`, on another thread, is giving it instead).
        """
        table = self._owed
        table[msg_id] = owed
        if self.closed:
            if table.pop(msg_id, None) is None:
                return None
            return BusError("session_closed").reply()
        self._outbox.append(owed.request)
        return None

    def post(self, env: dict) -> None:
        """Queue an envelope that gets no answer."""
        self._outbox.append(env)

    def forget(self, msg_id: str) -> None:
        """Owe nothing for ``msg_id`` any more (its caller gave up): a late answer is
        dropped, and a re-welcome does not send it again."""
        self._owed.pop(msg_id, None)

    def close(self) -> list[tuple[Any, dict]]:
        """Owe nothing any more; returns each owed object with its ``session_closed``
        answer. Requests made from now on are refused the same way."""
        self.closed = True
        popitem = self._owed.popitem
        failed = []
        try:
            while True:
                failed.append((popitem()[1], BusError("session_closed").reply()))
        except KeyError:
            return failed

    # -- socket side: one thread at a time -----------------------------------------------

    def wants_to_send(self) -> bool:
        return (((bool(self._outbox) or bool(self._probes)) and self.state is State.CONNECTED)
                or self._hello_due or self._heartbeat_due)

    def frames_to_send(self, now: float) -> list[bytes]:
        """Everything due, in order, in as few frames as the limits allow: a due hello
        first, then what callers queued (each run of plain sends to one target as one
        ``sends`` envelope), then a due heartbeat. A request too large for a frame is
        left out and answered ``request_too_large`` in the next events."""
        if self.state is State.CONNECTED:
            envs = take_envelopes(self._outbox, self._holds.held)
            if self._probes:         # their target may still hold later ones: not diverted
                envs[:0] = take_envelopes(self._probes)
            if self._holds.inflight:
                self._holds.sent(envs)
        else:
            envs = []
        if self._hello_due:
            self._hello_due = False
            hello = self._hello()
            self._hello_id = hello["id"]
            envs.insert(0, hello)
            self.read_bytes = self._reported = 0     # the broker counts from the hello too
            self.reports.new_hello()
        if self._heartbeat_due:
            self._heartbeat_due = False
            envs.append(envelope("hb", read=self.read_bytes,
                                 **self.reports.fields(self.state is State.CONNECTED)))
            self._reported = self.read_bytes
        if not envs:
            return []
        frames, oversize = pack_frames(envs, MAX_FRAME_BYTES, MAX_FRAME_BYTES, self._packb)
        self._last_sent = now
        if oversize:
            self._refuse_oversize(oversize)
        return frames

    def receive_frame(self, frame: bytes, now: float) -> None:
        """Read one frame from the broker; what it meant is in the next events. A frame
        that does not decode is dropped, but still shows the broker alive."""
        self.last_heard = now
        self.read_bytes += len(frame)
        if self.read_bytes - self._reported >= self._report_every:
            self._heartbeat_due = True
        try:
            envs = unpack_frame(frame, MAX_INBOUND_FRAME_BYTES)
        except BusError:
            return
        handlers = _HANDLERS
        for env in envs:
            kind = env.get("k")
            if kind.__class__ is str:
                handler = handlers.get(kind)
                if handler is not None:
                    handler(self, env)

    def timers(self, now: float) -> None:
        """A heartbeat is due after a third of the liveness window without sending; a
        connected session that heard nothing for the window assumes the broker
        restarted or forgot it, and says hello again."""
        if now - self._last_sent >= self._heartbeat_s:
            self._heartbeat_due = True
        elif self.reports.due(now, self.state is State.CONNECTED):
            self._heartbeat_due = True
        if self._hello_at is not None and now >= self._hello_at:
            self._hello_at = None
            self._hello_due = True
        if now - self.last_heard > self.liveness_s and not self.reading_paused:
            self._step(Input.SILENCE, now)
        if self._deferred and now >= self._deferred_at and self.state is State.CONNECTED:
            owed = self._owed
            self._outbox.extend(resend(owed[msg_id], now) for msg_id in self._deferred
                                if msg_id in owed)
            self._deferred = []
        if self._holds.held and self.state is State.CONNECTED:
            self._release_held(now)

    def next_due(self) -> float | None:
        """The monotonic time held sends may go again, if any (the driver's timers
        must run then, not only every TIMER_INTERVAL_S)."""
        return self._holds.next_due() if self._holds.held else None

    @property
    def timer_interval_s(self) -> float:
        """The longest a driver may go without calling :meth:`timers`."""
        return self._heartbeat_s / 2

    def resume_reading(self, now: float) -> None:
        """The driver reads again: the broker's silence counts from now."""
        self.reading_paused = False
        self.last_heard = max(self.last_heard, now)

    def redial(self) -> None:
        """The driver moved the socket to another broker while greeting: the hello
        already sent went to the old one, so a new one is due."""
        if self.state is State.GREETING:
            self._hello_due = True
            self._hello_at = None

    def resync(self) -> None:
        """Say hello again (socket side, on a welcome): the session's memberships
        changed after the hello stated them."""
        self._step(Input.RESYNC, self.last_heard)

    def next_events(self) -> list[Inbound | Welcome]:
        """What happened since the last call, oldest first; empty if nothing did."""
        self._end_inbound()
        ready = self._ready
        if ready:
            self._ready = []
        return ready

    # -- internals --------------------------------------------------------------------------

    def _step(self, event: Input, now: float) -> None:
        state = _NEXT.get((self.state, event))
        if state is None:
            return
        self.state = state
        if state is State.GREETING:
            self._hello_due = True
        elif state is State.CONNECTED:
            self._requeue(now)

    def _release_held(self, now: float) -> None:
        """Held sends whose time came (see client.backpressure): out again ahead of
        the outbox, or failed with their refusal once the target took none for long."""
        again, failed = self._holds.take_due(now)
        owed = self._owed
        for ids, refusal in failed:
            for msg_id in ids:
                entry = owed.pop(msg_id, None)
                if entry is not None:
                    self._answers.append((entry, dict(refusal)))
        for ids in again:
            self._probes.extend(owed[msg_id].request for msg_id in ids if msg_id in owed)

    def _requeue(self, now: float) -> None:
        """On a welcome: owed requests sent before, then what waited meanwhile, less
        what was given up on (see the theory of operation)."""
        self._holds.clear()          # held sends are owed: they go again below
        self._probes.clear()
        self._deferred = requeue(self._outbox, self._owed)
        self._deferred_at = now + ASK_RESEND_DELAY_S

    def _end_inbound(self) -> None:
        if self._msgs or self._events or self._answers:
            self._ready.append(Inbound(self._msgs, self._events, self._answers))
            self._msgs, self._events, self._answers = [], [], []

    def _on_result(self, env: dict) -> None:
        re = env.get("re")
        if re is not None and re == self._hello_id:
            self._hello_id = None
            if self._redirected(env):
                return
            self._end_inbound()
            self._ready.append(Welcome({k: v for k, v in env.items()
                                        if k not in ("v", "k", "re")}))
            bound = env.get("backlogBytes")
            if bound.__class__ is int and bound > 0:
                self._report_every = max(1, bound // 8)
            window = env.get("livenessS")
            if window.__class__ in (int, float) and math.isfinite(window):
                self.liveness_s = max(float(window), MIN_LIVENESS_S)
                self._heartbeat_s = heartbeat_s(self.liveness_s)
            if env.get("ok"):
                self.redirects = 0
                self._redirect_since = None
            self._step(Input.WELCOME if env.get("ok") else Input.REFUSAL, self.last_heard)
        elif env.get("code") == "not_connected":
            self._step(Input.NOT_CONNECTED, self.last_heard)
        elif re.__class__ is str:
            owed = self._owed.get(re)
            if owed is None:
                return
            env.pop("v", None)
            del env["k"]
            del env["re"]
            request = owed.request
            if request.__class__ is tuple:
                to = request[0]
                if env.get("code") == "target_backlogged":
                    if to not in self._holds.inflight:
                        self._holds.inflight[to] = self._on_wire(to)
                    self._holds.hold(to, re, env, self.last_heard)  # still owed
                    return
                if self._holds.inflight:
                    self._holds.answered(to)
            if self._owed.pop(re, None) is not None:     # close() may have taken it
                self._answers.append((owed, env))

    def _redirected(self, env: dict) -> bool:
        """A hello refused with a redirect (see REDIRECT_CODES): due again, at the
        endpoint named (the driver moves there), after a pause if it is this broker."""
        endpoint = env.get("endpoint")
        if env.get("ok") or env.get("code") not in REDIRECT_CODES or \
                endpoint.__class__ is not str:
            return False
        now = self.last_heard
        if self._redirect_since is None:
            self._redirect_since = now
        elif now - self._redirect_since >= REDIRECT_PATIENCE_S:
            return False
        self.redirects += 1
        self.redirect = endpoint
        key = env.get("serverKey")
        self.redirect_key = key if key.__class__ is str else None
        self._hello_at = now + min(REDIRECT_DELAY_S * 2 ** (self.redirects - 1),
                                   REDIRECT_DELAY_MAX_S)
        return True

    def _on_acks(self, env: dict) -> None:
        ids = env.get("ids")
        if ids.__class__ is not list:
            return
        # A bare id stands for "delivered": its answer dict is made only for an id
        # still owed (anything but a str is skipped).
        pop = self._owed.pop
        answers = self._answers
        counted = self._holds.answered if self._holds.inflight else None
        for msg_id in ids:
            if msg_id.__class__ is str:
                owed = pop(msg_id, None)
                if owed is not None:
                    answers.append((owed, {"ok": True, "delivered": True, "messageId": msg_id}))
                    if counted is not None and owed.request.__class__ is tuple:
                        counted(owed.request[0])

    def _on_wire(self, to: str) -> int:
        """Plain sends to ``to`` sent and not answered yet: those owed, less those
        still queued (counted only when a target first meets a refusal)."""
        owed = sum(1 for entry in list(self._owed.values())
                   if entry.request.__class__ is tuple and entry.request[0] == to)
        queued = sum(1 for item in [*self._outbox, *self._probes]
                     if item.__class__ is tuple and item[0] == to)
        return owed - queued

    def _on_msg(self, env: dict) -> None:
        self._msgs.append(env)
        self.reports.arrived(self.last_heard)

    def _on_msgs(self, env: dict) -> None:
        expand_msgs(env, self._msgs)
        self.reports.arrived(self.last_heard)

    def _on_event(self, env: dict) -> None:
        self._events.append(env)

    def _refuse_oversize(self, envs: list[dict]) -> None:
        """Requests the broker would refuse unread: answer them here, at once."""
        pop = self._owed.pop
        for env in envs:
            error = BusError("request_too_large", size=len(self._packb(env)),
                             limit=MAX_FRAME_BYTES)
            ids = env["ids"] if env.get("k") == "sends" else [env.get("id")]
            for msg_id in ids:
                if msg_id.__class__ is str:
                    owed = pop(msg_id, None)
                    if owed is not None:
                        self._answers.append((owed, error.reply()))


# Broker kinds by what reading them does; ``hb`` (and anything unknown) only shows the
# broker alive.
_HANDLERS: dict[str, Callable[[ClientProtocol, dict], None]] = {
    "result": ClientProtocol._on_result,
    "acks": ClientProtocol._on_acks,
    "msg": ClientProtocol._on_msg,
    "msgs": ClientProtocol._on_msgs,
    "event": ClientProtocol._on_event,
}
