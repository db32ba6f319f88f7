"""Sticky deliveries: messages kept for workflow stages that have not started yet.

An entry is one sent message and the target it was sent to: an exact stage path, a
path outside the known set, a name or a pattern. It stays until its root run ends and
is handed to every matching stage session when that session initializes, in FIFO
order (by ``seq``). Each hand-over is recorded per stage and transcript: ``sent``
(transport delivery) then ``acked`` (the session took it into its context), so a
stage that reconnects with the same transcript never gets an acknowledged entry
twice, while a replacement session with a new transcript gets them all again.

Targets are counted by their queue key (``Entry.key``, see
:func:`broker.core.workflow.path_delivery.queue_key`): every spelling of one known stage (its
name path, its id, a mix) is one queue with one position sequence and one cap. Keys
depend on the run's stage tree, so they are recomputed (:meth:`StickyQueues.rekey`)
whenever the tree grew since they were last computed, and after a restart.

Invariants:

* at most ``QUEUED_PER_TARGET`` entries per (run, queue key), at most
  ``Limits.max_run_entries`` entries and ``max_run_bytes`` bytes per run, and
  ``max_sticky_bytes`` bytes in all, committed ones and those being committed alike;
  a further one is refused, nothing is evicted;
* an entry is retained (in ``by_run``) only once its row is committed (the shell
  reports it), and the ``queued`` answer is sent only then;
* ``deliveries`` holds hand-overs and settlements (transcript ``SETTLED``: the stage
  ended before any session took the entry, and its sender was told); an entry with
  any of them is never reported undeliverable again, and one that reached a stage
  at least once never at all.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

from schemas.errors import BusError
from schemas.limits import QUEUED_PER_TARGET
from schemas.names import ACKED, SENT, UNDELIVERABLE

from broker.core.messaging.dedup import fingerprint
from broker.core.runs.paths import WorkflowPath, matches
from broker.core.kernel.records import StickyDelivery, StickyRow, StickySaved
from broker.core.runs.run_tree import Node, Run

SETTLED = ""     # the transcript of a settlement: no session ever had the entry


SEQ_TAG_BITS = 16           # low bits of an entry number: the numbering broker's tag

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
    deliveries: dict[tuple[str, str], str] = field(default_factory=dict)  # (node key, transcript)
    key: str = ""                               # the queue it counts in (StickyQueues.rekey)
    size: int = 0                               # bytes it holds (entry_size)

    def matches(self, node: Node) -> bool:
        return matches(self.target.segments, node.elements())

    def record(self) -> StickySaved:
        """The record that persists this entry."""
        return StickySaved(self.seq, self.run_id, str(self.target), self.sender_id,
                           self.sender_name, self.message_id, self.message, self.attachments,
                           self.sent_at, self.ack, self.position, self.not_in_known_set)

    def fingerprint(self) -> int:
        """The dedup fingerprint of the send that queued it (broker.core.messaging.dedup)."""
        return fingerprint("send", str(self.target), self.message, None, self.attachments)

    def answer(self) -> dict[str, Any]:
        """What its sender was told once it was committed (and is told on a retry)."""
        answer = {"queued": True, "position": self.position, "target": str(self.target),
                  "runId": self.run_id, "messageId": self.message_id,
                  "deliveredTo": list(self.delivered_to)}
        if self.not_in_known_set:
            answer["notInKnownSet"] = True
        return answer

    def settle(self, node: Node, at: float) -> StickyDelivery:
        """Note that ``node`` ended before any session took this entry; the record."""
        self.deliveries[(node.key(), SETTLED)] = UNDELIVERABLE
        return StickyDelivery(self.seq, node.key(), SETTLED, UNDELIVERABLE, at, self.run_id)


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
        self._counts: dict[tuple[str, str], int] = {}   # entries per (run, queue key)
        self._pending: dict[int, Entry] = {}             # being committed, by seq
        self._keyed: dict[str, tuple[str, int]] = {}     # run -> (nonce, generation) keyed at
        self._held: dict[str, list[int]] = {}            # run -> [entries, bytes], pending too
        self.total_bytes = 0                             # every run's, pending too
        # Entry numbers are unique in a database several brokers share: a counter above
        # this broker's 16-bit tag. FIFO order is by number: a run's entries are all
        # numbered by the broker holding it, and a restored counter starts above every
        # number kept, whoever wrote it.
        self.tag = 0
        self._counter = 1

    def entries(self, run_id: str) -> Iterator[Entry]:
        yield from self.by_run.get(run_id, {}).values()

    def count(self, run_id: str, key: str) -> int:
        """Entries kept or being committed in one queue."""
        return self._counts.get((run_id, key), 0)

    def rekey(self, run: Run, key_of: Callable[[WorkflowPath], str]) -> None:
        """Recompute the run's queue keys if its tree grew since they were computed
        (a stage declared later may now be what an earlier target spelled)."""
        stamp = (run.nonce, run.generation)
        if self._keyed.get(run.run_id) == stamp:
            return
        self._keyed[run.run_id] = stamp
        pending = [e for e in self._pending.values() if e.run_id == run.run_id]
        for entry in [*self.entries(run.run_id), *pending]:
            key = key_of(entry.target)
            if key != entry.key:
                self._bump(entry, -1)
                entry.key = key
                self._bump(entry, 1)

    def held(self, run_id: str) -> tuple[int, int]:
        """Entries and bytes kept for a run, those being committed included."""
        entries, size = self._held.get(run_id, (0, 0))
        return entries, size

    def depths(self) -> dict[tuple[str, str], list[int]]:
        """[entries, bytes] per (run, queue key), those being committed included."""
        found: dict[tuple[str, str], list[int]] = {}
        for entries in (self._pending, *self.by_run.values()):
            for entry in entries.values():
                depth = found.get((entry.run_id, entry.key))
                if depth is None:
                    depth = found[(entry.run_id, entry.key)] = [0, 0]
                depth[0] += 1
                depth[1] += entry.size
        return found

    def reserve(self, entry: Entry, limits: Any) -> int:
        """Hold a place for ``entry`` until it is committed (:meth:`add`) or fails
        (:meth:`release`); its FIFO position in its queue. Entries already kept and
        places held count.

        Raises BusError(queue_full | run_full | sticky_storage_full).
        """
        queued = self.count(entry.run_id, entry.key)
        if queued >= QUEUED_PER_TARGET:
            raise BusError("queue_full", limit=QUEUED_PER_TARGET)
        entries, held = self.held(entry.run_id)
        if entries >= limits.max_run_entries:
            raise BusError("run_full", run_id=entry.run_id, what=f"{entries} entries",
                           flag="max-run-entries", limit=limits.max_run_entries)
        if held + entry.size > limits.max_run_bytes:
            raise BusError("run_full", run_id=entry.run_id, what=f"{held} bytes",
                           flag="max-run-bytes", limit=limits.max_run_bytes)
        if self.total_bytes + entry.size > limits.max_sticky_bytes:
            raise BusError("sticky_storage_full", size=self.total_bytes,
                           limit=limits.max_sticky_bytes)
        self._pending[entry.seq] = entry
        self._bump(entry, 1)
        self._hold(entry, 1)
        return queued + 1

    def release(self, entry: Entry) -> None:
        """Give the place held for ``entry`` back (its commit failed)."""
        if self._pending.pop(entry.seq, None) is not None:
            self._bump(entry, -1)
            self._hold(entry, -1)

    def _hold(self, entry: Entry, by: int) -> None:
        held = self._held.setdefault(entry.run_id, [0, 0])
        held[0] += by
        held[1] += by * entry.size
        self.total_bytes += by * entry.size
        if held[0] <= 0:
            del self._held[entry.run_id]

    def _bump(self, entry: Entry, by: int) -> None:
        key = (entry.run_id, entry.key)
        left = self._counts.get(key, 0) + by
        if left > 0:
            self._counts[key] = left
        else:
            self._counts.pop(key, None)

    def allocate(self) -> int:
        seq = self._counter << SEQ_TAG_BITS | self.tag
        self._counter += 1
        return seq

    def add(self, entry: Entry) -> None:
        """Retain a committed entry (its place, if one was held, becomes the entry)."""
        if self._pending.pop(entry.seq, None) is None:
            self._bump(entry, 1)
            self._hold(entry, 1)
        self.by_run.setdefault(entry.run_id, {})[entry.seq] = entry
        self.by_message[entry.message_id] = entry
        self._counter = max(self._counter, (entry.seq >> SEQ_TAG_BITS) + 1)

    def remove(self, entry: Entry) -> None:
        run = self.by_run.get(entry.run_id)
        if run is None or run.pop(entry.seq, None) is None:
            return
        if not run:
            del self.by_run[entry.run_id]
        self._bump(entry, -1)
        self._hold(entry, -1)
        if self.by_message.get(entry.message_id) is entry:
            del self.by_message[entry.message_id]

    def drop_run(self, run_id: str) -> list[Entry]:
        entries = list(self.entries(run_id))
        for entry in entries:
            self.remove(entry)
        self._keyed.pop(run_id, None)
        return entries

    def matching(self, run_id: str, node: Node) -> list[Entry]:
        return [e for e in self.entries(run_id) if e.matches(node)]


def delivery_state(entry: Entry, node: Node, *, unavailable: bool) -> str:
    """What one entry's delivery to one stage looks like now.

    A dormant run's entries are ``queued``: they are handed over once the run is
    resumed. ``root-unresolved`` is not a state of an entry: it marks a run whose
    owning broker cannot be asked, in the list of another broker."""
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
    return "queued"


def entry_from_row(row: StickyRow, target: WorkflowPath) -> Entry:
    saved = row.entry
    attachments = list(saved.attachments or [])
    return Entry(saved.seq, saved.run_id, target, saved.sender_id, saved.sender_name,
                 saved.message_id, saved.message, attachments, saved.sent_at,
                 bool(saved.ack), saved.position, bool(saved.not_in_known_set),
                 list(row.delivered_to), key=str(target),   # provisional: see rekey()
                 size=entry_size(saved.message, attachments))


def undeliverable_fields(entry: Entry, reason: str) -> dict[str, Any]:
    """The fields of the ``undeliverable`` event for ``entry``."""
    return {"messageId": entry.message_id, "runId": entry.run_id,
            "target": str(entry.target), "reason": reason}

