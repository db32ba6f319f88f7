"""The shell's links to the other brokers: one DEALER per broker, to its ROUTER.

They carry what the core's link commands say (:mod:`broker.core.cluster.links`), in order,
and are never read: each connection carries one direction. With CURVE each DEALER
is a CURVE client with this broker's own pair that accepts only the server key the
other broker's lease row names, and a monitor watches its handshakes, because
libzmq gives up on a connection whose handshake the other side refused (an
authenticator that has not read this broker's row yet, or no CURVE there) and never
tries it again. :meth:`LinkSockets.handshakes` reports those links, so the core can
open them again with a new hello, and how many handshakes in a row failed, so the
shell can say when one keeps failing.
"""

from __future__ import annotations

from dataclasses import dataclass

import zmq
from zmq.utils.monitor import recv_monitor_message

from schemas.limits import MAX_FRAME_BYTES, MAX_INBOUND_FRAME_BYTES
from schemas.protocol import pack_frames

from broker.core.kernel.commands import LinkClose, LinkOpen, LinkSend

from .curve import CurveServer

# A link frame may carry a delivery as large as any frame the broker sends a client.
LINK_FRAME_BYTES = MAX_INBOUND_FRAME_BYTES + (64 << 10)

# libzmq does not retry a connection after these; after NO_DETAIL (e.g. a server that
# cannot prove the expected key) it reconnects by itself.
_GIVEN_UP = zmq.EVENT_HANDSHAKE_FAILED_AUTH | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
_FAILED = _GIVEN_UP | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL
_WATCHED = _FAILED | zmq.EVENT_HANDSHAKE_SUCCEEDED
LINK_PING_MS = 1000


@dataclass(frozen=True, slots=True)
class Handshakes:
    """What the monitor of one link saw since it was last asked."""

    broker_id: str
    given_up: bool        # the connection is closed for good: open the link again
    failures: int         # failed handshakes in a row so far (0: the last one succeeded)


class LinkSockets:
    """The DEALERs of this broker to the others', by broker id."""

    def __init__(self, ctx: zmq.Context, curve: CurveServer | None) -> None:
        self.ctx = ctx
        self.curve = curve
        self.sockets: dict[str, zmq.Socket] = {}
        self._monitors: dict[str, zmq.Socket] = {}
        self._failures: dict[str, int] = {}

    def open(self, broker_id: str, endpoint: str, server_key: str) -> None:
        """Connect a new DEALER to ``endpoint`` (closing the one open to it, if any)."""
        self.close(broker_id)
        sock = self.ctx.socket(zmq.DEALER)
        sock.linger = 500      # a link_bye queued at stop still goes out
        sock.sndhwm = 100_000
        sock.reconnect_ivl = 100
        sock.reconnect_ivl_max = 1000
        # A partition drops packets without a word: libzmq's own pings notice a dead
        # TCP connection in a few seconds and a connect attempt gives up after one, so
        # the link is up again within about a second of the heal, not after the
        # kernel's retransmission backoff (measured: ~7 s after a 20 s cut).
        sock.heartbeat_ivl = LINK_PING_MS
        sock.heartbeat_timeout = 3 * LINK_PING_MS
        sock.connect_timeout = LINK_PING_MS
        if self.curve is not None:
            self.curve.secure_link(sock, server_key)
            self._monitors[broker_id] = sock.get_monitor_socket(_WATCHED)
        sock.connect(endpoint)
        self.sockets[broker_id] = sock

    def send(self, broker_id: str, frames: list[bytes]) -> int:
        """Queue ``frames`` on the link without blocking; returns how many were dropped
        (no link, or the other broker is not reading: it resyncs)."""
        sock = self.sockets.get(broker_id)
        if sock is None:
            return 0
        dropped = 0
        for frame in frames:
            try:
                sock.send(frame, zmq.NOBLOCK)
            except zmq.Again:
                dropped += 1
        return dropped

    def close(self, broker_id: str, linger: int = 0) -> bool:
        """Close the link to ``broker_id``; False when none was open."""
        monitor = self._monitors.pop(broker_id, None)
        sock = self.sockets.pop(broker_id, None)
        if monitor is not None:
            sock.disable_monitor()
            monitor.close(linger=0)
        if sock is None:
            return False
        sock.close(linger=linger)
        return True

    def handshakes(self) -> list[Handshakes]:
        """The links whose monitors saw a handshake fail or succeed, without waiting."""
        seen = []
        for broker_id, monitor in self._monitors.items():
            given_up, changed = False, False
            while monitor.poll(0):
                event = recv_monitor_message(monitor)["event"]
                changed = True
                if event & _FAILED:
                    self._failures[broker_id] = self._failures.get(broker_id, 0) + 1
                    given_up = given_up or bool(event & _GIVEN_UP)
                else:
                    self._failures[broker_id] = 0
            if changed:
                seen.append(Handshakes(broker_id, given_up, self._failures[broker_id]))
        return seen

    def execute(self, command, encode, stats, log) -> bool:
        """Carry out one link command of the core (LinkSend, LinkOpen, LinkClose): the
        shell only moves frames. True when it closed a link (``command.broker_id``)."""
        kind = type(command)
        if kind is LinkSend:
            frames, oversize = pack_frames(command.envs, MAX_FRAME_BYTES, LINK_FRAME_BYTES, encode)
            stats["dropped.link_oversize"] += len(oversize)
            stats["dropped.link_full"] += self.send(command.broker_id, frames)
        elif kind is LinkOpen:
            self.open(command.broker_id, command.endpoint, command.server_key)
            log.info("broker_link_opened", peer=command.broker_id, endpoint=command.endpoint,
                     curve=bool(command.server_key))
        elif kind is LinkClose:
            self.forget(command.broker_id)
            if self.close(command.broker_id):
                log.info("broker_link_closed", peer=command.broker_id)
            return True
        return False

    def forget(self, broker_id: str) -> None:
        """``broker_id`` is no other broker any more: its count of failures goes."""
        self._failures.pop(broker_id, None)

    def close_all(self) -> None:
        """Close every link, each with its linger (a queued link_bye still goes out)."""
        for broker_id in list(self.sockets):
            self.close(broker_id, linger=self.sockets[broker_id].linger)
