"""CURVE for a networked broker: key files, the authenticator, and safe binds.

``python -m broker keys --dir DIR`` writes ``DIR/broker.key`` and
``DIR/broker.key_secret`` and a pair per client under ``DIR/clients/`` (pyzmq's
``zmq.auth`` certificate format; secret files mode 0600). ``python -m broker --curve
DIR`` makes the ROUTER and PUB sockets CURVE servers with the broker's pair and
allows exactly the public keys in ``DIR/clients/`` (re-read on SIGHUP) and those of
the other brokers on its database, as their lease rows name them (updated each time
the shell reads the rows). Its links to those brokers are CURVE clients with the same
pair (:meth:`CurveServer.secure_link`).

A TCP endpoint on anything but a loopback address is refused without CURVE, unless
the operator says ``--insecure``.
"""

from __future__ import annotations

import ipaddress
import os
from pathlib import Path

import zmq
import zmq.auth
from zmq.auth.thread import ThreadAuthenticator

from .logs import get_logger

BROKER_NAME = "broker"
CLIENTS_DIR = "clients"
REFUSED_KEYS_TOLD = 1024    # refused keys logged once each; past this many, the log starts over


class CurveError(Exception):
    """Keys missing or unreadable; the message says which file."""


CREATED, KEPT, REPLACED = "created", "kept", "replaced"


def create_keys(directory: Path, clients: list[str], force: bool = False) -> list[tuple[str, Path]]:
    """Make the broker's pair and one pair per client, each only where it is missing:
    deployed clients hold these keys, so a pair that exists (either of its files: a
    client's secret may have been moved to its host) is kept unless ``force``.
    Returns (what was done, public key file) per pair."""
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    (directory / CLIENTS_DIR).mkdir(mode=0o700, exist_ok=True)
    done = []
    old = os.umask(0o077)            # secret files are never readable by others, not even briefly
    try:
        for where, name in [(directory, BROKER_NAME)] + [(directory / CLIENTS_DIR, c) for c in clients]:
            public_file, secret_file = where / f"{name}.key", where / f"{name}.key_secret"
            exists = public_file.exists() or secret_file.exists()
            if exists and not force:
                done.append((KEPT, public_file))
                continue
            public, secret = zmq.auth.create_certificates(str(where), name)
            os.chmod(secret, 0o600)
            done.append((REPLACED if exists else CREATED, Path(public)))
    finally:
        os.umask(old)
    return done


def load_pair(path: Path) -> tuple[bytes, bytes]:
    """(public, secret) z85 keys from a ``.key_secret`` file. Raises CurveError."""
    try:
        public, secret = zmq.auth.load_certificate(str(path))
    except (OSError, ValueError) as exc:
        raise CurveError(f"cannot read CURVE key {path}: {exc}") from None
    if not secret:
        raise CurveError(f"{path} holds no secret key")
    return public, secret


class CurveServer:
    """The broker's side of CURVE: its key pair and the authenticator thread.

    The authenticator asks :meth:`callback` on its own thread; the two allowed sets are
    frozensets replaced whole, so it always sees one consistent set of each."""

    def __init__(self, ctx: zmq.Context, directory: Path) -> None:
        self.public, self.secret = load_pair(directory / f"{BROKER_NAME}.key_secret")
        self.clients = directory / CLIENTS_DIR
        if not self.clients.is_dir():
            raise CurveError(f"no allowed-clients directory {self.clients}")
        self._clients: frozenset[bytes] = frozenset()
        self._brokers: frozenset[bytes] = frozenset()
        self.log = get_logger("broker")
        self.reload()
        self.auth = ThreadAuthenticator(ctx)
        self.auth.start()
        self.auth.configure_curve_callback(domain="*", credentials_provider=self)

    def reload(self) -> None:
        """Allow exactly the public keys now in the clients directory."""
        self._clients = frozenset(zmq.auth.load_certificates(str(self.clients)))
        # Refused keys already logged; replaced whole, so a key refused again after
        # a reload is logged again (only the authenticator's thread adds to it).
        self._told: set[bytes] = set()

    def allow_brokers(self, keys) -> None:
        """Allow exactly these brokers' keys (z85 text) besides the clients'."""
        self._brokers = frozenset(key.encode() for key in keys if key)

    def callback(self, domain: str, key: bytes) -> bool:
        """May the peer with z85 public key ``key`` connect (the authenticator asks)?
        A refused key is logged once (a refused client retries every reconnect)."""
        if key in self._clients or key in self._brokers:
            return True
        if key not in self._told:
            if len(self._told) >= REFUSED_KEYS_TOLD:
                self._told.clear()
            self._told.add(key)
            self.log.info("curve_key_refused", key=key.decode(errors="replace"), domain=domain)
        return False

    def secure(self, sock: zmq.Socket) -> None:
        """Make ``sock`` a CURVE server (before it binds)."""
        sock.curve_secretkey = self.secret
        sock.curve_publickey = self.public
        sock.curve_server = True

    def secure_link(self, sock: zmq.Socket, server_key: str) -> None:
        """Make ``sock`` a CURVE client with this broker's pair that accepts only a
        server proving ``server_key`` (before it connects)."""
        sock.curve_secretkey = self.secret
        sock.curve_publickey = self.public
        sock.curve_serverkey = server_key.encode()

    def stop(self) -> None:
        self.auth.stop()


def exposed(endpoint: str) -> bool:
    """Whether ``endpoint`` listens beyond this host (a TCP bind not on loopback)."""
    if not endpoint.startswith("tcp://"):
        return False
    host = endpoint[len("tcp://"):].rsplit(":", 1)[0].strip("[]")
    if host == "localhost":
        return False
    try:
        return not ipaddress.ip_address(host).is_loopback
    except ValueError:
        return True              # an interface name or '*': every address it may mean
