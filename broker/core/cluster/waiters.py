"""Who waits on whom, across brokers: the part of the wait-for graph other brokers need.

An ask that would close a wait cycle is refused where it is opened, on its target's
broker (:mod:`broker.core.messaging.ask_cycles`). That broker sees its own asks and
its sessions' asks away; what waits on a forwarded ask's asker elsewhere it learns
from the asker's broker, which sends it with the ask (``forward``'s ``waitedBy``,
:func:`away`) and again whenever it changes (``link_waiters``, :func:`tell`), so the
knowledge follows every chain across brokers, one link hop at a time, growing as asks
open and shrinking as they end.

When the waiters of an asker change: an ask opened or closed here, or an ask
forwarded here had its waiters changed by its broker (:func:`told_here`). Only the
asks away downstream of such a change are looked at (``AskTable.touched``: the
targets where it happened; a walk forward from them, at most ``MAX_WALK`` sessions),
and a broker is told an ask's waiters only when they differ from what it was told
last (so a chain settles: nothing is told twice). Once per engine input.
"""

from __future__ import annotations

from schemas import envelopes

from broker.core.cluster.peers import Peer
from broker.core.kernel.commands import LinkSend
from broker.core.kernel.state import State
from broker.core.messaging.ask_cycles import MAX_WALK, from_wire, to_wire, told
from broker.core.messaging.ask_table import AwayAsk, Waiters
from broker.core.sessions.registry import Session

_NONE: dict = {}


def away(state: State, asker: Session, ask_id: str, target_id: str | None,
         broker_id: str) -> Waiters:
    """``asker``'s ask ``ask_id`` (to ``target_id``, None: not known here, a path the
    run's broker resolves) goes to ``broker_id``: the waiters to send with it."""
    asks = state.asks
    waiting = told(asks, asker.id)
    if target_id is not None:
        asks.open_away(AwayAsk(ask_id, asker.id, target_id, broker_id, waiting))
    return waiting


def tell(state: State) -> None:
    """Tell the brokers of asks away downstream of what changed who waits on their
    askers now, where that differs from what they were told."""
    asks = state.asks
    touched, asks.touched = asks.touched, set()
    if not asks.away:
        return
    outbound, away_from = asks.outbound, asks.away_from
    seen: set[str] = set()
    stack = list(touched)
    changed: dict[str, dict[str, dict]] = {}        # broker id -> ask id -> waiters
    while stack and len(seen) < MAX_WALK:
        node = stack.pop()
        if node in seen:
            continue
        seen.add(node)
        stack.extend(ask.target.id for ask in outbound.get(node, _NONE).values())
        for ask in away_from.get(node, _NONE).values():
            now = told(asks, ask.asker_id)
            if now != ask.told:
                ask.told = now
                changed.setdefault(ask.broker_id, {})[ask.id] = to_wire(now)
    for broker_id, table in changed.items():
        state.stats["link.waiters_told"] += 1
        state.out.append(LinkSend(broker_id, [envelopes.link_waiters(table)]))


def told_here(state: State, peer: Peer, env: dict, now: float) -> None:
    """``link_waiters`` from ``peer``: new waiters of the askers of asks it forwarded here."""
    asks = state.asks
    for ask_id, waiting in env["asks"].items():
        ask = asks.by_id.get(ask_id)
        if ask is None or ask.asker.broker != peer.broker_id:
            continue                # it ended here already, or was never opened here
        waited_by = from_wire(waiting)
        if waited_by != ask.waited_by:
            ask.waited_by = waited_by
            if asks.away:
                asks.touched.add(ask.target.id)
