"""What the client tells the broker of the messages it has: read and seen (receipts).

The broker keeps each live message until this side reports it read (the ``read`` byte
count, kept by the protocol) or, for a session that asked so, seen (``seenThrough``:
the newest message id the program took; it and every message delivered before it are
seen). Both ride on a heartbeat, made due ``ACK_DELAY_S`` after a message arrived or
was taken, so a busy receiver reports in batches, never per message. After a new hello
the seen id is told again: the broker resends what it did not hear of, and this side
drops the copies. No I/O and no clock: the protocol passes the time in.
"""

from __future__ import annotations

from schemas.limits import ACK_DELAY_S


class Reports:
    def __init__(self) -> None:
        self.seen_through: str | None = None     # any thread sets it (Transport.saw)
        self._told: str | None = None            # the seen id as last told
        self._noticed_at: float | None = None    # when a new seen id was first noticed
        self._arrived_at: float | None = None    # a message read since the last report

    def arrived(self, now: float) -> None:
        """A message frame was read."""
        if self._arrived_at is None:
            self._arrived_at = now

    def due(self, now: float, connected: bool) -> bool:
        """Whether a heartbeat should carry a report now."""
        if self._arrived_at is not None and now - self._arrived_at >= ACK_DELAY_S:
            return True
        if connected and self.seen_through != self._told:
            if self._noticed_at is None:
                self._noticed_at = now
            return now - self._noticed_at >= ACK_DELAY_S
        return False

    def fields(self, connected: bool) -> dict:
        """What a heartbeat going out now carries besides ``read``; the report is made."""
        self._arrived_at = self._noticed_at = None
        seen = self.seen_through
        if seen is not None and seen != self._told and connected:
            self._told = seen
            return {"seenThrough": seen}
        return {}

    def new_hello(self) -> None:
        """A hello goes out: the broker hears the seen id again after its welcome."""
        self._told = None
