"""Sticky deliveries: messages kept for workflow stages that have not started yet.

An entry is one sent message and the target it was sent to: an exact stage path, a
path outside the known set, a name or a pattern. It stays until its root run ends and
is handed to every matching stage session when that session initializes, in FIFO
order (by ``seq``). Each hand-over is recorded per stage and transcript: ``sent``
(transport delivery) then ``acked`` (the session took it into its context), so a
stage that reconnects with the same transcript never gets an acknowledged entry
twice, while a replacement session with a new transcript gets them all again.

Invariants:

* at most ``QUEUED_PER_TARGET`` entries per (run, target); a further one is refused,
  nothing is evicted;
* an entry exists in memory only once its row is committed (the shell reports it),
  and the ``queued`` answer is sent only then;
* an entry that reached a stage at least once is never reported undeliverable.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterator

from schemas.errors import BusError
from schemas.limits import QUEUED_PER_TARGET

from .paths import WorkflowPath, matches
from .runs import Node

SENT, ACKED = "sent", "acked"


@dataclass(eq=False, slots=True)
class Entry:
    seq: int
    run_id: str
    target: WorkflowPath
    sender_id: str
    sender_name: str
    message_id: str
    message: str
    attachments: list
    sent_at: float
    ack: bool                                   # the sender wants undeliverable notices
    deliveries: dict[tuple[str, str], str] = field(default_factory=dict)  # (node key, transcript)

    def matches(self, node: Node) -> bool:
        return matches(self.target.segments, node.elements())

    def row(self) -> tuple:
        """The store op that persists this entry."""
        return ("sticky", self.seq, self.run_id, str(self.target), self.sender_id,
                self.sender_name, self.message_id, self.message, self.attachments,
                self.sent_at, self.ack)


class StickyQueues:
    """Every retained entry, by run and by message id."""

    def __init__(self) -> None:
        self.by_run: dict[str, dict[int, Entry]] = {}
        self.by_message: dict[str, Entry] = {}
        self._counts: dict[tuple[str, WorkflowPath], int] = {}   # entries per (run, target)
        self.next_seq = 1

    def entries(self, run_id: str) -> Iterator[Entry]:
        yield from self.by_run.get(run_id, {}).values()

    def count(self, run_id: str, target: WorkflowPath) -> int:
        return self._counts.get((run_id, target), 0)

    def check_room(self, run_id: str, target: WorkflowPath, reserved: int) -> int:
        """FIFO position the next entry would get. Raises BusError(queue_full)."""
        queued = self.count(run_id, target) + reserved
        if queued >= QUEUED_PER_TARGET:
            raise BusError("queue_full", limit=QUEUED_PER_TARGET)
        return queued + 1

    def allocate(self) -> int:
        seq = self.next_seq
        self.next_seq += 1
        return seq

    def add(self, entry: Entry) -> None:
        self.by_run.setdefault(entry.run_id, {})[entry.seq] = entry
        self.by_message[entry.message_id] = entry
        key = (entry.run_id, entry.target)
        self._counts[key] = self._counts.get(key, 0) + 1
        self.next_seq = max(self.next_seq, entry.seq + 1)

    def remove(self, entry: Entry) -> None:
        run = self.by_run.get(entry.run_id)
        if run is None or run.pop(entry.seq, None) is None:
            return
        if not run:
            del self.by_run[entry.run_id]
        key = (entry.run_id, entry.target)
        left = self._counts[key] - 1
        if left:
            self._counts[key] = left
        else:
            del self._counts[key]
        if self.by_message.get(entry.message_id) is entry:
            del self.by_message[entry.message_id]

    def drop_run(self, run_id: str) -> list[Entry]:
        entries = list(self.entries(run_id))
        for entry in entries:
            self.remove(entry)
        return entries

    def matching(self, run_id: str, node: Node) -> list[Entry]:
        return [e for e in self.entries(run_id) if e.matches(node)]


def delivery_state(entry: Entry, node: Node, *, unavailable: bool, dormant: bool) -> str:
    """What one entry's delivery to one stage looks like now."""
    mine = {t: s for (key, t), s in entry.deliveries.items() if key == node.key()}
    current = mine.get(node.transcript) if node.transcript else None
    if current == ACKED:
        return "delivered"
    if node.terminal:
        return "stage-terminal"     # ended without confirmed admission to its context
    if current == SENT:
        return "receipt-unverified"
    if mine and node.session_id is not None:
        return "session-replaced"
    if unavailable:
        return "delivery-unavailable"
    if dormant:
        return "root-unresolved"
    return "queued"


def entry_from_row(row: tuple, target: WorkflowPath) -> Entry:
    seq, run_id, _target, sender_id, sender_name, message_id, message, attachments, \
        sent_at, ack = row
    return Entry(seq, run_id, target, sender_id, sender_name, message_id, message,
                 list(attachments or []), sent_at, bool(ack))


def undeliverable_event(entry: Entry, reason: str) -> dict[str, Any]:
    return {"event": "undeliverable", "messageId": entry.message_id, "runId": entry.run_id,
            "target": str(entry.target), "reason": reason}
