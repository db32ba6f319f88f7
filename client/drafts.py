"""Turns and drafts of one conversation, as the client keeps them (no IO).

A runtime that gets plain assistant text instead of a ``respond`` call keeps it as a
*draft* of the current turn (``record_draft``); the model may then send it by
reference (``respond(draft=ID)``), replace it with new ``content``, or decline.
The broker never sees drafts except through the ``recovery`` reports this class
builds; the session sends them.

Invariants:

* at most one turn is open; beginning a turn ends the open one;
* a draft belongs to the turn that recorded it: once that turn ended, its id is
  ``draft_expired`` (never ``unknown_draft``), for as long as this object remembers
  it (the last :data:`REMEMBERED_DRAFTS` ids);
* only a ``complete`` draft can be sent by reference (``incomplete`` and ``unknown``
  completions are ``draft_incomplete``), and only once: a draft being sent or already
  delivered by reference is no undelivered draft any more (``draft_already_sent``);
* a turn that recorded a draft produces exactly one final report when it ends:
  outcome ``recovered`` when a respond reached this conversation during the turn,
  else ``failed``; each draft ``delivered`` (sent by reference), ``replaced``
  (something else was delivered) or ``declined`` (nothing was). While the turn is
  open its reports say ``pending``. A turn without drafts reports nothing;
* a report lists the turn's latest :data:`~schemas.limits.MAX_RECOVERY_DRAFTS` drafts
  (what the broker keeps), all of which stay sendable by reference.
"""

from __future__ import annotations

import collections
import os
from dataclasses import dataclass
from typing import Callable

from schemas.errors import BusError
from schemas.limits import MAX_RECOVERY_DRAFTS

REMEMBERED_DRAFTS = 4096
COMPLETIONS = {True: "complete", False: "incomplete", None: "unknown"}


def _new_id(prefix: str) -> str:
    return f"{prefix}-{os.urandom(8).hex()}"


@dataclass
class _Draft:
    id: str
    text: str
    completion: str
    delivered: bool = False
    sending: bool = False     # a respond by reference is on its way


class Turns:
    """The open turn of one conversation, its drafts, and the recovery reports."""

    def __init__(self, new_id: Callable[[str], str] = _new_id) -> None:
        self._new_id = new_id
        self.turn: str | None = None          # id of the open turn
        self._drafts: dict[str, _Draft] = {}  # drafts of the open turn, in order
        self._delivered = False               # a respond reached this conversation
        self._past: collections.OrderedDict[str, None] = collections.OrderedDict()

    def begin(self) -> tuple[str, dict | None]:
        """Open a new turn: its id, and the final report of the turn this ended."""
        report = self.end()
        self.turn = self._new_id("turn")
        return self.turn, report

    def end(self) -> dict | None:
        """Close the open turn; its final report if it recorded drafts, else None."""
        if self.turn is None:
            return None
        report = self._report(final=True) if self._drafts else None
        for draft_id in self._drafts:
            self._past[draft_id] = None
        while len(self._past) > REMEMBERED_DRAFTS:
            self._past.popitem(last=False)
        self.turn, self._drafts, self._delivered = None, {}, False
        return report

    def record(self, text: str, complete: bool | None) -> tuple[str, dict]:
        """Keep ``text`` as a draft of the open turn: its id and the pending report.

        Raises ValueError when no turn is open or the arguments have the wrong type.
        """
        if self.turn is None:
            raise ValueError("record_draft needs an open turn: call begin_turn() first")
        if not isinstance(text, str):
            raise ValueError("a draft's text must be a string")
        if complete is not None and not isinstance(complete, bool):
            raise ValueError("complete must be True, False or None (unknown)")
        draft = _Draft(self._new_id("draft"), text, COMPLETIONS[complete])
        self._drafts[draft.id] = draft
        return draft.id, self._report(final=False)

    def text_of(self, draft_id: str) -> str:
        """The exact text to send for ``draft_id``, if it may be sent by reference.

        Raises BusError: ``draft_expired`` (its turn ended), ``unknown_draft``,
        ``draft_incomplete``, ``draft_already_sent``.
        """
        draft = self._drafts.get(draft_id)
        if draft is None:
            if draft_id in self._past:
                raise BusError("draft_expired", draft=draft_id)
            raise BusError("unknown_draft", draft=draft_id)
        if draft.completion != "complete":
            raise BusError("draft_incomplete", draft=draft_id, completion=(
                "incomplete" if draft.completion == "incomplete" else "of unknown completion"))
        if draft.delivered or draft.sending:
            raise BusError("draft_already_sent", draft=draft_id)
        return draft.text

    def take(self, draft_id: str) -> str:
        """:meth:`text_of`, and the draft is on its way: no other respond sends it until
        :meth:`release` (the respond failed) or for good once :meth:`delivered`.

        Raises what :meth:`text_of` raises."""
        text = self.text_of(draft_id)
        self._drafts[draft_id].sending = True
        return text

    def release(self, draft_id: str) -> None:
        """A respond that took ``draft_id`` did not deliver it: it may be sent again."""
        draft = self._drafts.get(draft_id)
        if draft is not None:
            draft.sending = False

    def delivered(self, draft_id: str | None) -> None:
        """A respond reached this conversation in the open turn (by reference if
        ``draft_id``)."""
        if self.turn is None:
            return
        self._delivered = True
        draft = self._drafts.get(draft_id) if draft_id is not None else None
        if draft is not None:
            draft.delivered, draft.sending = True, False

    def _report(self, final: bool) -> dict:
        def outcome(draft: _Draft) -> str:
            if not final:
                return "delivered" if draft.delivered else "pending"
            if draft.delivered:
                return "delivered"
            return "replaced" if self._delivered else "declined"

        # The broker keeps at most MAX_RECOVERY_DRAFTS per turn: report the latest.
        kept = list(self._drafts.values())[-MAX_RECOVERY_DRAFTS:]
        drafts = [{"id": d.id, "text": d.text, "completion": d.completion, "outcome": outcome(d)}
                  for d in kept]
        overall = "pending" if not final else ("recovered" if self._delivered else "failed")
        return {"turn": self.turn, "drafts": drafts, "outcome": overall}
