"""The links between brokers sharing one database: who they are, what they say.

Theory of operation. The shell reads the live lease rows of the other brokers on a
timer and hands them to :func:`brokers_read`. For each broker not known yet this
broker opens a link (a DEALER to that broker's ROUTER: ``LinkOpen``) and says
``link`` with a proof (an HMAC of its id under the database's grant key, which only
brokers on that database hold) and the rows of every session it holds; after that it
sends ``link_presence`` for every change of its sessions (:func:`flush`, once per
engine input) and ``link_hb`` every third of its liveness window (at least every
:data:`~schemas.limits.HEARTBEAT_S`; brokers on one database share the window). Each broker receives
the other's link on its own ROUTER (:func:`receive`), so traffic flows one way on
each connection and both directions keep their order.

With CURVE (``Cluster.curve_public`` set) a link is a CURVE client that proves this
broker's key and checks the other's, the key its lease row names; the shell's
authenticator allows the keys of the rows it reads. A broker with CURVE and one
without do not link (:func:`_unlinkable`): each notes the other once in
``Cluster.unlinked``, which ``status`` shows and the shell logs. A link whose
handshake the other broker refused (it had not read this broker's row yet) is opened
again (:func:`link_refused`). A ``link`` from a broker whose row this one has not read
yet is kept and the rows read at once (:func:`_hello`), so a newcomer links at its first
hello; and a peer that has not said ``link`` to this broker, or has gone quiet, is sent
this broker's ``link`` and a ``link_reset`` (which asks for its own) again, with a
backoff of 1 s doubling to :data:`HELLO_BACKOFF_MAX_S` (:func:`tick`): a link that holds
one way only heals by itself.

A broker is *gone* only when the database says so: its lease row is no longer live by
the database's clock, or it said ``link_bye`` (its row is released as it stops). Its
mirrors leave then (sessions here hear ``session_left``), requests waiting on it fail
with ``peer_disconnected`` (:mod:`broker.core.cluster.forwarding`), and its runs are
orphans (:mod:`broker.core.cluster.ownership`). A link silent for the liveness window
is only *unreachable* (``Peer.silent``): requests waiting on it, and new ones for its
sessions and runs, fail at once with ``broker_unreachable``; its sessions stay
listed, its runs stay its own, and nobody adopts them. When it speaks again the two
say ``link`` to each other again, so both have the whole picture of the other.

A ``list`` of a session here that is a member of another broker's run asks that
broker for the run's rows (``link_list``, :mod:`broker.core.cluster.remote_listing`).

Outbound, :func:`route` is the last pass over the commands: an envelope for a
mirror is relayed to its broker (``relay``), except presence events, which every
broker computes for its own sessions. A relayed ``output`` (a respond to a channel
whose session is here) is also published on this broker's PUB; invoke jobs for a
session here arrive as ``link_jobs`` (:mod:`broker.core.agents.invoke_actions`).
"""

from __future__ import annotations

import hmac
from typing import Any

from schemas import envelopes, kinds
from schemas.errors import BusError
from schemas.limits import heartbeat_s
from schemas.names import PRESENCE_EVENTS

from broker.core.cluster import (remote_conversations as conversation_mirrors, forwarding, mirrors,
                                 ownership, remote_guard, remote_listing, waiters)
from broker.core.agents import conversations, invoke_actions as invoking, respond_action as respond
from broker.core.messaging import receipts
from broker.core.messaging.ask_cycles import from_wire
from broker.core.messaging import guard
from broker.core.cluster.peers import Peer, link_row, mirror_of
from broker.core.kernel.commands import LinkClose, LinkOpen, LinkSend, ReadBrokers, Send
from broker.core.kernel.records import LeaseRenewed
from broker.core.sessions.connect import disconnect
from broker.core.sessions.grants import link_proof
from broker.core.agents.invocation_table import Job
from broker.core.kernel.state import State

_PRESENCE = frozenset(PRESENCE_EVENTS)
_FORWARDED = frozenset({"call", "sends", "supervisor", "workflow"})   # what cluster.placement may forward
HELLO_BACKOFF_MAX_S = 8.0    # a peer that does not answer this broker's link is told again
EARLY_HELLOS = 64            # links kept from brokers whose rows were not read yet


def is_hello(env: Any) -> bool:
    return env.__class__ is dict and env.get("k") == "link"


