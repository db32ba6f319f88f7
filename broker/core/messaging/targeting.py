"""Matching a ``to`` string to one session the caller may reach, by name or id.

This is step 1 of :func:`broker.core.routing.resolver.resolve` (which decides what
else a ``to`` may name, and in which order). Its own order (first form that finds
anything wins):

1. an exact full session id;
2. an exact, case-insensitive session name;
3. a unique 8-hex prefix of a UUID session id;
4. an Atomic session id registered by exactly one session the caller can see.

Only sessions the caller can see are ever candidates, so an ambiguity report never
names a session the caller could not reach. The one exception is the caller's
supervisor (the session that launched it with a child grant, recorded by the broker
at connect): an isolated child reaches it by full id or unique 8-hex prefix, across
groups, for ``send`` and ``ask`` alike, as the relationship its launcher authorized.
That opens nothing else: not the supervisor's name (names resolve among visible
sessions only), not its groups' other members, not the reverse direction. A full id
of an existing session the caller cannot see is refused as another group's session;
anything else that resembles a truncated id is rejected rather than guessed. A prefix
shared by the caller and another session is not unique: it is reported as ambiguous.
"""

from __future__ import annotations

import re

from schemas.errors import BusError

from broker.core.sessions import last_seen
from broker.core.sessions.authority import visible
from broker.core.sessions.registry import Session
from broker.core.kernel.state import State

_PREFIX = re.compile(r"[0-9a-f]{8}")
_ID_FRAGMENT = re.compile(r"[0-9a-fA-F-]{1,36}")


def resolve_session(state: State, caller: Session, to: str) -> Session:
    """Return the single session ``to`` names for ``caller``.

    Raises BusError(self_target | different_group | ambiguous_target |
    invalid_target | target_not_found).
    """
    registry = state.registry
    exact = registry.by_id.get(to)
    if exact is not None and not exact.is_control:     # a control connection is nobody's target
        return _reachable(state, caller, exact)

    by_name = registry.by_name.get(to.lower())
    if by_name:
        found = _pick(state, caller, to, by_name)
        if found is not None:
            return found

    lowered = to.lower()
    if _PREFIX.fullmatch(lowered):
        found = _pick(state, caller, to, registry.by_prefix.get(lowered, ()),
                      with_self=True, with_supervisor=True)
        if found is not None:
            return found

    by_atomic = registry.by_atomic.get(to)
    if by_atomic:
        found = _pick(state, caller, to, by_atomic)
        if found is not None:
            return found

    if _ID_FRAGMENT.fullmatch(to) and len(to) != 36 and not _PREFIX.fullmatch(lowered):
        raise BusError("invalid_target", to=to)
    raise BusError("target_not_found", to=to, **last_seen.fields(state, caller, to))


def _reachable(state: State, caller: Session, target: Session) -> Session:
    if target is caller:
        raise BusError("self_target")
    if not visible(state, caller, target) and target.id != caller.parent_id:
        raise BusError("different_group")
    return target


def _pick(state: State, caller: Session, to: str, ids, *, with_self: bool = False,
          with_supervisor: bool = False) -> Session | None:
    """One reachable candidate, self_target, ambiguity, or None when none is reachable.

    ``with_self``: the caller counts as a candidate (a prefix it shares is not unique).
    ``with_supervisor``: the caller's supervisor is a candidate whatever its groups.
    """
    registry = state.registry
    if len(ids) == 1:
        for only in ids:
            session = registry.by_id.get(only)
            if session is not None and session is not caller and visible(state, caller, session):
                return session
    candidates = [registry.by_id[i] for i in ids if i in registry.by_id]
    reachable = [s for s in candidates if s is not caller and (
        visible(state, caller, s) or with_supervisor and s.id == caller.parent_id)]
    if with_self and reachable and caller in candidates:
        reachable.append(caller)
    if len(reachable) == 1:
        return _reachable(state, caller, reachable[0])
    if len(reachable) > 1:
        names = ", ".join(sorted(f"{s.name} {s.id}" for s in reachable))
        raise BusError("ambiguous_target", to=to, candidates=names)
    if caller in candidates:
        raise BusError("self_target")
    return None
