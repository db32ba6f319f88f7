"""Which broker owns each workflow run, and runs changing hands when a broker dies.

A run belongs to exactly one broker: the one its host registered it on, or the one
that took it over when its broker died. Only the owner holds the run in memory, so
only the owner queues for it, gives positions, enforces its caps, binds its stages and
hands over its sticky entries; every other broker knows only *who* owns it
(``Cluster.run_owners``, from the ``runs`` of each link hello and ``link_runs``).

* A ``workflow:`` send, pipelined send or ask from a session on another broker is
  forwarded to the owner (:mod:`broker.core.cluster.forwarding`), whether or not the run's host
  is connected: a dormant run queues there.
* The hello of a stage session (or of a stage's subagent) that reaches another broker
  is refused ``run_elsewhere`` with the owner's endpoint and CURVE key
  (:func:`check_here`); the client says hello there instead (``client.transport``).
  A host operation (``register_run``, ``stage_state``, ``end_run``, ...) there is
  forwarded to the owner (:mod:`broker.core.cluster.placement`), where the
  host is a mirror that hosts the run (:func:`broker.core.workflow.stage_binding.host_returned`).
* The owner tells the others the subagents of its dormant runs
  (:func:`held_subagents`), so a send to one from any broker is forwarded to it and
  held there (:func:`holder_of`).
* When a broker is gone, its runs are *orphans*. The broker its run's host (or a
  stage) fails over to asks the store to move them to itself (``AdoptRuns``), so runs
  follow their clients; past the grace (``Limits.adopt_grace_s``) any broker asks. The store gives
  each run to exactly one asker, which loads it (:func:`take`) with its sticky
  entries and tells the others; a request for an orphan meanwhile waits for that
  (:func:`hold`) and is then handled again, here or forwarded to the adopter. The run
  then behaves as after a restart of its broker: its host holds a fresh lease.
* At start a broker takes the runs no live broker owns (:meth:`broker.store.Store.load`).

Who is alive, and so who may take a run, is the database's word alone: a broker is
dead when its lease row has ended by the database's clock (or it said ``link_bye``),
never because its link went quiet (:mod:`broker.core.cluster.links`). Every run has an
*epoch*, bumped by the store each time the run changes owner (an adoption, a take at
start), and every write this broker makes for a run names it (see
:meth:`broker.core.kernel.state.State.persist`): the store applies it only while the
run is still this broker's at that epoch. So a broker that lost a run can never write
to it, and a write the store fenced out (:func:`depose`) means exactly that: the run
leaves this broker's memory, its stage sessions here say hello again (and are sent to
the run's broker), and requests for it are refused ``run_moving`` until the new
owner's word comes. A broker that cannot renew its lease stops acting as owner before
the lease can end (:func:`lapse`, called by the engine), and takes its runs back,
through the same compare-and-set as an adoption, once a renewal commits again
(:func:`regained`): whatever another broker took meanwhile stays that broker's.

A request for a run this broker's adoption did not get (another broker took it first)
waits again, for that broker's word over its link, or for one more adoption after
:data:`ADOPT_RETRY_S`; only then is it handled as for an unknown run. Host operations
wait like sends (:mod:`broker.core.cluster.placement` parks both).

Invariants: a run id is in at most one of ``state.runs``, ``Cluster.run_owners`` and
the orphans; every run this broker persists carries its id as the owner
(:meth:`broker.core.runs.run_tree.Run.saved`); an adoption
that fails (the store unavailable) is asked again until it succeeds.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from schemas.errors import BusError
from schemas.limits import ADOPT_RETRY_S

from broker.core.cluster.peers import Peer
from broker.core.sessions.connect import disconnect
from broker.core.workflow.hosting import forget
from broker.core.kernel.commands import AdoptRuns
from broker.core.runs.paths import parse_path, path_run  # noqa: F401  (path_run: callers name it here)
from broker.core.kernel.records import Snapshot, StickyDelivery
from broker.core.runs.run_tree import Run, Subagent
from broker.core.kernel.state import State
from broker.core.workflow.sticky_queue import entry_from_row

MAX_PARKED = 1024        # requests waiting for one dead broker's runs; then run_moving
MOVING_S = 30.0          # how long a run this broker lost is refused run_moving, at most,
                         # while the new owner's word has not come
MAX_SUBAGENTS_TOLD = 1024   # subagents of one dormant run kept from another broker's word


@dataclass(slots=True)
class Orphans:
    """The runs of a dead broker, not adopted yet: run id -> its host's id (if known)."""

    adopt_at: float
    hosts: dict[str, str | None]
    asked_at: float | None = None
    parked: list = field(default_factory=list)    # (identity, envelope) waiting for them
    # Runs an adoption here did not get: another broker took them (its word is on its
    # way) or they ended. Requests for them wait for that word, one retry at most.
    missed: bool = False


