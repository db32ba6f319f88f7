"""CURVE keys on the client side: from arguments, the environment, or a key directory.

The broker's public key and this client's key pair, all z85 text. Sources, first
that gives a value: ``Client.connect(curve_server_key=, curve_public_key=,
curve_secret_key=)``; the environment (``INTERCOM_CURVE_SERVER_KEY``,
``INTERCOM_CURVE_PUBLIC_KEY``, ``INTERCOM_CURVE_SECRET_KEY``); or, for the command
line, a directory made by ``python -m broker keys`` (``broker.key`` and
``clients/<name>.key_secret``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

ENV = ("INTERCOM_CURVE_SERVER_KEY", "INTERCOM_CURVE_PUBLIC_KEY", "INTERCOM_CURVE_SECRET_KEY")


@dataclass(frozen=True, slots=True)
class CurveKeys:
    server_key: str
    public_key: str
    secret_key: str


def resolve(server_key: str | None = None, public_key: str | None = None,
            secret_key: str | None = None,
            environ: Mapping[str, str] = os.environ) -> CurveKeys | None:
    """The keys to use, or None for no CURVE. Raises ValueError when only some are given."""
    given = [server_key, public_key, secret_key]
    values = [v or environ.get(name) or None for v, name in zip(given, ENV)]
    if not any(values):
        return None
    if not all(values):
        missing = [name for v, name in zip(values, ENV) if not v]
        raise ValueError(f"CURVE needs the broker's public key and this client's key pair; "
                         f"missing {', '.join(missing)}")
    return CurveKeys(*(v.decode() if isinstance(v, bytes) else v for v in values))


def from_directory(directory: str | os.PathLike, client: str = "client",
                   operator: bool = False) -> CurveKeys:
    """Keys from a ``python -m broker keys`` directory: client ``client``'s pair, or
    (``operator``) the broker's own, which makes the connection its operator's.
    Raises ValueError."""
    import zmq.auth  # noqa: PLC0415  (only the command line reads key files)

    base = Path(directory).expanduser()
    pair = base / "broker.key_secret" if operator else base / "clients" / f"{client}.key_secret"
    try:
        server, _ = zmq.auth.load_certificate(str(base / "broker.key"))
        public, secret = zmq.auth.load_certificate(str(pair))
    except (OSError, ValueError) as exc:
        raise ValueError(f"cannot read CURVE keys in {base}: {exc}") from None
    if not secret:
        raise ValueError(f"{pair} holds no secret key")
    return CurveKeys(server.decode(), public.decode(), secret.decode())
