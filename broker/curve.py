"""CURVE for a networked broker: key files, the authenticator, and safe binds.

``python -m broker keys --dir DIR`` writes ``DIR/broker.key`` and
``DIR/broker.key_secret`` and a pair per client under ``DIR/clients/`` (pyzmq's
``zmq.auth`` certificate format; secret files mode 0600). ``python -m broker --curve
DIR`` makes the ROUTER and PUB sockets CURVE servers with the broker's pair and
allows exactly the public keys in ``DIR/clients/`` (re-read on SIGHUP).

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

BROKER_NAME = "broker"
CLIENTS_DIR = "clients"


class CurveError(Exception):
    """Keys missing or unreadable; the message says which file."""


def create_keys(directory: Path, clients: list[str]) -> list[Path]:
    """Write the broker's pair and one pair per client; returns the files written."""
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    (directory / CLIENTS_DIR).mkdir(mode=0o700, exist_ok=True)
    written = []
    old = os.umask(0o077)            # secret files are never readable by others, not even briefly
    try:
        for where, name in [(directory, BROKER_NAME)] + [(directory / CLIENTS_DIR, c) for c in clients]:
            public, secret = zmq.auth.create_certificates(str(where), name)
            os.chmod(secret, 0o600)
            written += [Path(public), Path(secret)]
    finally:
        os.umask(old)
    return written


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
    """The broker's side of CURVE: its key pair and the authenticator thread."""

    def __init__(self, ctx: zmq.Context, directory: Path) -> None:
        self.public, self.secret = load_pair(directory / f"{BROKER_NAME}.key_secret")
        self.clients = directory / CLIENTS_DIR
        if not self.clients.is_dir():
            raise CurveError(f"no allowed-clients directory {self.clients}")
        self.auth = ThreadAuthenticator(ctx)
        self.auth.start()
        self.reload()

    def reload(self) -> None:
        """Allow exactly the public keys now in the clients directory."""
        self.auth.configure_curve(domain="*", location=str(self.clients))

    def secure(self, sock: zmq.Socket) -> None:
        """Make ``sock`` a CURVE server (before it binds)."""
        sock.curve_secretkey = self.secret
        sock.curve_publickey = self.public
        sock.curve_server = True

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
