"""Telling a refused CURVE handshake from a broker that is not there yet.

libzmq retries a refused handshake like any other connection, so without a watch a
client with the wrong keys sees only silence until its connect timeout. A
:class:`HandshakeWatch` reads the socket's monitor events while the client waits for
its welcome, and says why the broker refuses it, if it does.

Invariants:

* the watch lives only until the first handshake succeeds or the wait is over
  (:meth:`HandshakeWatch.end`): unread events would pile up for the session's life;
* the monitor is detached from the socket (``detach``, which the transport runs
  under its IO lock) before its reading end closes: libzmq's I/O thread blocks on a
  reading end closed first, and every socket of the context would stall;
* only the thread that waits for the welcome reads the monitor.
"""

from __future__ import annotations

from typing import Callable

import zmq

EVENTS = (zmq.EVENT_HANDSHAKE_SUCCEEDED | zmq.EVENT_HANDSHAKE_FAILED_AUTH |
          zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL)
# Handshakes in a row that may fail before that is taken for a refusal (libzmq retries
# every reconnect interval, 0.1 s at first: about a third of a second).
FAILED_IN_A_ROW = 3


class HandshakeWatch:
    def __init__(self, sock: zmq.Socket, has_keys: bool, detach: Callable[[], None]) -> None:
        self.monitor: zmq.Socket | None = sock.get_monitor_socket(EVENTS)
        self._has_keys = has_keys
        self._detach = detach
        self._failed = 0

    @property
    def watching(self) -> bool:
        return self.monitor is not None

    def refused(self, wait_s: float) -> str | None:
        """Within ``wait_s``, why the broker refuses our handshake, if it does; once a
        handshake succeeds the watch ends and this answers None at once.

        A refusal the broker names (a key not allowed) or a handshake that breaks the
        protocol (mechanisms that do not match; libzmq may not retry it) is believed at
        once. A handshake cut short says little by itself (the broker may have died
        halfway), but :data:`FAILED_IN_A_ROW` of them, none succeeding, is a broker
        refusing this client: a wrong server key, or no CURVE against a CURVE broker."""
        monitor = self.monitor
        if monitor is None or not monitor.poll(max(0, int(wait_s * 1000))):
            return None
        # Imported here, not at the top: zmq.utils.monitor imports asyncio (a tenth of a
        # second of every client process's start), and only a CURVE handshake reads it.
        from zmq.utils.monitor import recv_monitor_message

        while monitor.poll(0):
            event = recv_monitor_message(monitor)["event"]
            if event == zmq.EVENT_HANDSHAKE_SUCCEEDED:
                self.end()
                return None
            if event == zmq.EVENT_HANDSHAKE_FAILED_AUTH:
                return "the key is not among the broker's allowed clients"
            self._failed += FAILED_IN_A_ROW if event == zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL else 1
        if self._failed < FAILED_IN_A_ROW:
            return None
        if not self._has_keys:
            return ("the broker closes every handshake: it requires CURVE and this client "
                    "has no keys (pass the broker's public key and a client pair, or the "
                    "INTERCOM_CURVE_* environment), or the endpoint is not an Intercom broker")
        return ("the CURVE handshake fails every time: the broker's public key given "
                "(curve_server_key) is not this broker's")

    def end(self) -> None:
        """Stop watching (the welcome came, or the wait is over)."""
        monitor = self.monitor
        if monitor is None:
            return
        self._detach()
        self.monitor = None
        monitor.close(linger=0)

    def forget(self) -> None:
        """The socket is closed (which detached the monitor): close the reading end."""
        if self.monitor is not None:
            self.monitor.close(linger=0)
            self.monitor = None
