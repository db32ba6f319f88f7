"""What a session says about its attention, declared once for the broker and clients.

* **Capabilities** (hello ``capabilities``; changed later by a ``status`` envelope's
  ``capabilities``): how a message reaches the agent behind a session, shown in every
  list row, so a sender knows whether a message wakes the receiver or waits for its
  next tool call. ``push``: its host is pushed to (a Claude channel notification, a
  program's receive loop); ``hooks``: a host hook took its mail recently (its turn
  ending does not leave mail unseen); ``steer``: it receives mid-turn (every tool
  result carries its inbox); ``host``: what runs it (``mcp``, ``python``, ``node`` or a
  runtime's own name).
* **Inbound policy** (hello ``inbound``; changed by the ``inbound`` kind): what
  happens to a message from another session: ``accept`` (delivered), ``hold``
  (kept for the person at the terminal to release or drop, expiring after
  :data:`HOLD_EXPIRY_S`) or ``refuse`` (the send is refused ``inbound_refused``).
* **Guard** (hello ``guard``): the flood and loop bounds of :mod:`broker.core.sessions.guard`.
"""

from __future__ import annotations

from typing import Any

ACCEPT, HOLD, REFUSE = "accept", "hold", "refuse"
INBOUND_CHANGED = "inbound_changed"     # event to a session whose gate a person set
INBOUND_POLICIES = (ACCEPT, HOLD, REFUSE)

# Capability flags (booleans) and the one text field.
CAPABILITY_FLAGS = ("push", "hooks", "steer")
HOST = "host"
MAX_HOST_CHARS = 64

HOLD_EXPIRY_S = 3600.0        # a held message not released or dropped within this expires
MAX_HELD_PER_SESSION = 1000   # held messages kept per receiver (then refused hold_full)
HELD_PREVIEW_CHARS = 200      # the list of held messages shows this much of each text

# The guard's defaults (a session that turns it on without numbers gets these).
GUARD_PER_MINUTE = 30         # messages from one sender to one receiver in any 60 s
GUARD_EXCHANGES = 20          # turns of direction between two sessions without other input
GUARD_PAUSE_S = 120.0         # this long without a message between them resets the count
GUARD_FIELDS = ("perMinute", "exchanges", "pauseS")


def inbound_policy(value: Any, default: str = ACCEPT) -> str:
    """The policy ``value`` names, or ``default`` when it names none."""
    return value if value in INBOUND_POLICIES else default


def clean_capabilities(value: Any) -> dict[str, Any] | None:
    """The capabilities a hello or status states, as kept: the known flags as booleans
    and ``host`` as trimmed text; anything else is dropped. None when ``value`` is not
    a map."""
    if value.__class__ is not dict:
        return None
    kept: dict[str, Any] = {}
    for flag in CAPABILITY_FLAGS:
        if value.get(flag).__class__ is bool:
            kept[flag] = value[flag]
    host = value.get(HOST)
    if host.__class__ is str and host.strip():
        kept[HOST] = host.strip()[:MAX_HOST_CHARS]
    return kept


def guard_settings(value: Any) -> dict[str, float] | None:
    """The guard a hello asks for: None (off) for a missing or false value; the
    defaults for ``true``; a map overrides each default it names with a positive
    number (``0`` turns that bound off)."""
    if value is None or value is False:
        return None
    settings = {"perMinute": float(GUARD_PER_MINUTE), "exchanges": float(GUARD_EXCHANGES),
                "pauseS": GUARD_PAUSE_S}
    if value.__class__ is dict:
        for key in GUARD_FIELDS:
            number = value.get(key)
            if number.__class__ in (int, float) and number >= 0:
                settings[key] = float(number)
    elif value is not True:
        return None
    return settings
