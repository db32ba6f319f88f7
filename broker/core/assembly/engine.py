"""The routing engine: envelopes, commits and clock ticks in, commands out.

Theory of operation
-------------------
The IO shell hands the engine every decoded envelope together with the routing
identity it arrived from and the current time (:meth:`Engine.receive_batch`), calls
:meth:`Engine.tick` when :meth:`Engine.next_deadline` passes, and reports durable
writes through :meth:`Engine.persisted` / :meth:`Engine.persist_failed`. Each call
returns the commands to execute, in order (:class:`~broker.core.kernel.commands.Send`,
``Publish``, ``Persist``). ``now`` is monotonic seconds (every deadline and liveness
check); ``wall`` is the wall clock, used only for times people read (``sentAt``,
``connectedAt``, persisted records).

Who handles what is the table in :mod:`broker.core.assembly.dispatch`; the state is
:class:`~broker.core.kernel.state.State`; the envelopes leave through the final pass of
:mod:`broker.core.kernel.outbox`.

Invariants:

* every request envelope with a usable id gets exactly one ``result`` (possibly
  deferred: an ask waiting for its reply, a send waiting for its commit), and a bad
  envelope without an id gets one error reply or is dropped and counted;
* the engine never performs IO, reads a clock or logs; it only counts (``stats``)
  and collects unexpected exceptions (``internal_errors``) for the shell to log.
"""

from __future__ import annotations

import secrets
import zlib
from typing import Any, Callable, Mapping

from schemas.agent_config import AgentSettings
from schemas.errors import BusError
from schemas.limits import LEASE_S, STATS_TOP_DEFAULT
from schemas.names import FAILED, QUEUED, STARTED

from broker.core.messaging import ask_actions as asking
from broker.core.sessions import backlog, connect, departures
from broker.core.workflow import hosting, stage_binding as stages
from broker.core.agents import invoke_actions as invoking
from broker.core.cluster import links, ownership, remote_listing
from broker.core.agents.registry import Conversation
from broker.core.kernel.commands import Answer, Command, RenewLease
from broker.core.agents.invocation_table import RESTARTED, RESTARTED_TEXT, Job
from broker.core.cluster.lease_clock import LeaseClock
from broker.core.kernel import inputs
from broker.core.assembly.dispatch import HOOKS, LIFECYCLE, handle
from broker.core.assembly.figures import ShellFigures, figures
from broker.core.kernel.outbox import render
from broker.core.kernel.records import (InvocationSaved, InvocationState, LeaseRenewed, Snapshot,
                                        StickyRow)
from broker.core.sessions.registry import Registry
from broker.core.sessions.identity_table import IdentityRecord
from broker.core.kernel.secret_ids import new_session_id, new_token
from broker.core.assembly.state import BrokerState
from broker.core.kernel.state import Limits, State, Ticket
from broker.core.workflow.sticky_queue import SEQ_TAG_BITS

SWEEP_INTERVAL_S = 0.5
# Sessions expired per sweep at most: a mass expiry is spread over several rounds so
# the shell reads the heartbeats of healthy sessions in between.
EXPIRE_PER_SWEEP = 64


