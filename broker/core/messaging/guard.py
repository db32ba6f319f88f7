"""The flood and loop guard: bounds on what one session sends to another, for agents.

A session whose hello turned the guard on (``guard``: :mod:`schemas.attention`; the
MCP server does, library clients do not unless they ask) carries its
:class:`GuardSettings` in ``Session.guard``. For each session it exchanged direct
messages with lately it has an :class:`Exchange`, its view of the pair, which two
bounds read:

* **flood**: the messages it sent that peer within the last 60 s. A send past
  ``per_minute`` is refused ``flood_guard`` with ``retryAfterS``, when the oldest of
  them leaves the window. They are counted in buckets of at most :data:`BUCKET_S`,
  each leaving the window with its latest message (never early: the bound is never
  exceeded, and a refusal lasts at most a bucket longer than exact counting).
* **loop**: the turns of direction between the two (it sent, then the peer did: one
  turn) since the last reset: ``pause_s`` with no message either way, or a person's
  input to either session (``status`` ``humanInput``: :func:`human_input`). A send
  that would make more than ``exchanges`` turns is refused ``loop_guard``, with
  ``retryAfterS`` until such a pause (none when pauses do not reset).

What counts: messages from one session to another named session: sends (alone or
pipelined), asks, and replies. Replies are counted but never refused (the peer waits
on them). Sends to a workflow path or a group's members are not counted, nor is
anything refused. Each broker counts for its own sessions what it sees: a guarded
session's sends (those handed to another broker's session too, checked before they
leave) and the messages delivered to it, from here or relayed. A person's input
resets the counts on every broker: its own, and the others it is told to
(``link_human_input``).

Invariants:

* only a guarded session owns views; ``watchers[peer]`` is exactly the set of
  sessions with a view of ``peer``;
* a session's views, and every view of it, go when it leaves (:func:`session_left`);
* at most :data:`MAX_PEERS` views per session (the least recently used goes first)
  and at most ``60 / BUCKET_S + 1`` buckets per view, so memory is bounded by
  guarded sessions x MAX_PEERS whatever the rates;
* time is the core's monotonic ``now``; a refused send changes nothing.

Cost: a session without the guard pays one attribute test per send, batch or ask
(:mod:`broker.core.routing.send_path`); a guarded one O(1) per batch.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

from schemas.attention import guard_settings
from schemas.errors import BusError

from broker.core.kernel.lifecycle import ControlLeft, SessionLeft
from broker.core.kernel.state import State
from broker.core.sessions.registry import Session

WINDOW_S = 60.0           # the flood bound's window ("a minute")
BUCKET_S = 1.0            # sends this close to a bucket's first share it
MAX_PEERS = 256           # views kept per guarded session
UNBOUNDED = 1 << 62       # the quota when the flood bound is off


@dataclass(frozen=True, slots=True)
class GuardSettings:
    """One session's bounds; 0 turns one off (``pause_s`` 0: no pause resets)."""

    per_minute: int
    exchanges: int
    pause_s: float


def settings(value: Any) -> GuardSettings | None:
    """The settings a hello's ``guard`` field asks for (see
    :func:`schemas.attention.guard_settings`); None: off, also when it turns both bounds off."""
    asked = guard_settings(value)
    if asked is None or not (asked["perMinute"] >= 1 or asked["exchanges"] >= 1):
        return None
    return GuardSettings(int(asked["perMinute"]), int(asked["exchanges"]), asked["pauseS"])


@dataclass(slots=True)
class _Bucket:
    first: float          # its first send (a later send within BUCKET_S joins it)
    last: float           # its latest: the bucket leaves the window WINDOW_S after this
    count: int


@dataclass(slots=True)
class Exchange:
    """A guarded session's view of one peer."""

    last_at: float                  # the latest message either way
    mine: bool                      # True: the owner sent it
    turns: int = 0                  # changes of direction since the last reset
    sent: deque = field(default_factory=deque)   # the owner's _Buckets in the window
    in_window: int = 0              # their counts' sum


class Guards:
    """Every guarded session's views, and who watches whom (see the invariants)."""

    def __init__(self) -> None:
        self.views: dict[str, dict[str, Exchange]] = {}     # owner -> peer -> view
        self.watchers: dict[str, set[str]] = {}             # peer -> owners

    def view(self, owner: str, peer: str) -> Exchange | None:
        """The view, made the most recently used."""
        mine = self.views.get(owner)
        view = mine.pop(peer, None) if mine else None
        if view is not None:
            mine[peer] = view
        return view

    def add(self, owner: str, peer: str, view: Exchange) -> None:
        mine = self.views.setdefault(owner, {})
        if len(mine) >= MAX_PEERS:
            oldest = next(iter(mine))
            del mine[oldest]
            self._unwatch(oldest, owner)
        mine[peer] = view
        self.watchers.setdefault(peer, set()).add(owner)

    def forget(self, session_id: str) -> None:
        for peer in self.views.pop(session_id, {}):
            self._unwatch(peer, session_id)
        for owner in self.watchers.pop(session_id, ()):
            mine = self.views.get(owner)
            if mine is not None:
                mine.pop(session_id, None)
                if not mine:
                    del self.views[owner]

    def _unwatch(self, peer: str, owner: str) -> None:
        owners = self.watchers.get(peer)
        if owners is not None:
            owners.discard(owner)
            if not owners:
                del self.watchers[peer]


