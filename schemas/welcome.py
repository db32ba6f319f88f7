"""The welcome, declared: the fields of the ``result`` that accepts a ``hello``.

A hello is answered by an ordinary ``result`` (:mod:`schemas.kinds`); when ``ok`` is
true its other fields are these. The broker builds them in
``broker.core.sessions.connect.welcome``; a unit test opens sessions of every sort and
checks each welcome against :data:`WELCOME_FIELDS` (no field missing, none undeclared,
each of its declared type). PROTOCOL.md's welcome table is generated from here.

Invariant: ``required`` fields are in every welcome; the others only in the cases
their text names.
"""

from __future__ import annotations

from .kinds import Field

_NONE = type(None)


def _w(name: str, types: type | tuple[type, ...], doc: str, required: bool = False) -> Field:
    return Field(name, types if isinstance(types, tuple) else (types,), required, None, doc)


WELCOME_FIELDS: tuple[Field, ...] = (
    _w("sessionId", str, "the session's id (a UUID); peers reach it by this id, its name "
       "or its first 8 hex digits", True),
    _w("token", str, "the reclaim secret of this id: keep it with ``sessionId`` and send "
       "both in a later hello to take the id back (a secret: never show it)", True),
    _w("name", str, "the session's name, trimmed", True),
    _w("groups", list, "the session's memberships", True),
    _w("homeGroup", str, "the home group resolved at the first connect; a later hello "
       "states it as ``homeGroup``", True),
    _w("brokerId", str, "the broker's id; another one after a reconnect means another "
       "broker, or a restarted one", True),
    _w("livenessS", (int, float), "seconds of silence after which the broker drops the "
       "session", True),
    _w("parent", (str, _NONE), "the launching session's id, when a child grant admitted it",
       True),
    _w("pubEndpoint", (str, _NONE), "the broker's PUB endpoint (presence and channel "
       "outputs, best effort)", True),
    _w("backlogBytes", int, "bytes the broker lets this session leave unread: report "
       "``read`` each time it grows by an eighth of this", True),
    _w("channel", str, "sessions with an ``agent``: the conversation's channel id in force"),
    _w("persistent", bool, "sessions with an ``agent``: whether the broker keeps the "
       "conversation after it leaves"),
    _w("droppedGroups", list, "groups of the hello's ``groups`` past the broker's "
       "``--max-groups``: not restored"),
    _w("reclaimed", bool, "present when the hello asked for ``sessionId``: whether that id "
       "was given back"),
    _w("reason", str, "when ``reclaimed`` is false: why a fresh id was given instead"),
)

WELCOME_FIELD_NAMES = frozenset(field.name for field in WELCOME_FIELDS)

# The welcome's ``reason`` when the id asked for is held by a live session (another
# process presenting the same identity entry, or one whose death the broker has not
# noticed yet: it will once that session is silent past the liveness window).
HOLDER_LIVE = "a live session holds that id"


def problems(welcome: dict) -> list[str]:
    """What in ``welcome`` (a result without ``v``, ``k``, ``re`` and ``ok``) breaks the
    declaration: a required field missing, a field undeclared, a value of another type."""
    found = [f"missing {f.name!r}" for f in WELCOME_FIELDS if f.required and f.name not in welcome]
    found += [f"undeclared {name!r}" for name in welcome if name not in WELCOME_FIELD_NAMES]
    for field in WELCOME_FIELDS:
        if field.name in welcome:
            problem = field.problem(welcome[field.name])
            if problem:
                found.append(problem)
    return found