# -- the shell's inputs --------------------------------------------------------------

def brokers_read(state: State, rows: list[LeaseRenewed], now: float) -> None:
    """The other brokers' live lease rows, as just read from the store."""
    cluster = state.cluster
    seen = set()
    for row in rows:
        broker_id, endpoint, until = row.broker_id, row.endpoint, row.until
        seen.add(broker_id)
        if broker_id in cluster.departed or broker_id in cluster.unlinked:
            continue
        peer = cluster.peers.get(broker_id)
        if peer is not None:
            peer.lease_until = max(peer.lease_until, until)
            continue
        why = _unlinkable(cluster.curve_public, row)
        if why is None:
            _meet(state, broker_id, endpoint, until, now, row.curve_public)
            early = cluster.early_hellos.pop(broker_id, None)
            if early is not None:
                _hello(state, early[0], early[1], now)
        else:
            cluster.unlinked[broker_id] = why
            state.stats["brokers.unlinked.curve_mismatch"] += 1
    # The store read only the rows live by its clock: the others' leases ended.
    for peer in [p for b, p in cluster.peers.items() if b not in seen]:
        _part(state, peer, "lease ended", now)
    for broker_id in [b for b in cluster.unlinked if b not in seen]:
        del cluster.unlinked[broker_id]
    for broker_id in [b for b in cluster.early_hellos if b not in seen]:
        del cluster.early_hellos[broker_id]


def link_refused(state: State, broker_id: str) -> None:
    """Broker ``broker_id`` refused the handshake of this broker's link to it (its
    authenticator had not allowed this broker's key yet: it reads the lease rows once
    a second). Nothing sent on that link arrived: requests waiting on it fail, and the
    link is opened again with a new hello."""
    peer = state.cluster.peers.get(broker_id)
    if peer is None:
        return
    state.stats["link.handshake_refused"] += 1
    forwarding.broker_gone(state, peer, again=False)
    state.out.append(LinkOpen(peer.broker_id, peer.endpoint, peer.curve_public))
    _say_hello(state, peer)


def receive(state: State, identity: bytes, envs: list, now: float) -> None:
    """Envelopes from another broker's link (``identity`` said ``link``, or this is it)."""
    cluster = state.cluster
    for env in envs:
        try:
            kind = kinds.kind_of(env, kinds.LINK)
            kinds.check(env, kind, kinds.LINK)
            if kind == "link":
                _hello(state, identity, env, now)
                continue
            peer = cluster.peers.get(cluster.by_link.get(identity, ""))
            if peer is None:
                state.stats["link.unknown"] += 1
                continue
            peer.heard_at = now
            if peer.silent:
                _heard_again(state, peer, now)
            _LINK_HANDLERS[kind](state, peer, env, now)
        except BusError as error:
            state.stats[f"link.refused.{error.code}"] += 1
        except Exception as exc:  # a bug costs one envelope, never the broker
            state.stats["internal_error"] += 1
            state.internal_errors.append(exc)


def tick(state: State, now: float) -> None:
    """Heartbeats out; silent links are given up on."""
    cluster = state.cluster
    cutoff = now - state.limits.liveness_s
    for peer in cluster.linked():
        if not peer.silent and peer.heard_at < cutoff:
            _silent(state, peer, now)
        if (peer.silent or peer.identity is None) and now >= peer.hello_at:
            # It has not said link here, or went quiet: say ours, and ask for its own.
            peer.hello_every_s = min(max(peer.hello_every_s * 2, 1.0), HELLO_BACKOFF_MAX_S)
            peer.hello_at = now + peer.hello_every_s
            state.stats["link.hello_again"] += 1
            _say_hello(state, peer, reset=True)
    ownership.tick(state, now)
    if now >= cluster.next_heartbeat_at:
        cluster.next_heartbeat_at = now + heartbeat_s(state.limits.liveness_s)
        beat = envelopes.link_heartbeat(state.wall + cluster.lease_s)
        for peer in cluster.linked():
            state.out.append(LinkSend(peer.broker_id, [beat]))


def stopping(state: State) -> None:
    """This broker is stopping: every other broker hears it now."""
    for peer in state.cluster.linked():
        state.out.append(LinkSend(peer.broker_id, [envelopes.link_bye()]))