# -- checking a send ---------------------------------------------------------------------

def quota(state: State, sender: Session, peer: Session, now: float) -> int:
    """How many messages guarded ``sender`` may send ``peer`` now (at least 1;
    :data:`UNBOUNDED` with the flood bound off).

    Raises BusError(loop_guard | flood_guard)."""
    bounds: GuardSettings = sender.guard
    view = state.guards.view(sender.id, peer.id)
    if view is None:
        return bounds.per_minute or UNBOUNDED
    _pause(view, bounds, now)
    if bounds.exchanges and not view.mine and view.turns >= bounds.exchanges:
        reset = "a person's prompt to either session starts the count again"
        retry = None
        if bounds.pause_s:
            retry = max(view.last_at + bounds.pause_s - now, 0.0)
            reset += (f", as do {bounds.pause_s:g} s with no message between the two "
                      f"(try again in {retry:.1f} s)")
        raise BusError("loop_guard", name=peer.name, turns=view.turns, limit=bounds.exchanges,
                       reset=reset, retry_after_s=retry)
    if not bounds.per_minute:
        return UNBOUNDED
    _age(view, now)
    left = bounds.per_minute - view.in_window
    if left <= 0:
        raise full(state, sender, peer, now)
    return left


def full(state: State, sender: Session, peer: Session, now: float) -> BusError:
    """The ``flood_guard`` refusal of a send to ``peer`` when the window is full (with
    what was counted, or with what a batch admitted now and counts after): a place
    frees when the oldest bucket leaves it, or in a minute when none is counted yet."""
    view = state.guards.view(sender.id, peer.id)
    oldest = view.sent[0].last if view is not None and view.sent else now
    retry = max(oldest + WINDOW_S - now, 0.0)
    return BusError("flood_guard", name=peer.name, limit=sender.guard.per_minute,
                    retry_after_s=retry)


# -- counting what passed ----------------------------------------------------------------

def passed(state: State, sender: Session, target: Session, now: float, count: int = 1) -> None:
    """``count`` messages went from ``sender`` to ``target`` (either may be a mirror:
    its guard is its own broker's, so None here); each guarded side counts them."""
    if sender.guard is not None:
        _sent(state, sender, target.id, now, count)
    if target.guard is not None:
        arrived(state, target, sender.id, now)


def arrived(state: State, session: Session, sender_id: str, now: float) -> None:
    """A message from ``sender_id`` reached ``session`` (a no-op unless it is guarded)."""
    bounds: GuardSettings | None = session.guard
    if bounds is None or sender_id == session.id:
        return
    view = state.guards.view(session.id, sender_id)
    if view is None:
        state.guards.add(session.id, sender_id, Exchange(now, False))
        return
    _pause(view, bounds, now)
    if view.mine:
        view.turns += 1
        view.mine = False
    view.last_at = now


def _sent(state: State, sender: Session, peer_id: str, now: float, count: int) -> None:
    bounds: GuardSettings = sender.guard
    view = state.guards.view(sender.id, peer_id)
    if view is None:
        view = Exchange(now, True)
        state.guards.add(sender.id, peer_id, view)
    else:
        _pause(view, bounds, now)
        if not view.mine:
            view.turns += 1
            view.mine = True
        view.last_at = now
    if bounds.per_minute:
        _age(view, now)
        sent = view.sent
        if sent and now - sent[-1].first < BUCKET_S:
            sent[-1].last = now
            sent[-1].count += count
        else:
            sent.append(_Bucket(now, now, count))
        view.in_window += count


def _pause(view: Exchange, bounds: GuardSettings, now: float) -> None:
    """A pause of ``pause_s`` without a message between the two resets the turns."""
    if bounds.pause_s and now - view.last_at >= bounds.pause_s:
        view.turns = 0


def _age(view: Exchange, now: float) -> None:
    """Buckets whose latest send left the window go."""
    sent = view.sent
    while sent and sent[0].last <= now - WINDOW_S:
        view.in_window -= sent.popleft().count


# -- resets ------------------------------------------------------------------------------

def human_input(state: State, session_id: str) -> None:
    """A person gave session ``session_id`` input: every pair with it here counts turns
    from 0 (its own views, and the views of it other guarded sessions here keep). Its
    own broker calls this, and every other broker it tells
    (:mod:`broker.core.cluster.remote_guard`)."""
    guards = state.guards
    for view in guards.views.get(session_id, {}).values():
        view.turns = 0
    for owner in guards.watchers.get(session_id, ()):
        view = guards.views[owner].get(session_id)
        if view is not None:
            view.turns = 0


def session_left(state: State, event: SessionLeft | ControlLeft) -> None:
    """Lifecycle listener: the session's views, and the views of it, go."""
    state.guards.forget(event.session.id)