def owner(state: State, run_id: str) -> Peer | None:
    """The live broker that owns ``run_id``, when it is not this one."""
    if run_id in state.runs:
        return None
    peer = state.cluster.peers.get(state.cluster.run_owners.get(run_id, ""))
    return peer if peer is not None and not peer.gone else None


def run_broker(state: State, run_id: str) -> str | None:
    """The other broker run ``run_id`` belongs to: its owner, or for a run no broker
    owns (ended), the broker of its last host while that host is open."""
    if run_id in state.runs:
        return None
    peer = owner(state, run_id)
    if peer is not None:
        return peer.broker_id
    host = state.registry.by_id.get(state.cluster.run_hosts.get(run_id, ""))
    return host.broker if host is not None else None


def check_here(state: State, run_id: object) -> None:
    """Raises BusError(run_elsewhere) when another live broker owns ``run_id``."""
    if run_id.__class__ is not str:
        return
    peer = owner(state, run_id)
    if peer is not None:
        raise BusError("run_elsewhere", run_id=run_id, endpoint=peer.endpoint,
                       server_key=peer.curve_public or None)


def registered(state: State, run_id: str) -> None:
    """``run_id`` is this broker's now (registered or taken): the others hear of it."""
    state.cluster.run_owners.pop(run_id, None)
    state.cluster.runs_changed[run_id] = True


def ended(state: State, run_id: str) -> None:
    state.cluster.runs_changed[run_id] = False


def held_subagents(state: State, run_ids) -> dict[str, list]:
    """What the others need to forward sends to the subagents of this broker's dormant
    runs among ``run_ids`` (sends to them are held here: broker.core.workflow.held_sends)."""
    found = {}
    for run_id in run_ids:
        run = state.runs.get(run_id)
        if run is not None and run.dormant and run.subagents:
            found[run_id] = [sub.record() for sub in run.subagents.values()]
    return found


def holder_of(state: State, sender, to: str) -> str | None:
    """The broker holding sends for the dormant-run subagent ``to`` names, as its
    broker said (a name, Atomic id or old id sharing a group with ``sender``)."""
    groups = set(sender.groups)
    for run_id, subs in state.cluster.foreign_subagents.items():
        for record in subs:
            sub = Subagent.from_record(record)
            if sub.named(to) and not groups.isdisjoint(sub.groups):
                return state.cluster.run_owners.get(run_id)
    return None


def told(state: State, peer: Peer, owned: list, dropped: list,
         subagents: dict | None = None) -> list:
    """``peer`` says it owns the runs ``owned`` (``subagents``: those of the dormant
    ones) and no longer owns ``dropped``. Returns the requests that waited for those
    runs, to handle again."""
    owners = state.cluster.run_owners
    foreign = state.cluster.foreign_subagents
    for run_id in list(owned) + list(dropped):
        foreign.pop(run_id, None)
    for run_id, subs in (subagents or {}).items():
        if run_id in owned and isinstance(subs, list) and \
                all(isinstance(r, dict) and isinstance(r.get("id"), str) for r in subs):
            foreign[run_id] = subs[:MAX_SUBAGENTS_TOLD]
    again: list = []
    alive = state.cluster.orphans.pop(peer.broker_id, None)   # it speaks: not dead
    if alive is not None:
        again += alive.parked
    for orphans in state.cluster.orphans.values():
        if any(orphans.hosts.pop(r, False) is not False for r in owned if r.__class__ is str):
            again += orphans.parked                   # adopted by ``peer``: ask there
            orphans.parked = []
    for run_id in dropped:
        if run_id.__class__ is str and owners.get(run_id) == peer.broker_id:
            del owners[run_id]
            state.cluster.run_hosts.pop(run_id, None)
    for run_id in owned:
        if run_id.__class__ is str and run_id not in state.runs:
            owners[run_id] = peer.broker_id
            state.cluster.moving.pop(run_id, None)
    return again


def peer_gone(state: State, peer: Peer, now: float) -> None:
    """``peer`` died or stopped (called before its mirrors leave): its runs are
    orphans, adopted by the first broker their host or a stage reaches, or after
    :attr:`Limits.adopt_grace_s` by any (the store decides)."""
    owners = state.cluster.run_owners
    runs = [r for r, b in owners.items() if b == peer.broker_id]
    for run_id in runs:
        del owners[run_id]
        state.cluster.foreign_subagents.pop(run_id, None)
    if peer.broker_id in state.cluster.orphans:
        return
    hosts = {run_id: state.cluster.run_hosts.pop(run_id, None) for run_id in runs}
    # A host's id, not its mirror's: the same id once the client is on this broker.
    orphans = Orphans(now + state.limits.adopt_grace_s, hosts)
    state.cluster.orphans[peer.broker_id] = orphans
    if _host_here(state, orphans):
        # The host failed over here before the dead broker's lease ended: ask now.
        _ask(state, peer.broker_id, orphans, now)