def flush(state: State) -> None:
    """Tell the other brokers what changed among this broker's sessions and runs."""
    cluster = state.cluster
    runs, cluster.runs_changed = cluster.runs_changed, {}
    if runs and cluster.peers:
        owned = [r for r, still in runs.items() if still]
        env = envelopes.link_runs(owned, [r for r, still in runs.items() if not still],
                                  ownership.held_subagents(state, owned))
        for peer in cluster.linked():
            state.out.append(LinkSend(peer.broker_id, [env]))
    changed, cluster.changed = cluster.changed, {}
    if not changed or not cluster.peers:
        return
    rows, gone = [], []
    for session_id, session in changed.items():
        if state.registry.by_id.get(session_id) is session:
            rows.append(_row(state, session))
        else:
            gone.append(session_id)
    env = envelopes.link_presence(rows, gone)
    for peer in cluster.linked():
        state.out.append(LinkSend(peer.broker_id, [env]))


def route(state: State, commands: list) -> list:
    """The final pass: envelopes for mirrors become relays to their brokers."""
    out: list = []
    relays: dict[str, list] = {}
    for command in commands:
        if command.__class__ is Send and command.identity[:2] == b"\x00@":
            where = mirror_of(command.identity)
            env = command.env
            if where is None or env.get("k") == "event" and env.get("event") in _PRESENCE:
                continue
            box = relays.get(where[0])
            if box is None:
                box = relays[where[0]] = []
            box.append(envelopes.relay(where[1], env))
        else:
            out.append(command)
    for broker_id, envs in relays.items():
        peer = state.cluster.peers.get(broker_id)
        if peer is not None and not peer.gone:
            out.append(LinkSend(broker_id, envs))
    return out


# -- the link kinds --------------------------------------------------------------------

def _hello(state: State, identity: bytes, env: dict, now: float) -> None:
    broker_id = env["broker"]
    if broker_id == state.broker_id or broker_id in state.cluster.departed or \
            broker_id in state.cluster.unlinked or not hmac.compare_digest(
            env["proof"], link_proof(state.grant_key, broker_id)):
        raise BusError("invalid_grant")
    cluster = state.cluster
    peer = cluster.peers.get(broker_id)
    if peer is None and cluster.curve_public:
        # A CURVE link is opened only with the key the other's row names: its row
        # is read now, and its link taken then (brokers_read). A newcomer says link
        # before this broker's next periodic read of the rows.
        if broker_id in cluster.early_hellos or len(cluster.early_hellos) < EARLY_HELLOS:
            cluster.early_hellos[broker_id] = (identity, env)
        state.stats["link.hello_early"] += 1
        state.out.append(ReadBrokers())
        return
    was_silent = peer is not None and peer.silent
    if peer is None:
        peer = _meet(state, broker_id, env["endpoint"], env["until"], now)
    elif was_silent:
        _heard_again(state, peer, now)          # reads the jobs again itself
    if peer.identity is not None and peer.identity != identity:
        cluster.by_link.pop(peer.identity, None)
    if peer.identity != identity:
        state.note("broker_linked", peer=broker_id, endpoint=peer.endpoint)
        # A link made anew (a broker met again after it was taken for gone, or one
        # restarted): jobs it committed for conversations here while unlinked were
        # sent over no link.
        if not was_silent:
            conversations.read_jobs_again(state)
    peer.identity = identity
    peer.heard_at = now
    peer.hello_every_s = 0.0
    peer.lease_until = max(peer.lease_until, env["until"])
    cluster.by_link[identity] = broker_id
    # The whole picture: mirrors it no longer holds leave, the others are (re)made.
    rows = env["sessions"]
    held = {row.get("id") for row in rows if row.__class__ is dict}
    mirrors_gone = [sid for sid in peer.mirrors if sid not in held]
    _presence(state, peer, {"sessions": rows, "gone": mirrors_gone}, now)
    runs = env.get("runs") or []
    _told(state, peer, runs, [r for r, b in cluster.run_owners.items()
                              if b == broker_id and r not in set(runs)],
          env.get("subagents"), now)


def _runs(state: State, peer: Peer, env: dict, now: float) -> None:
    _told(state, peer, env["owned"], env["dropped"], env.get("subagents"), now)


def _told(state: State, peer: Peer, owned: list, dropped: list, subagents: dict | None,
          now: float) -> None:
    for identity, request in ownership.told(state, peer, owned, dropped, subagents):
        state.hooks.handle(state, identity, request, now)   # waited for the run: it has an owner


