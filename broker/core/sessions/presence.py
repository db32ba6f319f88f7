"""Presence: who must hear that a session appeared, changed or went away.

A change of a session's membership set (connect, join, leave, disconnect) is
described by the set before and after. For every other session whose visibility of
the changed one flips, both sides get an in-band event (``session_joined`` or
``session_left``); peers that could see it before and after get ``presence_update``
when its groups changed. A connecting session hears nothing about existing peers (it
asks ``list``), and a departing one hears nothing at all. Every change is also
published on PUB once per affected group, with the group as topic: joined or left in
the groups gained or lost (with the full row), presence_update in the groups kept
(with a brief row and the groups gained and lost).

Cost: one change builds the session's public row once and one event per kind, shared
by every peer that gets it (the shell encodes a shared envelope once per round), so a
change costs O(peers + groups). A departure's in-band events are told through
:mod:`broker.core.sessions.departures`, a bounded number per round, so a mass departure of D
sessions (O(D × peers) events) is spread instead of stalling everyone else.
"""

from __future__ import annotations

from schemas import envelopes
from schemas.names import PRESENCE_UPDATE, SESSION_JOINED, SESSION_LEFT

from broker.core.sessions import departures
from broker.core.sessions.authority import sees_into, watchers
from broker.core.kernel.commands import Publish, Send
from broker.core.sessions.departures import BRIEF_FIELDS
from broker.core.sessions.registry import Session
from broker.core.kernel.lifecycle import SessionChanged, SessionLeft, emit
from broker.core.kernel.state import State


def session_left(state: State, event: SessionLeft) -> None:
    """Its groups hear that the session left (lifecycle listener)."""
    membership_changed(state, event.session, set(event.groups), set(), departing=True)


def membership_changed(state: State, session: Session, before: set[str], after: set[str], *,
                       connecting: bool = False, departing: bool = False) -> None:
    """Append the events for ``session`` moving from ``before`` to ``after`` groups.

    The registry must already reflect ``after``.
    """
    registry, out = state.registry, state.out
    emit(state, SessionChanged(session))    # other brokers hear of it too
    if departing:
        row = session.public()
        for group in sorted(before):
            out.append(Publish(group, envelopes.presence(SESSION_LEFT, row, group)))
        departures.queue(state, session, before, _saw(state, session, before))
        return
    departures.settle(state, session.id)
    changed = before | after
    peers: set[str] = set()
    for group in changed:
        peers |= registry.by_group.get(group, set())
    seeing = watchers(state, changed)
    peers |= seeing
    peers.discard(session.id)
    groups_changed = before != after
    row = session.public()
    about: dict[str, dict] = {}   # one event per kind, shared by every peer

    def event(kind: str) -> dict:
        env = about.get(kind)
        if env is None:
            env = about[kind] = envelopes.presence(kind, row)
        return env

    for peer_id in peers:
        peer = registry.by_id[peer_id]
        shared_before = not peer.groups.keys().isdisjoint(before)
        shared_after = not peer.groups.keys().isdisjoint(after)
        was, now = shared_before, shared_after
        if peer_id in seeing:   # invocation control sees into owned subgroups, one way
            was = was or sees_into(state, peer, before)
            now = now or sees_into(state, peer, after)
        if now and not was:
            out.append(Send(peer.identity, event(SESSION_JOINED)))
            if shared_after and not connecting:
                out.append(Send(session.identity, envelopes.presence(SESSION_JOINED, peer.public())))
        elif was and not now:
            out.append(Send(peer.identity, event(SESSION_LEFT)))
            if shared_before:
                out.append(Send(session.identity, envelopes.presence(SESSION_LEFT, peer.public())))
        elif was and now and groups_changed:
            out.append(Send(peer.identity, event(PRESENCE_UPDATE)))
    for group in sorted(after - before):
        out.append(Publish(group, envelopes.presence(SESSION_JOINED, row, group)))
    for group in sorted(before - after):
        out.append(Publish(group, envelopes.presence(SESSION_LEFT, row, group)))
    if groups_changed:
        # The groups it stayed in see its membership set change, as their members do,
        # as a delta: the full row in every kept group would cost a host of N runs
        # O(N) bytes in each of N events per register_run.
        brief = {k: row[k] for k in BRIEF_FIELDS}
        gained, lost = sorted(after - before), sorted(before - after)
        for group in sorted(before & after):
            env = envelopes.presence(PRESENCE_UPDATE, brief, group)
            env["joinedGroups"], env["leftGroups"] = gained, lost
            out.append(Publish(group, env))


def _saw(state: State, session: Session, groups: set[str]) -> list[str]:
    """Ids of who sees ``session`` now (the registry no longer holds it): members of
    its groups, and those that see into them through invocation control."""
    by_group, by_id = state.registry.by_group, state.registry.by_id
    found = set().union(*(by_group.get(group, ()) for group in groups))
    found.update(peer_id for peer_id in watchers(state, groups)
                 if sees_into(state, by_id[peer_id], groups))
    found.discard(session.id)
    return list(found)


def status_changed(state: State, session: Session) -> None:
    """Tell every session that can see ``session`` about its new status."""
    registry = state.registry
    emit(state, SessionChanged(session))
    departures.settle(state, session.id)
    row = session.public()
    env = envelopes.presence(PRESENCE_UPDATE, row)
    for peer_id in registry.neighbours(session) | watchers(state, session.groups):
        if peer_id != session.id:
            state.out.append(Send(registry.by_id[peer_id].identity, env))
    for group in session.groups:
        state.out.append(Publish(group, envelopes.presence(PRESENCE_UPDATE, row, group)))