def _host_here(state: State, orphans: "Orphans") -> bool:
    by_id = state.registry.by_id
    return any((session := by_id.get(host)) is not None and session.broker is None
               for host in orphans.hosts.values() if host is not None)


def orphaned(state: State, run_id: object) -> bool:
    """Whether ``run_id`` is a dead broker's run that nobody adopted yet, or one this
    broker lost (deposed, or its lease lapsed) whose new owner has not spoken yet."""
    return run_id in state.cluster.moving or \
        any(run_id in orphans.hosts for orphans in state.cluster.orphans.values())


def hold(state: State, run_id: object, now: float, identity: bytes, env: dict) -> None:
    """A request (``env`` from ``identity``) needs the orphan ``run_id``
    (:func:`broker.core.cluster.placement.place` said so): its adoption is asked now and
    the request waits for it, to be handled again once the run has an owner (here or
    elsewhere).

    Raises BusError(run_moving) when too many requests wait already, or at once for a
    run this broker lost or holds no lease for: nothing is queued into a copy."""
    own = state.cluster.orphans.get(state.broker_id)
    if run_id in state.cluster.moving or (own is not None and run_id in own.hosts):
        raise BusError("run_moving", run_id=run_id, endpoint=state.cluster.endpoint)
    for dead, orphans in state.cluster.orphans.items():
        if run_id in orphans.hosts:
            # Runs follow their host: for a run whose host is gone from here (it fails
            # over to some broker), a broker it is not on waits out the grace.
            if now >= orphans.adopt_at or orphans.hosts[run_id] is None or \
                    _host_here(state, orphans):
                _ask(state, dead, orphans, now)
            if env.get("k") == "hello":
                # A hello is not parked: its client would wait on it, silent, and greet
                # again elsewhere, and each parked copy would open a session after the
                # adoption. It is told to say hello again in a moment.
                raise BusError("run_moving", run_id=run_id, endpoint=state.cluster.endpoint)
            if len(orphans.parked) >= MAX_PARKED:
                raise BusError("run_moving", run_id=run_id, endpoint=state.cluster.endpoint)
            orphans.parked.append((identity, env))
            state.stats["runs.parked"] += 1
            return


def arrived(state: State, session_id: str, now: float) -> None:
    """A session opened here: if it hosted an orphan run, the orphans are adopted now,
    so runs follow their host to the broker it failed over to."""
    for dead, orphans in state.cluster.orphans.items():
        if session_id in orphans.hosts.values():
            _ask(state, dead, orphans, now)


def tick(state: State, now: float) -> None:
    """Orphans past their grace are adopted; a failed adoption is asked again; runs
    lost long ago with no word of their new owner are unknown runs again."""
    for dead, orphans in state.cluster.orphans.items():
        if now >= orphans.adopt_at:
            _ask(state, dead, orphans, now)
    moving = state.cluster.moving
    for run_id in [r for r, until in moving.items() if now >= until]:
        del moving[run_id]


def depose(state: State, run_ids, now: float) -> None:
    """The store fenced out this broker's writes for ``run_ids`` (another broker took
    them: their owner or epoch changed): they leave this broker (see the module
    docstring), and requests for them are refused ``run_moving`` until the new owner
    speaks."""
    dropped = _drop(state, run_ids, now)
    for run_id in dropped:
        state.cluster.moving[run_id] = now + MOVING_S
    if dropped:
        state.stats["runs.deposed"] += len(dropped)
        state.note("runs_deposed", runs=sorted(dropped))


def lapse(state: State, now: float) -> None:
    """This broker's lease may end before it can renew it (a renewal failed, or the
    process was paused): it stops acting as the owner of its runs now, before another
    broker may take them. They wait, as this broker's own orphans, for a renewal to
    commit (:func:`regained`); requests for them are refused ``run_moving`` meanwhile."""
    hosts = {run_id: run.host_id or run.last_host_id for run_id, run in state.runs.items()}
    _drop(state, list(hosts), now)
    if hosts:
        # Not asked for until the lease is renewed (regained sets the time).
        state.cluster.orphans[state.broker_id] = Orphans(float("inf"), hosts)
    state.stats["lease.lapsed"] += 1
    state.note("lease_lapsed", runs=sorted(hosts))


