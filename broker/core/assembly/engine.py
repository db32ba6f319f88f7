"""The routing engine: envelopes, commits and clock ticks in, commands out.

Theory of operation
-------------------
The IO shell hands the engine every input through one entry point,
:meth:`Engine.handle`: each decoded frame with the routing identity it arrived from and
the current time (:class:`~broker.core.kernel.inputs.Frame`), a
:class:`~broker.core.kernel.inputs.Tick` when :meth:`Engine.next_deadline` passes,
and the store's outcomes (``Committed``, ``CommitFailed``, ...; the full list is
:mod:`broker.core.kernel.inputs`). Each call returns the commands to execute, in order (:class:`~broker.core.kernel.commands.Send`,
``Publish``, ``Persist``). ``now`` is monotonic seconds (every deadline and liveness
check); ``wall`` is the wall clock, used only for times people read (``sentAt``,
``connectedAt``, persisted records).

Who handles what is the table in :mod:`broker.core.assembly.dispatch`; the state is
:class:`~broker.core.assembly.state.BrokerState`; the envelopes leave through the final pass of
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

from broker.core.messaging import ask_actions as asking, inbound_gate, receipts
from broker.core.sessions import backlog, connect, departures
from broker.core.workflow import hosting, stage_binding as stages
from broker.core.agents import invoke_actions as invoking
from broker.core.cluster import links, ownership, remote_listing, waiters
from broker.core.agents.registry import Conversation
from broker.core.kernel.commands import Answer, Command, RenewLease
from broker.core.agents.invocation_table import RESTARTED, RESTARTED_TEXT, Job
from broker.core.cluster.lease_clock import LeaseClock
from broker.core.kernel import inputs
from broker.core.assembly.dispatch import HOOKS, LIFECYCLE, handle
from broker.core.assembly.figures import ShellFigures, figures
from broker.core.kernel.outbox import render
from broker.core.kernel.records import (InvocationState, Snapshot)
from broker.core.sessions.registry import Registry
from broker.core.sessions.identity_table import IdentityRecord
from broker.core.kernel.secret_ids import new_session_id, new_token
from broker.core.assembly.state import BrokerState
from broker.core.kernel.state import Limits, Ticket
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

    def _on_shell_figures(self, shell: ShellFigures) -> list[Command]:
        """The shell's own figures (store, process), as of now: ``stats`` answers with
        the latest (see broker.core.assembly.figures)."""
        self.state.shell = shell
        return []

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
        :mod:`broker.core.kernel.inputs`); returns the commands to carry out. Each
        input type has its handler below (``_on_<input>``), named in ``_INPUTS``.

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

    def _on_frame(self, frame: inputs.Frame) -> list[Command]:
        """Handle the envelopes of one frame, in order.

        ``peer`` names who is behind ``identity`` (a client process, a CURVE key, an
        address) for the per-connection session bound and the rate of new sessions;
        the shell passes it with the frames of an identity that has no session yet.
        ``peer_is_address``: it is only an address every local client shares (plain
        TCP), so sessions are counted per connection instead.
        """
        identity, envs, now = frame.identity, frame.envs, frame.now
        state = self.state
        state.wall = now if frame.wall is None else frame.wall
        state.peer = frame.peer
        state.peer_is_address = frame.peer_is_address
        by_link = state.cluster.by_link
        if by_link and identity in by_link or envs and links.is_hello(envs[0]):
            links.receive(state, identity, envs, now)
            return self._flush()
        for env in envs:
            handle(state, identity, env, now)
        return self._flush()

    def _on_brokers_read(self, read: inputs.BrokersRead) -> list[Command]:
        """The other brokers' live lease rows, as the store has them now (see
        :mod:`broker.core.cluster.links`)."""
        self._at(read)
        links.brokers_read(self.state, read.rows, read.now)
        return self._flush()

    def _on_runs_adopted(self, adopted: inputs.RunsAdopted) -> list[Command]:
        """The store's answer to ``AdoptRuns(dead)``: the runs this broker took from
        dead broker ``dead`` (None: the store failed; it is asked again). A host
        already connected here (it failed over first), or on another broker, takes its
        runs back at once."""
        state, now = self.state, self._at(adopted)
        runs, parked = ownership.adopted(state, adopted.dead, adopted.snapshot, now)
        for run in runs:
            host = state.registry.by_id.get(run.last_host_id or "")
            if host is not None:
                stages.host_returned(state, host)
        for identity, env in parked:
            handle(state, identity, env, now)       # waited for the run: it is here now
        return self._flush()

    def _on_runs_fenced(self, fenced: inputs.RunsFenced) -> list[Command]:
        """The store fenced out this broker's writes for ``run_ids``: deposed from them
        (see :func:`broker.core.cluster.ownership.depose`)."""
        ownership.depose(self.state, fenced.run_ids, self._at(fenced))
        return self._flush()

    def _on_jobs_read(self, read: inputs.JobsRead) -> list[Command]:
        """Queued invoke jobs read from the store for a :class:`ReadJobs`: those not
        held yet are handed over once."""
        now = self._at(read)
        invoking.arrived(self.state, [Job.from_record(row) for row in read.rows], now)
        return self._flush()

    def _on_link_refused(self, refused: inputs.LinkRefused) -> list[Command]:
        """The CURVE handshake of this broker's link to ``broker_id`` was refused (see
        :func:`broker.core.cluster.links.link_refused`)."""
        self._at(refused)
        links.link_refused(self.state, refused.broker_id)
        return self._flush()

    def _on_stopping(self, stopping: inputs.Stopping) -> list[Command]:
        """This broker is about to stop: the other brokers are told."""
        self._at(stopping)
        links.stopping(self.state)
        return self._flush()

    def _on_wrote(self, wrote: inputs.Wrote) -> list[Command]:
        """The shell wrote ``counts`` bytes to these identities (see broker.core.sessions.backlog)."""
        state, now = self.state, self._at(wrote)
        for session in backlog.wrote(state, wrote.counts):
            state.stats["sessions.not_reading"] += 1
            connect.disconnect(state, session, "not reading", now)
        receipts.written(state, wrote.counts)
        return self._flush()

    def _on_bad_frame(self, bad: inputs.BadFrame) -> list[Command]:
        """Answer a frame the shell could not decode (too large, not msgpack)."""
        self.state.stats[f"bad_frame.{bad.error.code}"] += 1
        self.state.out.append(Answer(bad.identity, [None], bad.error))
        return self._flush()

    def _expire_silent(self, now: float, most: int | None,
                       heard_until: float | None = None) -> bool:
        """Let go of local sessions silent past the liveness window (at most ``most``);
        False when more are left. A mirror's liveness is its broker's link
        (broker.core.cluster.links), not its own.

        Silence is measured up to ``heard_until``, the moment before which the shell
        has read everything (a mass departure's round may leave the heartbeats of
        healthy sessions queued): a heartbeat sent in time is never lost to the
        broker's own backlog. A backlog that never drains (a flood) holds expiry back
        by one liveness window at most."""
        state = self.state
        liveness = state.limits.liveness_s
        heard = now if heard_until is None else min(now, max(heard_until, now - liveness))
        cutoff = heard - liveness
        silent = [s for s in state.registry.by_id.values()
                  if s.last_seen_at < cutoff and s.broker is None]
        for session in silent[:most]:
            state.stats["sessions.expired"] += 1
            connect.disconnect(state, session, "heartbeat", now)
        return most is None or len(silent) <= most

    def _at(self, event) -> float:
        """The input's time: the wall clock of the input becomes the state's."""
        self.state.wall = event.now if event.wall is None else event.wall
        return event.now

    def _on_tick(self, tick: inputs.Tick) -> list[Command]:
        """Expire silent sessions and asks whose deadline passed."""
        state, now = self.state, self._at(tick)
        if now >= self._next_sweep_at:
            self._next_sweep_at = now + SWEEP_INTERVAL_S
            if not self._expire_silent(now, EXPIRE_PER_SWEEP, tick.heard_until):
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
        if state.receipts.parked:
            receipts.expire(state)
        if state.gate.held:
            inbound_gate.expire(state)
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

    def _on_committed(self, committed: inputs.Committed) -> list[Command]:
        """A write asked for with ``ticket`` is durable."""
        now = self._at(committed)
        waiting = self.state.tickets.pop(committed.ticket, None)
        if waiting is not None:
            waiting.on_durable(now)
        return self._flush()

    def _on_commit_failed(self, failed: inputs.CommitFailed) -> list[Command]:
        """A write asked for with ``ticket`` could not be committed; its waiter is
        refused with ``code`` (``store_unavailable``: the store could not take it now)."""
        now = self._at(failed)
        waiting = self.state.tickets.pop(failed.ticket, None)
        self.state.stats["persist.failed"] += 1
        if waiting is not None and waiting.on_failed is not None:
            waiting.on_failed(now, BusError(failed.code))
        return self._flush()

    def _on_commit_kept(self, kept: inputs.CommitKept) -> list[Command]:
        """A sticky entry asked for with ``ticket`` was not written: the store holds
        the same request already (``kept``, written by this broker or another)."""
        now = self._at(kept)
        waiting = self.state.tickets.pop(kept.ticket, None)
        self.state.stats["persist.kept"] += 1
        if waiting is not None:
            if waiting.on_kept is not None:
                waiting.on_kept(now, kept.kept)
            elif waiting.on_failed is not None:   # nothing else is ever kept: a bug
                waiting.on_failed(now, BusError("internal_error"))
        return self._flush()

    def next_deadline(self) -> float:
        """When the next :class:`~broker.core.kernel.inputs.Tick` has work: the liveness sweep, an ask's deadline, an
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
        if state.asks.touched:
            waiters.tell(state)     # who waits on asks forwarded elsewhere changed
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
    inputs.Frame: Engine._on_frame,
    inputs.BadFrame: Engine._on_bad_frame,
    inputs.Tick: Engine._on_tick,
    inputs.Wrote: Engine._on_wrote,
    inputs.Committed: Engine._on_committed,
    inputs.CommitFailed: Engine._on_commit_failed,
    inputs.CommitKept: Engine._on_commit_kept,
    inputs.BrokersRead: Engine._on_brokers_read,
    inputs.RunsAdopted: Engine._on_runs_adopted,
    inputs.RunsFenced: Engine._on_runs_fenced,
    inputs.JobsRead: Engine._on_jobs_read,
    inputs.LinkRefused: Engine._on_link_refused,
    inputs.Stopping: Engine._on_stopping,
    ShellFigures: Engine._on_shell_figures,
}
