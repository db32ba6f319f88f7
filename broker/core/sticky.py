"""Sticky deliveries: messages kept for workflow stages that have not started yet.

An entry is one sent message and the target it was sent to: an exact stage path, a
path outside the known set, a name or a pattern. It stays until its root run ends and
is handed to every matching stage session when that session initializes, in FIFO
order (by ``seq``). Each hand-over is recorded per stage and transcript: ``sent``
(transport delivery) then ``acked`` (the session took it into its context), so a
stage that reconnects with the same transcript never gets an acknowledged entry
twice, while a replacement session with a new transcript gets them all again.

Invariants:

* at most ``QUEUED_PER_TARGET`` entries per (run, target), at most
  ``Limits.max_run_entries`` entries and ``max_run_bytes`` bytes per run, and
  ``max_sticky_bytes`` bytes in all; places held for entries being committed count
  too; a further one is refused, nothing is evicted;
* an entry exists in memory only once its row is committed (the shell reports it),
  and the ``queued`` answer is sent only then;
* an entry that reached a stage at least once is never reported undeliverable.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterator

from schemas.errors import BusError
from schemas.limits import QUEUED_PER_TARGET
from schemas.names import ACKED, SENT

from .paths import WorkflowPath, matches
from .records import StickyRow, StickySaved
from .runs import Node


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
    position: int = 0                           # FIFO position when it was queued
    not_in_known_set: bool = False
    delivered_to: list[str] = field(default_factory=list)   # live at queue time
    size: int = 0                               # bytes it holds (entry_size)
    deliveries: dict[tuple[str, str], str] = field(default_factory=dict)  # (node key, transcript)

    def matches(self, node: Node) -> bool:
        return matches(self.target.segments, node.elements())

    def record(self) -> StickySaved:
        """The record that persists this entry."""
        return StickySaved(self.seq, self.run_id, str(self.target), self.sender_id,
                           self.sender_name, self.message_id, self.message, self.attachments,
                           self.sent_at, self.ack, self.position, self.not_in_known_set)

    def answer(self) -> dict[str, Any]:
        """What its sender was told once it was committed (and is told on a retry)."""
        answer = {"queued": True, "position": self.position, "target": str(self.target),
                  "runId": self.run_id, "messageId": self.message_id,
                  "deliveredTo": list(self.delivered_to)}
        if self.not_in_known_set:
            answer["notInKnownSet"] = True
        return answer


def entry_size(message: str, attachments: list) -> int:
    """The bytes an entry holds: its text and its attachments' strings, UTF-8."""
    size = len(message.encode("utf-8", "surrogatepass"))
    for attachment in attachments or ():
        if isinstance(attachment, dict):
            size += sum(len(str(v).encode("utf-8", "surrogatepass")) for v in attachment.values())
    return size


class StickyQueues:
    """Every retained entry, by run and by message id, and what they hold."""

    def __init__(self) -> None:
        self.by_run: dict[str, dict[int, Entry]] = {}
        self.by_message: dict[str, Entry] = {}
        self._counts: dict[tuple[str, WorkflowPath], int] = {}   # entries per (run, target)
        self._reserved: dict[tuple[str, WorkflowPath], int] = {}  # places held, not committed
        self._held: dict[str, list[int]] = {}       # run -> [entries, bytes], held places included
        self.total_bytes = 0                        # every run's, held places included
        self.next_seq = 1

    def entries(self, run_id: str) -> Iterator[Entry]:
        yield from self.by_run.get(run_id, {}).values()

    def count(self, run_id: str, target: WorkflowPath) -> int:
        return self._counts.get((run_id, target), 0)

    def held(self, run_id: str) -> tuple[int, int]:
        """Entries and bytes kept for a run (held places included)."""
        entries, size = self._held.get(run_id, (0, 0))
        return entries, size

    def reserve(self, run_id: str, target: WorkflowPath, size: int, limits: Any) -> int:
        """Hold a place for an entry of ``size`` bytes about to be committed; its FIFO
        position. Entries already kept and places held count.

        Raises BusError(queue_full | run_full | sticky_storage_full).
        """
        key = (run_id, target)
        queued = self.count(run_id, target) + self._reserved.get(key, 0)
        if queued >= QUEUED_PER_TARGET:
            raise BusError("queue_full", limit=QUEUED_PER_TARGET)
        entries, held = self.held(run_id)
        if entries >= limits.max_run_entries:
            raise BusError("run_full", run_id=run_id, what=f"{entries} entries",
                           flag="max-run-entries", limit=limits.max_run_entries)
        if held + size > limits.max_run_bytes:
            raise BusError("run_full", run_id=run_id, what=f"{held} bytes",
                           flag="max-run-bytes", limit=limits.max_run_bytes)
        if self.total_bytes + size > limits.max_sticky_bytes:
            raise BusError("sticky_storage_full", size=self.total_bytes,
                           limit=limits.max_sticky_bytes)
        self._reserved[key] = self._reserved.get(key, 0) + 1
        self._hold(run_id, 1, size)
        return queued + 1

    def release(self, run_id: str, target: WorkflowPath, size: int) -> None:
        """Give a held place back (its entry was committed, or failed)."""
        key = (run_id, target)
        left = self._reserved.get(key, 0) - 1
        if left > 0:
            self._reserved[key] = left
        else:
            self._reserved.pop(key, None)
        self._hold(run_id, -1, -size)

    def _hold(self, run_id: str, entries: int, size: int) -> None:
        held = self._held.setdefault(run_id, [0, 0])
        held[0] += entries
        held[1] += size
        self.total_bytes += size
        if held[0] <= 0:
            del self._held[run_id]

    def allocate(self) -> int:
        seq = self.next_seq
        self.next_seq += 1
        return seq

    def add(self, entry: Entry) -> None:
        self.by_run.setdefault(entry.run_id, {})[entry.seq] = entry
        self.by_message[entry.message_id] = entry
        key = (entry.run_id, entry.target)
        self._counts[key] = self._counts.get(key, 0) + 1
        self._hold(entry.run_id, 1, entry.size)
        self.next_seq = max(self.next_seq, entry.seq + 1)

    def remove(self, entry: Entry) -> None:
        run = self.by_run.get(entry.run_id)
        if run is None or run.pop(entry.seq, None) is None:
            return
        if not run:
            del self.by_run[entry.run_id]
        self._hold(entry.run_id, -1, -entry.size)
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


def entry_from_row(row: StickyRow, target: WorkflowPath) -> Entry:
    saved = row.entry
    attachments = list(saved.attachments or [])
    return Entry(saved.seq, saved.run_id, target, saved.sender_id, saved.sender_name,
                 saved.message_id, saved.message, attachments, saved.sent_at,
                 bool(saved.ack), saved.position, bool(saved.not_in_known_set),
                 list(row.delivered_to), size=entry_size(saved.message, attachments))


def undeliverable_fields(entry: Entry, reason: str) -> dict[str, Any]:
    """The fields of the ``undeliverable`` event for ``entry``."""
    return {"messageId": entry.message_id, "runId": entry.run_id,
            "target": str(entry.target), "reason": reason}

