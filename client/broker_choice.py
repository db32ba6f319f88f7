"""Which broker a client's socket talks to, among the brokers sharing one database.

Plain decisions, no socket and no clock of its own (the transport moves the socket
and passes the time): :meth:`BrokerChoice.failover` says when a hello has gone
unanswered long enough to try the next endpoint, :meth:`BrokerChoice.redirected`
where a broker's redirect sends the session (and with which CURVE key).

Invariants: ``current`` is always one of ``endpoints``; the order of ``endpoints``
never changes (a redirect target not known yet is added at the end), so turning to
the next one visits every broker in turn.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .protocol import ROTATE_AFTER

# With several endpoints: a hello unanswered this long (after the broker went silent)
# moves the socket to the next one.
FAILOVER_S = 1.0


@dataclass
class BrokerChoice:
    endpoints: list[str]
    current: str = ""
    greeting_since: float | None = None
    server_keys: dict[str, str] = field(default_factory=dict)   # endpoint -> CURVE key

    def __post_init__(self) -> None:
        self.current = self.current or self.endpoints[0]

    def next_endpoint(self, after: str | None = None) -> str:
        """The endpoint after ``after`` (default: the current one), in turn."""
        at = self.endpoints.index(after or self.current)
        return self.endpoints[(at + 1) % len(self.endpoints)]

    def failover(self, greeting: bool, now: float) -> str | None:
        """Where to move now, or None. Only a session that lost its broker (or never
        reached it) greets; a broker that answers, even with a refusal, keeps the
        socket where it is. Greeting for FAILOVER_S without a welcome: the next one."""
        if len(self.endpoints) < 2:
            return None
        if not greeting:
            self.greeting_since = None
            return None
        if self.greeting_since is None:
            self.greeting_since = now
            return None
        if now - self.greeting_since < FAILOVER_S:
            return None
        self.greeting_since = now
        return self.next_endpoint()

    def redirected(self, target: str, key: str | None, redirects: int) -> str | None:
        """Where a redirect to ``target`` moves the socket, or None to say hello again
        where it is (after a pause). The same broker again: stay, unless it keeps
        saying so (a broker that lost its lease cannot name the run's new host), then
        the next one. ``key``: the CURVE key ``target`` serves with, as the broker this
        session reached (authenticated by CURVE) named it."""
        if target == self.current:
            if len(self.endpoints) > 1 and redirects % ROTATE_AFTER == 0:
                return self.next_endpoint(target)
            return None
        if target not in self.endpoints:
            self.endpoints.append(target)
        if key:
            self.server_keys[target] = key
        return target

    def moved(self, target: str) -> str:
        """The socket moved to ``target``: returns the endpoint it left."""
        old, self.current = self.current, target
        self.greeting_since = None
        return old