def _presence(state: State, peer: Peer, env: dict, now: float) -> None:
    for session_id in env["gone"]:
        mirror = state.cluster.remote.get(session_id) if session_id.__class__ is str else None
        if mirror is not None and mirror.broker == peer.broker_id:
            disconnect(state, mirror, "left", now)
    for row in env["sessions"]:
        moved = mirrors.moved(state, peer, row)
        if moved is not None:
            # Its client reconnected to ``peer`` with its reclaim secret.
            state.stats["sessions.moved"] += 1
            disconnect(state, moved, "moved", now)
        mirrors.upsert(state, peer, row, now)
        if state.receipts.parked and row.__class__ is dict:
            mirror = state.registry.by_id.get(row.get("id"))
            if mirror is not None and mirror.broker == peer.broker_id:
                # Its client took its id back there: what it did not have goes too.
                receipts.moved_to(state, mirror.id, peer.broker_id)


def _forward(state: State, peer: Peer, env: dict, now: float) -> None:
    """A request of a session on ``peer`` for one held here: handled as if local."""
    session = state.cluster.remote.get(env["from"])
    if session is None or session.broker != peer.broker_id or \
            env["env"].get("k") not in _FORWARDED:
        state.stats["link.forward_unknown_sender"] += 1
        return
    # An ask brings who waits on its asker there (broker.core.cluster.waiters).
    state.asks.carried = from_wire(env) if "waitedBy" in env else ()
    try:
        state.hooks.handle(state, session.identity, env["env"], now)
    finally:
        state.asks.carried = ()


def _relay(state: State, peer: Peer, env: dict, now: float) -> None:
    """An envelope from ``peer`` for a session held here."""
    session = state.registry.by_id.get(env["to"])
    if session is None or session.broker is not None:
        state.stats["link.relay_unknown_target"] += 1
        return
    inner = env["env"]
    kind = inner.get("k")
    if kind == "msg" and isinstance(inner.get("id"), str):
        if inner.get("expectsReply") is False:
            state.recent_for(session)[inner["id"]] = inner.get("from")
        receipts.relayed(state, session, inner)
    elif kind == "msgs" and isinstance(inner.get("ids"), list):
        state.recent_for(session).put_all(inner["ids"], value=inner.get("from"))
        receipts.relayed(state, session, inner)
    elif kind == "event" and inner.get("event") == "output":
        respond.relayed(state, session, inner)
    else:
        forwarding.answered(state, session, inner)
    if session.guard is not None and inner.get("from").__class__ is str and \
            (kind in ("msg", "msgs") or (kind == "result" and "replyId" in inner)):
        # A message or an ask's reply from another broker's session: its guard counts it.
        guard.arrived(state, session, inner["from"], now)
    state.out.append(Send(session.identity, inner))


def _jobs(state: State, peer: Peer, env: dict, now: float) -> None:
    jobs = [Job.from_row(row) for row in env["jobs"]]
    state.stats["link.bad_job"] += jobs.count(None)
    invoking.arrived(state, [job for job in jobs if job is not None], now)


def _heartbeat(state: State, peer: Peer, env: dict, now: float) -> None:
    peer.lease_until = max(peer.lease_until, env["until"])


def _reset(state: State, peer: Peer, env: dict, now: float) -> None:
    _say_hello(state, peer)


def _bye(state: State, peer: Peer, env: dict, now: float) -> None:
    state.cluster.departed.add(peer.broker_id)
    _part(state, peer, "stopped", now)


_LINK_HANDLERS = {
    "link_presence": _presence,
    "link_runs": _runs,
    "forward": _forward,
    "relay": _relay,
    "link_jobs": _jobs,
    "link_waiters": waiters.told_here,
    "link_human_input": remote_guard.told,
    "link_list": remote_listing.query,
    "link_listed": remote_listing.listed,
    "link_hb": _heartbeat,
    "link_reset": _reset,
    "link_bye": _bye,
}


# -- internals -----------------------------------------------------------------------

def _unlinkable(own_key: str, row: LeaseRenewed) -> str | None:
    """Why this broker (CURVE key ``own_key``, "" without CURVE) cannot link to the
    broker of lease ``row``, in words a person can act on; None when it can."""
    if bool(row.curve_public) == bool(own_key):
        return None
    where = f"broker {row.broker_id} ({row.endpoint}) on this database"
    if own_key:
        return (f"{where} runs without CURVE and this broker with it: they do not link; "
                "start every broker on one database with --curve, or none")
    return (f"{where} runs with CURVE and this broker without it: they do not link; "
            "start every broker on one database with --curve, or none")


