"""Pipelined sends that met a backlogged target: held, and sent again under the same ids.

The broker refuses a pipelined send (``sends``) to a session that has more than its
bound unread with ``target_backlogged``, and does not remember that refusal against
the id (see broker.core.sessions.backlog), so the same id may come again. This is
the client's side of that wait, kept by :class:`Holds` for the protocol (socket
side only, one thread at a time):

* a refused plain send is *held*, still owed (a close or a re-welcome treats it as
  any other owed request); so is every plain send to that target taken from the
  outbox while the target has a hold (``later``: nothing overtakes a held one);
* the held sends go again, in order and ahead of anything queued later, once
  every plain send to that target already on the wire has its answer (the broker
  refuses those behind the first refused id, so their refusals come in send order
  and join ``ids`` in that order; everything in ``ids`` is older than everything
  in ``later``). They go as a probe of ``window`` sends, ``RESEND_DELAY_S`` after a
  refusal: a probe taken whole doubles the next one at once, a refused one starts
  again small, so a backlogged target costs a few refusals per round trip, not a
  whole window's. The hold ends when nothing is left in it;
* a target that took none of this session's sends for ``HOLD_S`` (a consumer that
  stopped reading; one that reads takes them as it drains) fails its held sends
  with the broker's refusal: a pipelined send never waits longer than a blocking
  call would for its answer.

The protocol counts plain sends on the wire per target (:attr:`Holds.inflight`)
so a resend waits for them; only for targets that met a refusal, from the moment
they first do (counted then from what is owed), until none of theirs is on the
wire and none is held: a session whose targets all read pays nothing for it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from schemas.limits import CALL_TIMEOUT_S

RESEND_DELAY_S = 0.02
HOLD_S = CALL_TIMEOUT_S
FIRST_WINDOW = 16              # sends in the first probe after a refusal


@dataclass(slots=True)
class Hold:
    """The held sends to one target, oldest first, and the refusal they got."""

    due: float                          # monotonic: not sent again before this
    refusal: dict[str, Any]             # the broker's answer, given if the wait ends
    ids: list[str] = field(default_factory=list)     # refused, in send order
    later: list[str] = field(default_factory=list)   # never sent yet, in order
    window: int = FIRST_WINDOW          # sends in the next probe


class Holds:
    """Per target: plain sends on the wire, held sends, and since when it took none."""

    def __init__(self) -> None:
        self.inflight: dict[str, int] = {}
        self.held: dict[str, Hold] = {}
        self.blocked_since: dict[str, float] = {}    # target -> first refusal of a streak

    def sent(self, envs: list[dict]) -> None:
        """These envelopes go on the wire now: count their plain sends to the
        targets counted."""
        inflight = self.inflight
        for env in envs:
            if env["k"] == "sends" and env["to"] in inflight:
                inflight[env["to"]] += len(env["ids"])

    def answered(self, to: str) -> None:
        """A plain send to ``to`` got an answer other than a refusal for the backlog:
        one fewer on the wire, and the target takes sends again."""
        left = self.inflight.get(to)
        if left is None:
            return
        self.blocked_since.pop(to, None)
        if left > 1 or to in self.held:
            self.inflight[to] = left - 1
        else:
            del self.inflight[to]      # nothing of it on the wire or held: stop counting

    def hold(self, to: str, msg_id: str, refusal: dict[str, Any], now: float) -> None:
        """``msg_id`` to ``to`` was refused ``target_backlogged``: hold it."""
        self.inflight[to] -= 1           # counted by the protocol before the first hold
        self.blocked_since.setdefault(to, now)
        hold = self.held.get(to)
        if hold is None:
            hold = self.held[to] = Hold(now + RESEND_DELAY_S, refusal)
        elif not hold.ids:               # the probe out was refused: wait, start small
            hold.due = now + RESEND_DELAY_S
            hold.window = FIRST_WINDOW
            hold.refusal = refusal
        hold.ids.append(msg_id)

    def next_due(self) -> float | None:
        """When the earliest hold may go again (None: none may; one still waiting for
        answers is looked at again when they come)."""
        inflight = self.inflight
        return min((hold.due for to, hold in self.held.items() if inflight.get(to, 0) <= 0),
                   default=None)

    def take_due(self, now: float) -> tuple[list[list[str]], list[tuple[list[str], dict]]]:
        """Holds whose time has come: id lists to send again (each a probe, oldest
        first), and (ids, refusal) of holds whose target took nothing for ``HOLD_S``
        (given up)."""
        again: list[list[str]] = []
        failed: list[tuple[list[str], dict]] = []
        for to, hold in list(self.held.items()):
            if hold.due > now or self.inflight.get(to, 0) > 0:
                continue
            waiting = hold.ids + hold.later
            if now - self.blocked_since.get(to, now) >= HOLD_S:
                del self.held[to]
                self.blocked_since.pop(to, None)
                failed.append((waiting, hold.refusal))
                continue
            if not hold.ids:             # the last probe was taken whole: a bigger one
                hold.window *= 2
            probe, hold.later = waiting[:hold.window], waiting[hold.window:]
            hold.ids = []
            if not hold.later:
                del self.held[to]        # all of it goes now: the hold ends
            again.append(probe)
        return again, failed

    def clear(self) -> None:
        """A re-welcome sends every owed request again: start counting afresh."""
        self.inflight.clear()
        self.held.clear()
        self.blocked_since.clear()
