"""Presence: who must hear that a session appeared, changed or went away.

A change of a session's membership set (connect, join, leave, disconnect) is
described by the set before and after. For every other session whose visibility of
the changed one flips, both sides get an in-band event (``session_joined`` or
``session_left``); peers that could see it before and after get ``presence_update``
when its groups changed. A connecting session hears nothing about existing peers (it
asks ``list``), and a departing one hears nothing at all. Every change is also
published on PUB once per affected group, with the group as topic: joined or left in
the groups gained or lost, presence_update in the groups kept.
"""

from __future__ import annotations

from typing import Any

from schemas.protocol import envelope

from .commands import Command, Publish, Send
from .sessions import Registry, Session


def presence_event(event: str, session: Session, **extra: Any) -> dict[str, Any]:
    return envelope("event", event=event, session=session.public(), **extra)


def membership_changed(registry: Registry, session: Session, before: set[str],
                       after: set[str], out: list[Command], *, connecting: bool = False,
                       departing: bool = False) -> None:
    """Append the events for ``session`` moving from ``before`` to ``after`` groups.

    The registry must already reflect ``after``.
    """
    peers: set[str] = set()
    for group in before | after:
        peers |= registry.by_group.get(group, set())
    watchers = registry.extra_watchers(before | after) if registry.extra_watchers else set()
    peers |= watchers
    peers.discard(session.id)
    groups_changed = before != after
    about: dict[str, dict[str, Any]] = {}   # one event per kind, shared by every peer

    def event(kind: str) -> dict[str, Any]:
        env = about.get(kind)
        if env is None:
            env = about[kind] = presence_event(kind, session)
        return env

    for peer_id in peers:
        peer = registry.by_id[peer_id]
        shared_before = not peer.groups.keys().isdisjoint(before)
        shared_after = not peer.groups.keys().isdisjoint(after)
        was, now = shared_before, shared_after
        if peer_id in watchers:   # invocation control sees into owned subgroups, one way
            was = was or registry.sees_into(peer, before)
            now = now or registry.sees_into(peer, after)
        if now and not was:
            out.append(Send(peer.identity, event("session_joined")))
            if shared_after and not connecting:
                out.append(Send(session.identity, presence_event("session_joined", peer)))
        elif was and not now:
            out.append(Send(peer.identity, event("session_left")))
            if shared_before and not departing:
                out.append(Send(session.identity, presence_event("session_left", peer)))
        elif was and now and groups_changed:
            out.append(Send(peer.identity, event("presence_update")))
    for group in sorted(after - before):
        out.append(Publish(group, presence_event("session_joined", session, group=group)))
    for group in sorted(before - after):
        out.append(Publish(group, presence_event("session_left", session, group=group)))
    if groups_changed:
        # The groups it stayed in see its membership set change, as their members do.
        for group in sorted(before & after):
            out.append(Publish(group, presence_event("presence_update", session, group=group)))


def status_changed(registry: Registry, session: Session, out: list[Command]) -> None:
    """Tell every session that can see ``session`` about its new status."""
    env = presence_event("presence_update", session)
    for peer_id in registry.neighbours(session):
        out.append(Send(registry.by_id[peer_id].identity, env))
    for group in session.groups:
        out.append(Publish(group, presence_event("presence_update", session, group=group)))
