"""Grants: the secrets that carry authority, issued by the broker and checked by it.

A relation that carries authority is granted by whoever holds that authority, never
claimed: a run's host gets one grant per agent stage and hands it to the stage
session it launches; a launching session asks for a grant for each child, which is
what makes it that child's supervisor. A grant is an HMAC under the database's grant
key (:attr:`~broker.core.records.Snapshot.grant_key`) of what it grants, so the
broker stores no grant at all and every broker on the database can check it:

* a stage grant covers one node of one run generation (``Run.nonce``): another
  stage, another run, or the same run id registered anew after it ended gets
  ``invalid_grant``; so does a stage the host revoked or marked terminal;
* a child grant names its launcher and a random nonce; any number may be issued;
* a run grant covers one run generation: with it another session takes the run over
  once its host is gone.

Invariants: checks compare in constant time; a grant never names anything secret.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets

from schemas.errors import BusError

from .runs import Node, Run

_STAGE, _CHILD, _RUN = "s1", "c1", "r1"


def _mac(key: bytes, *parts: str) -> str:
    return hmac.new(key, "\0".join(parts).encode(), hashlib.sha256).hexdigest()[:40]


def stage_grant(key: bytes, run: Run, node: Node) -> str:
    """The grant a host hands to the session it launches for ``node``."""
    return f"{_STAGE}.{_mac(key, _STAGE, run.run_id, run.nonce, node.key())}"


def check_stage(key: bytes, run: Run, node: Node, grant: object) -> None:
    """Raises BusError(grant_required | invalid_grant)."""
    what = f"bind as {run.canonical(node)}"
    if not isinstance(grant, str) or not grant:
        raise BusError("grant_required", what=what)
    if node.revoked or node.terminal or not hmac.compare_digest(grant, stage_grant(key, run, node)):
        raise BusError("invalid_grant", what=what)


def run_grant(key: bytes, run: Run) -> str:
    """The grant that lets another session take over ``run`` (this generation) once
    its host is gone; register_run gives it to the host, who may hand it on."""
    return f"{_RUN}.{_mac(key, _RUN, run.run_id, run.nonce)}"


def check_run(key: bytes, run: Run, grant: object) -> None:
    """Raises BusError(grant_required | invalid_grant)."""
    what = f"take over run {run.run_id!r}"
    if not isinstance(grant, str) or not grant:
        raise BusError("grant_required", what=what)
    if not hmac.compare_digest(grant, run_grant(key, run)):
        raise BusError("invalid_grant", what=what)


def child_grant(key: bytes, launcher_id: str) -> str:
    """A fresh grant for a child ``launcher_id`` is about to start."""
    nonce = secrets.token_hex(8)
    return f"{_CHILD}.{nonce}.{_mac(key, _CHILD, launcher_id, nonce)}"


def check_child(key: bytes, launcher_id: str, grant: object) -> None:
    """Raises BusError(grant_required | invalid_grant)."""
    what = f"connect as a child of {launcher_id}"
    if not isinstance(grant, str) or not grant:
        raise BusError("grant_required", what=what)
    kind, _, rest = grant.partition(".")
    nonce, _, mac = rest.partition(".")
    if kind != _CHILD or not nonce or not hmac.compare_digest(mac, _mac(key, _CHILD, launcher_id, nonce)):
        raise BusError("invalid_grant", what=what)


def link_proof(key: bytes, broker_id: str) -> str:
    """What a broker shows another on the same database to open a link."""
    return f"l1.{_mac(key, 'l1', broker_id)}"