def _meet(state: State, broker_id: str, endpoint: str, until: float, now: float,
          curve_public: str = "") -> Peer:
    for old in [p for p in state.cluster.peers.values() if p.endpoint == endpoint]:
        # Its successor serves the endpoint now (two live brokers cannot share one).
        _part(state, old, "replaced", now)
    # Heard of now: one that never links back is as silent as one that stopped.
    peer = state.cluster.peers[broker_id] = Peer(broker_id, endpoint, until, curve_public,
                                                 heard_at=now, hello_at=now + 1.0)
    state.cluster.shared = True
    state.out.append(LinkOpen(broker_id, endpoint, curve_public))
    _say_hello(state, peer)
    return peer


def _say_hello(state: State, peer: Peer, reset: bool = False) -> None:
    """Tell ``peer`` the whole picture (``link``); ``reset``: and ask for its own."""
    cluster = state.cluster
    rows = [_row(state, s) for s in state.registry.by_id.values()
            if s.broker is None and not s.is_control]
    # Changes not yet flushed are in the rows already.
    envs = [envelopes.link(
        state.broker_id, link_proof(state.grant_key, state.broker_id), cluster.endpoint,
        state.wall + cluster.lease_s, rows, sorted(state.runs),
        ownership.held_subagents(state, state.runs))]
    if reset:
        envs.append(envelopes.link_reset())
    state.out.append(LinkSend(peer.broker_id, envs))


def _silent(state: State, peer: Peer, now: float) -> None:
    """``peer``'s link has been quiet for the liveness window. Its lease, not its link,
    says whether it lives: it is only unreachable from here. Requests waiting on it fail
    now with ``broker_unreachable`` (it may have handled them: a resend with the same
    message id is answered from what it kept), and new ones fail at once until it
    speaks again (:func:`broker.core.cluster.forwarding.hand`); nothing is adopted or
    forgotten."""
    peer.silent = True
    peer.hello_at = now
    state.stats["brokers.unreachable"] += 1
    state.note("broker_unreachable", peer=peer.broker_id, sessions=len(peer.mirrors))
    forwarding.broker_gone(state, peer, again=False, code="broker_unreachable")
    remote_listing.broker_gone(state, peer)


def _heard_again(state: State, peer: Peer, now: float) -> None:
    """A quiet ``peer`` speaks again: each tells the other the whole picture anew, since
    what either said meanwhile may have been lost with the connection."""
    peer.silent = False
    peer.hello_every_s = 0.0
    state.stats["brokers.reachable_again"] += 1
    state.note("broker_reachable", peer=peer.broker_id)
    _say_hello(state, peer, reset=True)
    conversations.read_jobs_again(state)      # a link_jobs it sent may have been lost


def _part(state: State, peer: Peer, reason: str, now: float) -> None:
    """``peer`` is gone (its lease ended, or it stopped): its sessions leave, requests
    waiting on it fail or wait for its runs' adoption, its link closes."""
    cluster = state.cluster
    state.stats[f"brokers.gone.{reason.replace(' ', '_')}"] += 1
    state.note("broker_gone", peer=peer.broker_id, reason=reason, sessions=len(peer.mirrors))
    peer.gone = True
    ownership.peer_gone(state, peer, now)      # before its mirrors (hosts) leave
    for session_id in sorted(peer.mirrors):
        mirror = cluster.remote.get(session_id)
        if mirror is not None:
            disconnect(state, mirror, "broker gone", now)
    for identity, request in forwarding.broker_gone(state, peer):
        state.hooks.handle(state, identity, request, now)   # it waits for the run's adoption
    remote_listing.broker_gone(state, peer)
    if peer.identity is not None:
        cluster.by_link.pop(peer.identity, None)
    del cluster.peers[peer.broker_id]
    state.out.append(LinkClose(peer.broker_id))


def _row(state: State, session) -> dict[str, Any]:
    identity = state.identities.get(session.id)
    row = link_row(session, identity.token_hash if identity is not None else "",
                   sorted(state.hosted.get(session.id, ())))
    row.update(conversation_mirrors.link_fields(state, session))
    return row
