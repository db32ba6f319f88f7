"""A TCP proxy on loopback that can go silent: a server whose packets are dropped, not
refused, as a cut network looks to the one cut off (used by the tests and by
scripts/store_outage.py).

``BlackholeProxy(port)`` listens on 127.0.0.1 at ``proxy.port`` and forwards every
connection to 127.0.0.1:``port``. After :meth:`BlackholeProxy.drop` returns, nothing
moves either way and nothing is refused: bytes sent on an open connection stay
unanswered (the kernel still acknowledges them, so only a bound the client keeps
itself ends its wait), and a new connection is accepted and held without a word, as
libpq sees a server it cannot reach until its connect timeout. After
:meth:`BlackholeProxy.heal` returns, everything held flows again (held connections
are forwarded then, as TCP's retransmissions would deliver them).

One thread runs a selector; ``drop`` and ``heal`` wake it and wait until it applied
the change, so the test's next step sees the new state.
"""

from __future__ import annotations

import selectors
import socket
import threading


class BlackholeProxy:
    def __init__(self, upstream_port: int) -> None:
        self._upstream = ("127.0.0.1", upstream_port)
        self._listener = socket.create_server(("127.0.0.1", 0), backlog=64)
        self.port: int = self._listener.getsockname()[1]
        self._wake_r, self._wake_w = socket.socketpair()
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._listener, selectors.EVENT_READ, "accept")
        self._selector.register(self._wake_r, selectors.EVENT_READ, "wake")
        self._peers: dict[socket.socket, socket.socket] = {}
        self._held: list[socket.socket] = []          # accepted while dropping
        self._flowing = True
        self._wanted = True
        self._applied = threading.Event()
        self._closing = False
        self.failure: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="blackhole-proxy", daemon=True)
        self._thread.start()

    def drop(self, timeout: float = 5) -> None:
        """From now on, answer nothing and refuse nothing."""
        self._change(False, timeout)

    def heal(self, timeout: float = 5) -> None:
        """Forward again, the held connections included."""
        self._change(True, timeout)

    def close(self) -> None:
        self._closing = True
        if self.failure is None and self._thread.is_alive():
            try:
                self._wake_w.send(b"x")
            except OSError:
                # The thread saw the flag on another event and closed its sockets
                # between the check and the send: it is ending anyway.
                pass
        self._thread.join(5)
        if self.failure is not None:
            raise RuntimeError(f"the proxy's thread failed: {self.failure!r}")

    def _change(self, flowing: bool, timeout: float) -> None:
        if not self._thread.is_alive():
            raise RuntimeError("the proxy's thread has ended")
        self._applied.clear()
        self._wanted = flowing
        self._wake_w.send(b"x")
        if not self._applied.wait(timeout):
            raise TimeoutError("the proxy did not apply the change")

    def _run(self) -> None:
        try:
            self._loop()
        except BaseException as exc:        # kept for close() to report
            self.failure = exc
            raise
        finally:
            for sock in [*self._peers, *self._held, self._listener, self._wake_r, self._wake_w]:
                sock.close()
            self._selector.close()

    def _loop(self) -> None:
        while not self._closing:
            for key, _ in self._selector.select():
                try:
                    self._event(key)
                except (OSError, ValueError, KeyError):
                    if key.data == "pump":
                        self._forget(key.fileobj)   # that connection is gone
                    elif key.data != "accept":      # (a client that gave up first)
                        raise       # the proxy itself failed: the thread ends

    def _event(self, key: selectors.SelectorKey) -> None:
        if key.data == "wake":
            self._wake_r.recv(64)
            self._apply()
        elif key.data == "accept":
            self._accept()
        elif self._flowing:
            self._pump(key.fileobj)

    def _forget(self, sock) -> None:
        """Close ``sock`` and its other end."""
        other = self._peers.get(sock)
        for end in (sock, other):
            if end is None:
                continue
            self._peers.pop(end, None)
            try:
                self._selector.unregister(end)
            except (KeyError, ValueError):
                pass
            end.close()

    def _apply(self) -> None:
        if self._wanted != self._flowing:
            self._flowing = self._wanted
            for sock in self._peers:
                if self._flowing:
                    self._selector.register(sock, selectors.EVENT_READ, "pump")
                else:
                    self._selector.unregister(sock)
            if self._flowing:
                held, self._held = self._held, []
                for client in held:
                    self._join(client)
        self._applied.set()

    def _accept(self) -> None:
        client, _ = self._listener.accept()
        if self._flowing:
            self._join(client)
        else:
            self._held.append(client)

    def _join(self, client: socket.socket) -> None:
        try:
            server = socket.create_connection(self._upstream, timeout=5)
        except OSError:
            client.close()
            return
        server.settimeout(None)
        self._peers[client], self._peers[server] = server, client
        for sock in (client, server):
            self._selector.register(sock, selectors.EVENT_READ, "pump")

    def _pump(self, sock: socket.socket) -> None:
        other = self._peers.get(sock)
        if other is None:
            return
        try:
            data = sock.recv(65536)
            if data:
                other.sendall(data)
                return
        except OSError:
            pass
        self._forget(sock)                 # one side closed: close both
