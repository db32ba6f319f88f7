"""No ask cycles: an ask that would close a wait cycle is refused at once (``ask_cycle``).

A pending ask from S to T is an edge S → T of the wait-for graph: S waits on T. If T
now asked S, or anyone else who waits on T however indirectly, each would wait for
the other until its timeout (600 s by default). So an ask from T to X is refused when
X is among T's *waiters*, the sessions from which T is reached in the graph, and the
refusal names X and the chain by which it waits on T. Supervisor asks are asks (the
same table; the child blocks the same way): they are edges and are refused alike.
Sends and invoke jobs are not: nobody waits on them.

Theory of operation. What a broker knows of the graph:

* the asks of its ask table: between its own sessions, and from another broker's
  sessions (mirrors here: the ask was forwarded) to its own;
* its sessions' asks away (``AskTable.away``): forwarded to the broker holding the
  target, until their answer comes back;
* for each ask forwarded here, ``Ask.waited_by``: the asker's waiters as the asker's
  broker knows them (at most :data:`~schemas.limits.MAX_WAITED_BY`, nearest first,
  each naming the one it waits on next, so a chain is known link by link), sent with
  the ask (``forward``'s ``waitedBy`` and ``waitedVia``) and sent again by that broker
  whenever they change (``link_waiters``, :mod:`broker.core.cluster.waiters`), so
  chains grow across brokers in any order and shrink when an ask ends.

:func:`waiters` walks that graph backwards from a session: the askers of asks to it
(here or away), theirs in turn, and every session an ask's ``waited_by`` names. An ask
is checked where it is opened (:func:`refuse_cycle`, from
:func:`broker.core.messaging.ask_actions.open_ask`), which for a forwarded ask is the
target's broker, walking from the asker with the waiters its broker sent along;
that is after the retry check (a retried id gets its first answer) and before
anything else of the ask.

Invariants: nothing of this is on the send path; a walk visits at most
:data:`MAX_WALK` sessions, and from an asker nobody waits on (the common case) it is
two dictionary lookups. Limits: other brokers' waiters are as fresh as their last
``link_waiters``, one link hop behind each broker on the chain, so a cycle closed
within that time by asks on two brokers may be admitted (both then wait out their
timeouts, as without this rule), and an ask that ended may still count for that
time; across a link that went down and came back, an ask keeps the waiters told
before until it ends; a walk that reaches :data:`MAX_WALK` sessions, or a chain past
``MAX_WAITED_BY`` waiters on another broker, admits what it did not see.
"""

from __future__ import annotations

from typing import Any

from schemas.errors import BusError
from schemas.limits import MAX_WAITED_BY, PREFIX_LEN

from broker.core.kernel.state import State
from broker.core.messaging.ask_table import AskTable, Waiters
from broker.core.sessions.registry import Session

MAX_WALK = 1024      # sessions one walk visits at most
_NONE: dict = {}


def waiters(asks: AskTable, session_id: str, carried: Waiters = ()) -> dict[str, str]:
    """The sessions waiting on ``session_id``, nearest first (at most :data:`MAX_WALK`),
    each mapped to the session it waits on next on the way to ``session_id``.
    ``carried``: the waiters of ``session_id`` another broker told (a forwarded ask's)."""
    inbound, away_to = asks.inbound, asks.away_to
    if not carried and session_id not in inbound and session_id not in away_to:
        return {}
    found: dict[str, str] = {}
    order = [session_id]

    def add(waiter: str, waits_on: str) -> None:
        if waiter != session_id and waiter not in found:
            found[waiter] = waits_on
            order.append(waiter)

    def add_told(told: Waiters, asker: str) -> None:
        for waiter, via in told:       # via: the index of the one it waits on, -1 the asker
            add(waiter, told[via][0] if via >= 0 else asker)

    add_told(carried, session_id)
    at = 0
    while at < len(order) and len(found) < MAX_WALK:
        node = order[at]
        at += 1
        for ask in inbound.get(node, _NONE).values():
            add(ask.asker.id, node)
            if ask.waited_by:
                add_told(ask.waited_by, ask.asker.id)
        for away in away_to.get(node, _NONE).values():
            add(away.asker_id, node)
    return found


def told(asks: AskTable, session_id: str) -> Waiters:
    """The waiters of ``session_id`` (held here) another broker is told: the nearest
    :data:`~schemas.limits.MAX_WAITED_BY`, each with the index of the one it waits on
    next (always an earlier one), -1 for ``session_id`` itself."""
    found = waiters(asks, session_id)
    if not found:
        return ()
    kept = list(found)[:MAX_WAITED_BY]
    index = {waiter: i for i, waiter in enumerate(kept)}
    return tuple((waiter, index.get(found[waiter], -1)) for waiter in kept)


def to_wire(waiting: Waiters) -> dict[str, list]:
    """``waitedBy`` and ``waitedVia`` (forward, link_waiters) of ``waiting``."""
    return {"waitedBy": [w for w, _ in waiting], "waitedVia": [via for _, via in waiting]}


def from_wire(fields: Any) -> Waiters:
    """What another broker told (``waitedBy``, ``waitedVia`` of ``fields``), checked:
    at most MAX_WAITED_BY ids; a ``via`` that is not an earlier index stands for the
    asker."""
    if fields.__class__ is not dict:
        return ()
    ids, vias = fields.get("waitedBy"), fields.get("waitedVia")
    if ids.__class__ is not list:
        return ()
    if not all(w.__class__ is str for w in ids):
        return ()
    if vias.__class__ is not list or len(vias) != len(ids):
        vias = [-1] * len(ids)
    return tuple((w, via if via.__class__ is int and -1 <= via < i else -1)
                 for i, (w, via) in enumerate(zip(ids[:MAX_WAITED_BY], vias)))


def refuse_cycle(state: State, asker: Session, target: Session) -> None:
    """Raises BusError(ask_cycle) when ``target`` waits on ``asker`` already. An asker
    held by another broker brings its waiters along (``AskTable.carried``)."""
    asks = state.asks
    carried = asks.carried if asker.broker is not None else ()
    found = waiters(asks, asker.id, carried)
    if target.id not in found:
        return
    cycle = [target.id]
    while cycle[-1] != asker.id:
        cycle.append(found[cycle[-1]])
    chain = " → ".join([_name(state, session_id) for session_id in cycle[:-1]] + ["you"])
    raise BusError("ask_cycle", name=target.name, id=target.id, chain=chain, cycle=cycle)


def _name(state: State, session_id: str) -> str:
    session = state.registry.by_id.get(session_id)
    return session.name if session is not None else session_id[:PREFIX_LEN]