class Engine:
    """All routing state of one broker, behind one entry point (:meth:`handle`). See the
    module docstring."""

    def __init__(self, *, broker_id: str = "broker", limits: Limits = Limits(),
                 identities: dict[str, IdentityRecord] | None = None,
                 new_id: Callable[[], str] = new_session_id,
                 new_token: Callable[[], str] = new_token,
                 warnings: list[str] | None = None, pub_endpoint: str | None = None,
                 endpoint: str = "", lease_s: float = LEASE_S, curve_public: str = "") -> None:
        self.state = BrokerState(broker_id, limits, new_id, new_token, grant_key=secrets.token_bytes(32),
                           warnings=list(warnings or ()), pub_endpoint=pub_endpoint)
        self.state.listeners = LIFECYCLE
        self.state.hooks = HOOKS
        self.state.cluster.endpoint = endpoint
        self.state.cluster.lease_s = lease_s
        self.state.cluster.curve_public = curve_public
        for session_id, record in (identities or {}).items():
            self.state.identities.restore(session_id, record)
        # Sticky entry numbers must not collide with another broker's on one database.
        self.state.sticky.tag = zlib.crc32(broker_id.encode()) & ((1 << SEQ_TAG_BITS) - 1)
        self._next_sweep_at = 0.0
        self.lease_clock = LeaseClock(lease_s)

    # -- what tests and the shell read -------------------------------------------------

    @property
    def registry(self) -> Registry:
        return self.state.registry

    @property
    def local_sessions(self) -> int:
        """Sessions connected to this broker (mirrors of other brokers' not counted)."""
        return len(self.state.registry) - len(self.state.cluster.remote)

    @property
    def stats(self):
        return self.state.stats

    @property
    def internal_errors(self) -> list[Exception]:
        return self.state.internal_errors

    @property
    def cluster(self):
        return self.state.cluster

    def take_notes(self) -> list[tuple[str, dict[str, Any]]]:
        """What happened that an operator reads (see State.note), oldest first; the
        shell logs them after each round."""
        notes, self.state.notes = self.state.notes, []
        return notes

    def figures(self, now: float, top: int = STATS_TOP_DEFAULT) -> dict[str, Any]:
        """What ``stats`` answers (the metrics endpoint's snapshot): fresh plain values."""
        return figures(self.state, now, top)

    # -- inputs --------------------------------------------------------------------------

    def shell_figures(self, shell: ShellFigures) -> None:
        """The shell's own figures (store, process), as of now: ``stats`` answers with
        the latest (see broker.core.assembly.figures)."""
        self.state.shell = shell

    def set_agents(self, settings: Mapping[str, AgentSettings]) -> None:
        """The per-agent settings in force (the shell reads them from the agents' config
        files at start and on SIGHUP); an agent not named has the defaults."""
        self.state.conversations.settings = dict(settings)

    def restore(self, snapshot: Snapshot, wall: float = 0.0) -> list[Command]:
        """Take back what the store kept: identities, runs, sticky entries, agents'
        conversations and invoke jobs. Returns the store writes this implies: a job
        that was started before the broker stopped is failed, never handed over again."""
        state = self.state
        state.wall = wall
        self._restore_agents(snapshot)
        if snapshot.grant_key:
            state.grant_key = snapshot.grant_key
        for saved in snapshot.identities:
            state.identities.restore(saved.session_id,
                                     IdentityRecord(saved.atomic_session_id, saved.token_hash))
        ownership.take(state, snapshot)
        return self._flush()

    def _restore_agents(self, snapshot: Snapshot) -> None:
        state = self.state
        for saved in snapshot.conversations:
            state.conversations.add(Conversation(saved.agent, saved.channel, True,
                                                 saved.last_active_at, saved.session_id))
        for saved in snapshot.invocations:
            if saved.state == QUEUED:
                state.invocations.add(Job.from_record(saved))
            elif saved.state == STARTED:
                state.stats[f"invocations.{RESTARTED}"] += 1
                state.persist(InvocationState(saved.id, FAILED, state.wall, RESTARTED_TEXT))

    def handle(self, event: inputs.Input) -> list[Command]:
        """The one entry point: handle one input from the shell (see
        :mod:`broker.core.kernel.inputs`); returns the commands to carry out. The
        methods below are the same inputs taken apart, kept for tests and tools.

        Before any input, a broker sharing its store checks its lease: one that may
        have run out (see :mod:`broker.core.cluster.lease_clock`) stops acting as the
        owner of its runs first."""
        now = getattr(event, "now", None)
        if now is not None and self.state.cluster.shared and self.lease_clock.lapses(now):
            ownership.lapse(self.state, now)
            # Resumed after a pause: clients silent past the window have failed over
            # and hold their ids elsewhere; their sessions here go before anything
            # else is served (or told to the other brokers as live).
            self._expire_silent(now, None)
        return _INPUTS[event.__class__](self, event)

    def receive(self, identity: bytes, env: Any, now: float, wall: float | None = None,
                peer: str = "", peer_is_address: bool = False) -> list[Command]:
        """Handle one decoded envelope from ``identity``."""
        return self.receive_batch(identity, [env], now, wall, peer, peer_is_address)

    def receive_batch(self, identity: bytes, envs: list, now: float,
                      wall: float | None = None, peer: str = "",
                      peer_is_address: bool = False) -> list[Command]:
        """Handle the envelopes of one frame, in order.

        ``peer`` names who is behind ``identity`` (a client process, a CURVE key, an
        address) for the per-connection session bound and the rate of new sessions;
        the shell passes it with the frames of an identity that has no session yet.
        ``peer_is_address``: it is only an address every local client shares (plain
        TCP), so sessions are counted per connection instead.
        """
        state = self.state
        state.wall = now if wall is None else wall
        state.peer = peer
        state.peer_is_address = peer_is_address
        by_link = state.cluster.by_link
        if by_link and identity in by_link or envs and links.is_hello(envs[0]):
            links.receive(state, identity, envs, now)
            return self._flush()
        for env in envs:
            handle(state, identity, env, now)
        return self._flush()

    def brokers_read(self, rows: list[LeaseRenewed], now: float, wall: float | None = None) -> list[Command]:
        """The other brokers' live lease rows, as the store has them now (see
        :mod:`broker.core.cluster.links`)."""
        self.state.wall = now if wall is None else wall
        links.brokers_read(self.state, rows, now)
        return self._flush()

    def runs_adopted(self, dead: str, snapshot: Snapshot | None, now: float,
                     wall: float | None = None) -> list[Command]:
        """The store's answer to ``AdoptRuns(dead)``: the runs this broker took from
        dead broker ``dead`` (None: the store failed; it is asked again). A host
        already connected here (it failed over first), or on another broker, takes its
        runs back at once."""
        state = self.state
        state.wall = now if wall is None else wall
        runs, parked = ownership.adopted(state, dead, snapshot, now)
        for run in runs:
            host = state.registry.by_id.get(run.last_host_id or "")
            if host is not None:
                stages.host_returned(state, host)
        for identity, env in parked:
            handle(state, identity, env, now)       # waited for the run: it is here now
        return self._flush()

    def runs_fenced(self, run_ids: list[str], now: float,
                    wall: float | None = None) -> list[Command]:
        """The store fenced out this broker's writes for ``run_ids``: deposed from them
        (see :func:`broker.core.cluster.ownership.depose`)."""
        self.state.wall = now if wall is None else wall
        ownership.depose(self.state, run_ids, now)
        return self._flush()

    def jobs_read(self, rows: list[InvocationSaved], now: float,
                  wall: float | None = None) -> list[Command]:
        """Queued invoke jobs read from the store for a :class:`ReadJobs`: those not
        held yet are handed over once."""
        self.state.wall = now if wall is None else wall
        invoking.arrived(self.state, [Job.from_record(row) for row in rows], now)
        return self._flush()

    def link_refused(self, broker_id: str, now: float, wall: float | None = None) -> list[Command]:
        """The CURVE handshake of this broker's link to ``broker_id`` was refused (see
        :func:`broker.core.cluster.links.link_refused`)."""
        self.state.wall = now if wall is None else wall
        links.link_refused(self.state, broker_id)
        return self._flush()

    def stopping(self, now: float, wall: float | None = None) -> list[Command]:
        """This broker is about to stop: the other brokers are told."""
        self.state.wall = now if wall is None else wall
        links.stopping(self.state)
        return self._flush()

    def wrote(self, counts: dict[bytes, int], now: float, wall: float | None = None) -> list[Command]:
        """The shell wrote ``counts`` bytes to these identities (see broker.core.sessions.backlog)."""
        state = self.state
        state.wall = now if wall is None else wall
        for session in backlog.wrote(state, counts):
            state.stats["sessions.not_reading"] += 1
            connect.disconnect(state, session, "not reading", now)
        return self._flush()

    def refuse_frame(self, identity: bytes, error: BusError) -> list[Command]:
        """Answer a frame the shell could not decode (too large, not msgpack)."""
        self.state.stats[f"bad_frame.{error.code}"] += 1
        self.state.out.append(Answer(identity, [None], error))
        return self._flush()

    def _expire_silent(self, now: float, most: int | None) -> bool:
        """Let go of local sessions silent past the liveness window (at most ``most``);
        False when more are left. A mirror's liveness is its broker's link
        (broker.core.cluster.links), not its own."""
        state = self.state
        cutoff = now - state.limits.liveness_s
        silent = [s for s in state.registry.by_id.values()
                  if s.last_seen_at < cutoff and s.broker is None]
        for session in silent[:most]:
            state.stats["sessions.expired"] += 1
            connect.disconnect(state, session, "heartbeat", now)
        return most is None or len(silent) <= most

    def tick(self, now: float, wall: float | None = None) -> list[Command]:
        """Expire silent sessions and asks whose deadline passed."""
        state = self.state
        state.wall = now if wall is None else wall
        if now >= self._next_sweep_at:
            self._next_sweep_at = now + SWEEP_INTERVAL_S
            if not self._expire_silent(now, EXPIRE_PER_SWEEP):
                self._next_sweep_at = now    # more to do: come back next round
            hosting.expire_leases(state)
        lease = self.lease_clock.due(now)
        if lease is not None:
            if lease.__class__ is RenewLease:
                lease = RenewLease(lease.lease_s, self._renewal_ticket(now))
            state.out.append(lease)
        departures.refill(state)
        departures.tell(state)
        asking.expire(state, now)
        invoking.recheck(state, now)
        if state.cluster.others:
            links.tick(state, now)
        if state.cluster.listing:
            remote_listing.expire(state, now)
        return self._flush()

    def _renewal_ticket(self, sent_at: float) -> int:
        """A ticket for a lease renewal sent at ``sent_at``: its commit extends how long
        this broker acts on its lease, and ends a lapse (its runs are taken back)."""
        state = self.state

        def renewed(now: float) -> None:
            if self.lease_clock.renewed(sent_at, now):
                ownership.regained(state, now)

        state.next_ticket += 1
        state.tickets[state.next_ticket] = Ticket(renewed)
        return state.next_ticket

    def persisted(self, ticket: int, now: float, wall: float | None = None) -> list[Command]:
        """A write asked for with ``ticket`` is durable."""
        self.state.wall = now if wall is None else wall
        waiting = self.state.tickets.pop(ticket, None)
        if waiting is not None:
            waiting.on_durable(now)
        return self._flush()

    def persist_failed(self, ticket: int, now: float, wall: float | None = None,
                       code: str = "internal_error") -> list[Command]:
        """A write asked for with ``ticket`` could not be committed; its waiter is
        refused with ``code`` (``store_unavailable``: the store could not take it now)."""
        self.state.wall = now if wall is None else wall
        waiting = self.state.tickets.pop(ticket, None)
        self.state.stats["persist.failed"] += 1
        if waiting is not None and waiting.on_failed is not None:
            waiting.on_failed(now, BusError(code))
        return self._flush()

    def persist_kept(self, ticket: int, kept: StickyRow, now: float,
                     wall: float | None = None) -> list[Command]:
        """A sticky entry asked for with ``ticket`` was not written: the store holds
        the same request already (``kept``, written by this broker or another)."""
        self.state.wall = now if wall is None else wall
        waiting = self.state.tickets.pop(ticket, None)
        self.state.stats["persist.kept"] += 1
        if waiting is not None:
            if waiting.on_kept is not None:
                waiting.on_kept(now, kept)
            elif waiting.on_failed is not None:   # nothing else is ever kept: a bug
                waiting.on_failed(now, BusError("internal_error"))
        return self._flush()

    def next_deadline(self) -> float:
        """When :meth:`tick` next has work: the liveness sweep, an ask's deadline, an
        invoke destination's recheck, a list waiting for another broker, or now while departures are still being told."""
        if self.state.departures:
            return 0.0
        deadline = min(self._next_sweep_at, self.lease_clock.next_deadline)
        for at in (self.state.asks.next_deadline(), self.state.invocations.next_deadline(),
                   remote_listing.next_deadline(self.state)):
            if at is not None and at < deadline:
                deadline = at
        return deadline

    def _flush(self) -> list[Command]:
        state = self.state
        cluster = state.cluster
        if cluster.changed or cluster.runs_changed:
            links.flush(state)
        out = state.out
        if not out:
            return []              # most rounds' byte counts (wrote) and ticks
        state.out = []
        if cluster.peers:
            return links.route(state, render(out))
        return render(out)