def regained(state: State, now: float) -> None:
    """A lease renewal committed after a lapse: this broker's runs that nobody took
    meanwhile are taken back (the store's compare-and-set, under a new epoch)."""
    orphans = state.cluster.orphans.get(state.broker_id)
    if orphans is not None:
        orphans.adopt_at = now
        _ask(state, state.broker_id, orphans, now)
    state.note("lease_regained")


def _drop(state: State, run_ids, now: float) -> list[str]:
    """Take ``run_ids`` out of this broker's memory without a write: their entries
    stay as stored, for whoever owns them; their stage sessions here are let go (their
    clients say hello again and are sent to the run's broker)."""
    dropped = []
    for run_id in run_ids:
        run = state.runs.get(run_id)
        if run is None:
            continue
        state.sticky.drop_run(run_id)
        forget(state, run)
        # Not told to the others as ended: for them it is this broker's until its
        # lease ends (then an orphan) or the run's new owner says so. An "ended" word
        # made them answer unknown_run, and a stage's hello there gave up.
        state.cluster.runs_changed.pop(run_id, None)
        dropped.append(run_id)
        for session in [s for s in state.registry.by_id.values()
                        if s.broker is None and s.binding is not None
                        and s.binding.run_id == run_id]:
            disconnect(state, session, "run moved", now)
    return dropped


def _ask(state: State, dead: str, orphans: "Orphans", now: float) -> None:
    if orphans.asked_at is not None and now - orphans.asked_at < ADOPT_RETRY_S:
        return                  # asked already; its answer is coming
    orphans.asked_at = now
    state.out.append(AdoptRuns(dead))


def adopted(state: State, dead: str, snapshot: Snapshot | None,
            now: float) -> tuple[list[Run], list]:
    """The store's answer to ``AdoptRuns(dead)`` (None: it failed, and is asked again
    in ADOPT_RETRY_S; the requests waiting go on waiting). Returns the runs taken and
    the requests to handle again."""
    orphans = state.cluster.orphans.get(dead)
    if snapshot is None:
        if orphans is not None:
            orphans.adopt_at = now + ADOPT_RETRY_S
        return [], []
    state.cluster.orphans.pop(dead, None)
    runs = take(state, snapshot)
    state.stats["runs.adopted"] += len(runs)
    if runs:
        state.note("runs_adopted", dead=dead, runs=sorted(run.run_id for run in runs))
    if orphans is None:
        return runs, []
    left = {run_id: host for run_id, host in orphans.hosts.items()
            if run_id not in state.runs and run_id not in state.cluster.run_owners}
    if left and not orphans.missed:
        # Their requests, handled again below, wait here again (see hold) until the
        # adopter's link says it owns them, or one more adoption finds them gone.
        state.cluster.orphans[dead] = Orphans(now + ADOPT_RETRY_S, left, asked_at=now,
                                              missed=True)
        state.stats["runs.adopted_elsewhere"] += len(left)
    return runs, orphans.parked


def take(state: State, snapshot: Snapshot) -> list[Run]:
    """Load the runs of ``snapshot`` (at start, or adopted) with their sticky entries
    and delivery states; their hosts, if not connected here, hold a fresh lease."""
    wall = state.wall
    runs = []
    for saved_run in snapshot.runs:
        run = Run.from_record(saved_run.record)
        run.epoch = saved_run.epoch
        state.runs[run.run_id] = run
        state.cluster.moving.pop(run.run_id, None)
        registered(state, run.run_id)
        runs.append(run)
        if run.last_host_id:
            state.hosted_before.setdefault(run.last_host_id, set()).add(run.run_id)
        if not run.dormant:
            state.leased.add(run.run_id)
            if run.lease_until is None and wall:
                run.lease_until = wall + state.limits.host_lease_s
    by_seq = {}
    for row in snapshot.sticky:
        try:
            target = parse_path(row.entry.target)
        except BusError:
            continue
        entry = entry_from_row(row, target)
        state.sticky.add(entry)
        by_seq[entry.seq] = entry
    for delivery in snapshot.deliveries:
        _delivered(by_seq, delivery)
    for entry in by_seq.values():
        # A sender retrying a queued send after the restart gets the same answer.
        state.ids.record(entry.message_id, entry.sender_id, entry.fingerprint(),
                         entry.answer())
    for run_id, broker_id in snapshot.owners.items():
        if run_id not in state.runs:
            state.cluster.run_owners[run_id] = broker_id
    return runs


def _delivered(by_seq: dict, delivery: StickyDelivery) -> None:
    entry = by_seq.get(delivery.seq)
    if entry is not None:
        entry.deliveries[(delivery.stage, delivery.transcript)] = delivery.state
