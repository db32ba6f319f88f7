"""Grants: the secrets that carry authority, issued by the broker and checked by it.

A relation that carries authority is granted by whoever holds that authority, never
claimed: a run's host gets one grant per agent stage and hands it to the stage
session it launches; a launching session asks for a grant for each child, which is
what makes it that child's supervisor. A grant is an HMAC under the database's grant
key (:attr:`~broker.core.kernel.records.Snapshot.grant_key`) of what it grants, so the
broker stores no grant at all and every broker on the database can check it:

* a stage grant covers one node of one run generation (``Run.nonce``): another
  stage, another run, or the same run id registered anew after it ended gets
  ``invalid_grant``; so does a stage the host revoked or marked terminal;
* a child grant names its launcher, a random nonce and when it expires
  (:data:`~schemas.limits.CHILD_GRANT_S` after issue); any number may be issued, each
  admits one child: the first hello that uses it before it expires. That child's
  reclaim secret is bound to the grant and its id (:func:`session_token`), so the
  same child taking its id back later (after a broker restart, on another broker)
  is admitted with the same grant whenever it comes, and nobody else is;
* a run grant covers one run generation: with it another session takes the run over
  once its host is gone.

Single use is kept in memory (:class:`UsedGrants`), by each broker for its own
process; a broker also counts a grant spent when its child comes back with it. The
expiry, short, is what bounds a grant across a broker restart or on another broker on
the database: there it may admit one more child, before it expires and before its own
child returns to that broker.

Invariants: checks compare in constant time; a grant never names anything secret; a
used child grant is refused again until it expires, and :class:`UsedGrants` forgets
one early only by refusing every grant that expires no later (it holds at most
:data:`~schemas.limits.USED_GRANTS_KEPT`).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections import OrderedDict
from dataclasses import dataclass

from schemas.errors import BusError
from schemas.limits import CHILD_GRANT_S, USED_GRANTS_KEPT

from broker.core.runs.run_tree import Node, Run

_STAGE, _CHILD, _RUN, _BOUND = "s1", "c2", "r1", "b1"


def _mac(key: bytes, *parts: str) -> str:
    return hmac.new(key, "\0".join(parts).encode(), hashlib.sha256).hexdigest()[:40]


def _same(given: str, expected: str) -> bool:
    """Constant-time equality that any text may take (compare_digest refuses non-ASCII)."""
    return hmac.compare_digest(given.encode(), expected.encode())


def stage_grant(key: bytes, run: Run, node: Node) -> str:
    """The grant a host hands to the session it launches for ``node``."""
    return f"{_STAGE}.{_mac(key, _STAGE, run.run_id, run.nonce, node.key())}"


def check_stage(key: bytes, run: Run, node: Node, grant: object) -> None:
    """Raises BusError(grant_required | invalid_grant)."""
    what = f"bind as {run.canonical(node)}"
    if not isinstance(grant, str) or not grant:
        raise BusError("grant_required", what=what)
    if node.revoked or node.terminal or not _same(grant, stage_grant(key, run, node)):
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
    if not _same(grant, run_grant(key, run)):
        raise BusError("invalid_grant", what=what)


@dataclass(frozen=True, slots=True)
class ChildGrant:
    """A child grant whose signature checked out (it may still be used or expired)."""

    launcher_id: str
    nonce: str
    expires: int      # wall clock, whole seconds


def child_grant(key: bytes, launcher_id: str, wall: float) -> str:
    """A fresh grant for a child ``launcher_id`` is about to start (``wall``: now)."""
    nonce, expires = secrets.token_hex(8), str(int(wall + CHILD_GRANT_S))
    return f"{_CHILD}.{nonce}.{expires}.{_mac(key, _CHILD, launcher_id, nonce, expires)}"


def read_child(key: bytes, launcher_id: str, grant: object) -> ChildGrant:
    """The grant, if ``launcher_id``'s broker issued it. Raises BusError(grant_required |
    invalid_grant)."""
    what = f"connect as a child of {launcher_id}"
    if not isinstance(grant, str) or not grant:
        raise BusError("grant_required", what=what)
    parts = grant.split(".")
    if len(parts) != 4 or parts[0] != _CHILD or not (parts[2].isascii() and parts[2].isdigit()):
        raise BusError("invalid_grant", what=what)
    _, nonce, expires, mac = parts
    if not _same(mac, _mac(key, _CHILD, launcher_id, nonce, expires)):
        raise BusError("invalid_grant", what=what)
    return ChildGrant(launcher_id, nonce, int(expires))


def admit_child(key: bytes, used: "UsedGrants", launcher_id: str, env: dict,
                wall: float) -> ChildGrant:
    """Whether the hello ``env`` may connect as a child of ``launcher_id``: the grant, to
    mark used once its session opens (:meth:`UsedGrants.use`). The child the grant
    admitted already, taking its id back with its bound reclaim secret, is admitted
    whether the grant is spent or expired (and spends it on a broker that restarted).

    Raises BusError(grant_required | invalid_grant | grant_used | grant_expired)."""
    grant = read_child(key, launcher_id, env.get("grant"))
    session_id, token = env.get("sessionId"), env.get("token")
    if isinstance(session_id, str) and isinstance(token, str):
        secret, _, mac = token.rpartition(".")
        if secret and _same(mac, _bound(key, grant, session_id, secret)):
            return grant
    used.check(grant, wall)
    return grant


def session_token(key: bytes, launcher_id: str | None, grant: object, session_id: str,
                  secret: str) -> str:
    """The reclaim secret of a session opening as ``session_id``: ``secret`` itself, or
    for a child (admitted with ``grant`` from ``launcher_id``) ``secret`` bound to the
    grant and the id, which is what later admits that child, and only it, again."""
    if launcher_id is None:
        return secret
    return f"{secret}.{_bound(key, read_child(key, launcher_id, grant), session_id, secret)}"


def _bound(key: bytes, grant: ChildGrant, session_id: str, secret: str) -> str:
    return _mac(key, _BOUND, grant.launcher_id, grant.nonce, session_id, secret)


class UsedGrants:
    """The child grants that admitted their child and have not expired, oldest first.

    Bounded by ``limit``: past it the oldest is forgotten early, and ``floor`` (the
    latest expiry forgotten) makes every grant expiring no later count as expired, so
    a forgotten grant never admits a second child; a flood only shortens the others'
    time."""

    def __init__(self, limit: int = USED_GRANTS_KEPT) -> None:
        self.limit = limit
        self._used: OrderedDict[str, int] = OrderedDict()   # nonce -> expires
        self.floor = 0

    def __len__(self) -> int:
        return len(self._used)

    def check(self, grant: ChildGrant, wall: float) -> None:
        """Raises BusError(grant_used | grant_expired)."""
        used = self._used
        while used:
            nonce, expires = next(iter(used.items()))
            if expires > wall:
                break
            del used[nonce]
        if grant.nonce in used:
            raise BusError("grant_used")
        if grant.expires <= max(wall, self.floor):
            raise BusError("grant_expired", seconds=CHILD_GRANT_S)

    def use(self, grant: ChildGrant, wall: float) -> None:
        if grant.expires <= wall:
            return            # refused as expired anyway
        self._used[grant.nonce] = grant.expires
        while len(self._used) > self.limit:
            _, expires = self._used.popitem(last=False)
            self.floor = max(self.floor, expires)


def link_proof(key: bytes, broker_id: str) -> str:
    """What a broker shows another on the same database to open a link."""
    return f"l1.{_mac(key, 'l1', broker_id)}"