token_hash = connect.token_hash

__all__ = ["Engine", "IdentityRecord", "Limits", "token_hash"]


_INPUTS = {
    inputs.Frame: lambda e, i: e.receive_batch(i.identity, i.envs, i.now, i.wall, i.peer,
                                               i.peer_is_address),
    inputs.BadFrame: lambda e, i: e.refuse_frame(i.identity, i.error),
    inputs.Tick: lambda e, i: e.tick(i.now, i.wall),
    inputs.Wrote: lambda e, i: e.wrote(i.counts, i.now, i.wall),
    inputs.Committed: lambda e, i: e.persisted(i.ticket, i.now, i.wall),
    inputs.CommitFailed: lambda e, i: e.persist_failed(i.ticket, i.now, i.wall, i.code),
    inputs.CommitKept: lambda e, i: e.persist_kept(i.ticket, i.kept, i.now, i.wall),
    inputs.BrokersRead: lambda e, i: e.brokers_read(i.rows, i.now, i.wall),
    inputs.RunsAdopted: lambda e, i: e.runs_adopted(i.dead, i.snapshot, i.now, i.wall),
    inputs.RunsFenced: lambda e, i: e.runs_fenced(i.run_ids, i.now, i.wall),
    inputs.JobsRead: lambda e, i: e.jobs_read(i.rows, i.now, i.wall),
    inputs.LinkRefused: lambda e, i: e.link_refused(i.broker_id, i.now, i.wall),
    inputs.Stopping: lambda e, i: e.stopping(i.now, i.wall),
    ShellFigures: lambda e, i: e.shell_figures(i) or [],
}
