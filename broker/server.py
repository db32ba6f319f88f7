"""The IO shell: owns the ROUTER and PUB sockets, feeds the engine, executes its commands.

One loop, one thread. Each round polls once (with the engine's next deadline as the
timeout), drains up to ``DRAIN_LIMIT`` frames without blocking, hands them to the
engine, and executes every resulting command at the end of the round: sends to the
same peer are coalesced into one batch frame, store writes go to the persistence
worker as one batch. A frame that cannot be decoded gets an error reply and is
counted; nothing a peer sends can stop the loop.
"""

from __future__ import annotations

import gc
import os
import select
import time
from dataclasses import dataclass
from pathlib import Path

import zmq
from zmq.backend import Socket as _RawSocket, zmq_poll

from schemas.agent_config import load_agents
from schemas.errors import BusError
from schemas.limits import LEASE_S, MAX_FRAME_BYTES
from schemas.protocol import new_packer, unpack_frame

from .core import Engine, Limits, Persist, Publish, Send
from broker.core.kernel import inputs
from broker.core.kernel.commands import (AdoptRuns, ReadBrokers,
                                         ReadJobs, RenewLease)
from broker.core.kernel.records import LeaseReleased, LeaseRenewed, Snapshot
from broker.core.kernel.secret_ids import new_hex_id
from .client_frames import client_frames
from .frame_peer import peer_of
from .curve import CurveError, CurveServer
from .idle import IdleExit
from .memory_trim import MemoryTrim
from .link_sockets import LINK_FRAME_BYTES, LinkSockets
from .logs import get_logger
from .observe import Observer
from .persistence import READ_BROKERS, PersistenceWorker
from .startup import (StartupError, advertised_endpoint, bind, check_exposure, lock_ipc,
                      own_database, remove_ipc_files)
from broker.store import StoreOpenError
from broker.store.opening import open_store
from broker.store.urls import database_name, is_postgres

DRAIN_LIMIT = 512
MAX_POLL_S = 0.5
# Failed CURVE handshakes in a row on one link before the log says so: the first
# ones are expected (the other broker allows this one's key once it reads its row).
HANDSHAKE_FAILURES_LOGGED = 3
MAX_POLL_MS = MAX_POLL_S * 1000
# Garbage-collector thresholds while serving. Routing allocates short-lived dicts by
# the hundred thousand per second; with the default (700) the collector runs every few
# frames and its full passes walk every long-lived record. Objects that live through
# startup are frozen out of collection altogether.
GC_THRESHOLDS = (20_000, 20, 20)
_SNDMORE = int(zmq.SNDMORE)
_NOBLOCK = int(zmq.NOBLOCK)
_SNDMORE_NOBLOCK = int(zmq.SNDMORE | zmq.NOBLOCK)
_EVENTS = int(zmq.EVENTS)
_POLLIN = int(zmq.POLLIN)
# The Cython send under pyzmq's Python wrapper: the wrapper's keyword handling costs
# as much as the send itself, for arguments the shell never passes.
_send = _RawSocket.send


@dataclass
class BrokerSettings:
    endpoint: str
    pub_endpoint: str
    db_path: Path | str                # a SQLite file, or a postgresql:// URL
    limits: Limits = Limits()
    synchronous: str = "FULL"          # SQLite's synchronous mode
    db_schema: str | None = None       # PostgreSQL: the bus's schema (else the URL's, else intercom)
    advertise: str | None = None       # the endpoint other brokers and redirected clients use
    curve_dir: Path | None = None      # CURVE keys (python -m broker keys); None: no CURVE
    insecure: bool = False             # allow a non-loopback TCP bind without CURVE
    broker_lease_s: float = LEASE_S    # this broker's lease row; renewed every third of it
    data_dir: Path | None = None       # holds agents/<agent>/config (default: the db's directory)
    exit_when_idle_s: float | None = None   # stop after this long without a session (broker.idle)
    metrics_port: int | None = None    # serve Prometheus metrics on 127.0.0.1 (broker.metrics)

    @property
    def agents_dir(self) -> Path:
        return (self.data_dir or Path(self.db_path).parent) / "agents"


class Broker:
    """A running broker. ``serve_forever`` until ``stop``; then ``close``."""

    def __init__(self, settings: BrokerSettings) -> None:
        self.settings = settings
        self._tcp = settings.endpoint.startswith("tcp://")
        self.log = get_logger("broker")
        self.broker_id = new_hex_id(12)
        self._stopping = False
        self._reload = False
        self._locks: list[int] = []
        self.ctx = zmq.Context()
        self.router = self.pub = None
        self.curve: CurveServer | None = None
        self.curve_public = ""             # z85, in this broker's lease row ("" without CURVE)
        self.warnings: list[str] = []
        try:
            if settings.curve_dir is not None:
                try:
                    self.curve = CurveServer(self.ctx, settings.curve_dir)
                except CurveError as exc:
                    raise StartupError(str(exc)) from None
                self.curve_public = self.curve.public.decode()
            self.links = LinkSockets(self.ctx, self.curve)   # DEALERs to the other brokers
            check_exposure(settings, self.curve is not None, self.warnings)
            self.endpoint = advertised_endpoint(settings, self.warnings)
            self._locks += [fd for fd in (lock_ipc(settings.endpoint), lock_ipc(settings.pub_endpoint))
                            if fd is not None]
            snapshot = self._open_store()
            self.engine = Engine(broker_id=self.broker_id, limits=settings.limits,
                                 warnings=self.warnings, pub_endpoint=settings.pub_endpoint,
                                 endpoint=self.endpoint, lease_s=settings.broker_lease_s,
                                 curve_public=self.curve_public)
            restored = self.engine.restore(snapshot, time.time())
            self._load_agents()
            self.observer = Observer(self.log, settings.db_path, settings.metrics_port)
            self.router, self.pub = bind(self.ctx, settings.endpoint, settings.pub_endpoint,
                                         self.curve)
        except Exception:
            self.close()
            raise
        self.worker = PersistenceWorker(self.ctx, self.store, self.broker_id)
        self.worker.start()
        self.worker.ready.wait()
        self._started_wall = time.time()
        self._handshakes_due = False
        self._told_unlinked: set[str] = set()    # brokers it cannot link to, logged once
        self._told_failing: set[str] = set()     # links whose handshakes keep failing, logged
        self._packb = new_packer()
        self.frames_in = 0
        self.bytes_in = 0       # for the memory trim after a burst (broker.memory_trim)
        self.frames_out = 0
        self._written: dict[bytes, int] = {}   # bytes per identity this round (backlog)
        if restored:
            self._execute(restored)   # what the restore implies (jobs failed by the restart)

    # -- setup -------------------------------------------------------------------------

    def _open_store(self) -> Snapshot:
        """Open the database and read it, before any socket is bound: a database that
        cannot be used (a SQLite file locked, read-only, corrupt or truncated; a
        PostgreSQL server down or refusing) stops the start with one line; SQLite's
        files are made owner-only first (see :func:`~broker.startup.own_database`),
        and said so once the start goes on (a refused start stays one line)."""
        db = self.settings.db_path
        notes = [] if is_postgres(db) else own_database(db, self.settings.insecure, self.warnings)
        try:
            self.store, snapshot = open_store(db, self.settings.synchronous, owner=self.broker_id,
                                              endpoint=self.endpoint, schema=self.settings.db_schema)
        except StoreOpenError as exc:
            raise StartupError(str(exc)) from None
        for note in notes:
            self.log.warning("database_mode_tightened", detail=note)
        return snapshot

    def _load_agents(self) -> None:
        """Give the engine the agents' settings files (at start and on SIGHUP); a bad
        file costs one error line and its defaults, never the start."""
        agents, problems = load_agents(self.settings.agents_dir)
        for problem in problems:
            self.log.error("agent_config_rejected", error=problem)
        self.engine.set_agents(agents)

    # -- loop ----------------------------------------------------------------------------

    def stop(self) -> None:
        """Ask the loop to finish its round and return (safe from a signal handler)."""
        self._stopping = True

    def reload(self) -> None:
        """SIGHUP: re-read what may change while serving (the allowed CURVE keys, the
        agents' config files)."""
        self._reload = True

    def serve_forever(self) -> None:
        router, worker_sock = self.router, self.worker.socket
        # While the worker owes reports, zmq_poll over both sockets (the Poller wrapper
        # and a dict per round cost more than the routing of a small request).
        # Otherwise the router alone, without zmq_poll: its ZMQ_EVENTS says whether
        # input waits, and only when none does does the loop sleep in poll(2) on its
        # ZMQ_FD, which signals a change of ZMQ_EVENTS. That skips zmq_poll's own first
        # pass (a poll(2) and an events check) in every round.
        with_worker = [(router, _POLLIN), (worker_sock, _POLLIN)]
        router_events = router.getsockopt
        router_fd = select.poll()
        router_fd.register(router.getsockopt(zmq.FD), select.POLLIN)
        sleep = router_fd.poll
        engine = self.engine
        for warning in self.warnings:
            self.log.warning("broker_insecure", warning=warning)
        self.log.info("broker_started", endpoint=self.settings.endpoint,
                      pub_endpoint=self.settings.pub_endpoint, advertised=self.endpoint,
                      db=database_name(self.settings.db_path),
                      broker_id=self.broker_id, pid=os.getpid())
        last_tick = 0.0
        gc.collect()
        gc.freeze()
        gc.set_threshold(*GC_THRESHOLDS)
        deadline = engine.next_deadline()
        idle = IdleExit(self.settings.exit_when_idle_s, time.monotonic()) \
            if self.settings.exit_when_idle_s is not None else None
        worker = self.worker
        trim = MemoryTrim()
        monotonic, wall_clock = time.monotonic, time.time
        # Every frame that reached the router before this moment has been read: the
        # liveness sweep measures silence up to here (inputs.Tick.heard_until).
        heard_until = monotonic()
        while not self._stopping:
            # Deadlines and liveness run on the monotonic clock: a wall-clock step
            # moves neither. The wall clock is read once a round for what people read.
            wait_ms = (deadline - monotonic()) * 1000
            wait_ms = 0 if wait_ms <= 0 else min(wait_ms, MAX_POLL_MS)
            worker_ready = slept = False
            if worker.owes:
                ready = zmq_poll(with_worker, wait_ms)
                router_ready = any(sock is router for sock, _ in ready)
                worker_ready = len(ready) > router_ready
            else:
                # Checked after every round's sends too: a send may have taken the
                # signal of input that came meanwhile (edge-triggered ZMQ_FD).
                router_ready = router_events(_EVENTS) & _POLLIN
                if not router_ready and wait_ms:
                    sleep(wait_ms)
                    slept = True
                    router_ready = router_events(_EVENTS) & _POLLIN
            now = monotonic()
            wall = wall_clock()
            commands: list = []
            backlog = False
            if router_ready:
                # Input that woke an idle loop is mostly one request (a round trip):
                # it is handled at once, without a look for more, which the check at
                # the top of the next round makes anyway. Input found waiting is drained.
                backlog = self._drain_router(now, wall, commands, 1 if slept else DRAIN_LIMIT)
            if worker_ready:
                self._drain_worker(now, wall, commands)
            # The deadline of the round before: anything this round's input made due
            # is at least now, so it runs next round at the latest (no wait then).
            if now >= deadline and backlog and slept:
                backlog = bool(router_events(_EVENTS) & _POLLIN)   # heartbeats count first
            if not backlog:
                heard_until = now         # nothing was left waiting when the round looked
            if now >= deadline and (not backlog or now - last_tick >= MAX_POLL_S * 2):
                # Normally only with the input drained: heartbeats still queued in the
                # socket must count before anyone is declared silent. Under a flood
                # that never drains, timers still run once a second.
                commands.extend(engine.handle(inputs.Tick(now, wall, heard_until)))
                last_tick = now
            if self._reload:
                self._reload = False
                if self.curve is not None:
                    self.curve.reload()
                    self.log.info("curve_keys_reloaded", directory=str(self.curve.clients))
                self._load_agents()
                self.log.info("agent_config_reloaded", directory=str(self.settings.agents_dir))
            if commands:
                self._execute(commands)
            if self._handshakes_due:       # with each lease renewal or read of the rows
                self._handshakes_due = False
                more = []
                self._check_handshakes(now, wall, more)
                if more:
                    self._execute(more)
            if self._written:
                # Backlog accounting (broker.core.sessions.backlog): may drop a session not reading.
                written, self._written = self._written, {}
                more = engine.handle(inputs.Wrote(written, now, wall))
                if more:
                    self._execute(more)
            if engine.internal_errors:
                for exc in engine.internal_errors:
                    self.log.error("internal_error", exc_info=exc)
                engine.internal_errors.clear()
            if engine.state.notes:
                self.observer.log_notes(engine.take_notes())
            if now >= self.observer.due:
                self.observer.refresh(engine, worker, now, self.frames_in, self.frames_out)
            deadline = engine.next_deadline()
            trim.round(self.bytes_in, now)
            if idle is not None and idle.due(engine.local_sessions, now):
                self.log.info("broker_idle_exit", idle_s=idle.after_s)
                self._stopping = True
        self._execute(engine.handle(inputs.Stopping(time.monotonic(), time.time())))
        self.log.info("broker_stopping", sessions=len(engine.registry), **self.statistics())

    def _drain_router(self, now: float, wall: float, commands: list,
                      limit: int = DRAIN_LIMIT) -> bool:
        """Read up to ``limit`` frames; True when more input may still be waiting.

        Called when poll found input, so the first read needs no look first.
        """
        router = self.router
        engine = self.engine
        known = engine.registry.by_identity
        by_link = engine.cluster.by_link
        recv, getsockopt = router.recv, router.getsockopt
        # getsockopt with int constants: the attribute form (router.rcvmore) and a
        # raised zmq.Again per drain cost more than the routing itself. A ROUTER hands
        # over a whole message at once: identity, then at least one frame. The frame
        # is read as a zmq.Frame: its ``more`` is cheaper than a getsockopt(RCVMORE)
        # (pyzmq builds an enum member per getsockopt).
        for n in range(limit):
            if n and not getsockopt(_EVENTS) & _POLLIN:
                return False
            try:
                identity = recv(_NOBLOCK)
            except zmq.Again:
                return False
            data = recv(copy=False)
            peer, by_address = "", False
            if identity not in known and identity not in by_link:
                # Who is behind a new connection, for the per-connection session bound.
                peer, by_address = peer_of(data, self._tcp)
            frame = data.bytes
            extra = data.more
            while data.more:
                data = recv(copy=False)
            self.frames_in += 1
            self.bytes_in += len(frame)
            try:
                if extra:
                    raise BusError("bad_envelope", detail="a message must be exactly one frame")
                envs = unpack_frame(frame, LINK_FRAME_BYTES if identity in by_link else MAX_FRAME_BYTES)
            except BusError as error:
                commands.extend(engine.handle(inputs.BadFrame(identity, error)))
                continue
            if self.observer.debug:
                self.observer.log_requests(identity, envs)
            commands.extend(engine.handle(inputs.Frame(identity, envs, now, wall, peer, by_address)))
        return True

    def _drain_worker(self, now: float, wall: float, commands: list) -> None:
        engine = self.engine
        for report in self.worker.reports():
            if report.error or report.lost:
                self.log.error("persist_failed", error=report.error, code=report.code,
                               tickets=len(report.failed), retained=report.retained,
                               lost=report.lost)
            if report.dropped:
                self.log.warning("persist_refused", records=report.dropped)
            if report.brokers is not None:
                self._brokers_read(report.brokers, now, wall, commands)
            for dead, snapshot in self.worker.adopted():
                commands.extend(engine.handle(inputs.RunsAdopted(dead, snapshot, now, wall)))
            if report.jobs:
                commands.extend(engine.handle(inputs.JobsRead(report.jobs, now, wall)))
            if report.fenced:
                self.log.warning("runs_fenced", runs=list(report.fenced))
                commands.extend(engine.handle(inputs.RunsFenced(list(report.fenced), now, wall)))
            for ticket in report.done:
                commands.extend(engine.handle(inputs.Committed(ticket, now, wall)))
            for ticket, code in report.refused:
                commands.extend(engine.handle(inputs.CommitFailed(ticket, now, wall, code)))
            for ticket, kept in report.kept:
                commands.extend(engine.handle(inputs.CommitKept(ticket, kept, now, wall)))
            for ticket in report.failed:
                commands.extend(engine.handle(inputs.CommitFailed(ticket, now, wall, report.code)))

    def _brokers_read(self, rows: list[LeaseRenewed], now: float, wall: float,
                      commands: list) -> None:
        """The other brokers' live lease rows: their CURVE keys are allowed first (a
        link the engine opens may be answered by one at once), then the engine links."""
        if self.curve is not None:
            self.curve.allow_brokers(row.curve_public for row in rows)
        commands.extend(self.engine.handle(inputs.BrokersRead(rows, now, wall)))
        unlinked = self.engine.cluster.unlinked
        for broker_id in unlinked.keys() - self._told_unlinked:
            self.log.warning("broker_not_linked", peer=broker_id, reason=unlinked[broker_id])
        self._told_unlinked = set(unlinked)

    def _check_handshakes(self, now: float, wall: float, commands: list) -> None:
        """Links whose CURVE handshake the other broker refused are opened again; one
        that keeps failing is logged once per streak."""
        for seen in self.links.handshakes():
            if seen.given_up:
                commands.extend(self.engine.handle(inputs.LinkRefused(seen.broker_id, now, wall)))
            if seen.failures == 0:
                self._told_failing.discard(seen.broker_id)
            elif seen.failures >= HANDSHAKE_FAILURES_LOGGED and seen.broker_id not in self._told_failing:
                self._told_failing.add(seen.broker_id)
                self.log.warning("broker_link_handshake_failing", peer=seen.broker_id,
                                 failures=seen.failures,
                                 reason="the other broker refuses this broker's CURVE key, or its "
                                        "ROUTER does not prove the key its lease row names; check "
                                        "that both run this version with --curve and their own "
                                        "key pair")

    def _execute(self, commands: list) -> None:
        outbox: dict[bytes, list] = {}
        writes: list = []
        packb = self._packb
        packed: dict[int, bytes] = {}

        def encode(env: dict) -> bytes:
            # One presence event is shared by every peer that gets it: encode it once
            # per round (the envelopes outlive the round, so their ids are unique).
            data = packed.get(id(env))
            if data is None:
                data = packed[id(env)] = packb(env)
            return data

        for command in commands:
            kind = type(command)
            if kind is Send:
                box = outbox.get(command.identity)
                if box is None:
                    outbox[command.identity] = [command.env]
                else:
                    box.append(command.env)
            elif kind is Publish:
                self.pub.send(command.topic.encode(), _SNDMORE)
                self.pub.send(encode(command.env))
            elif kind is Persist:
                writes.append((command.ticket, command.record))
            elif kind is AdoptRuns or kind is ReadJobs:
                writes.append((None, command))     # after the writes before it
            elif kind is RenewLease:
                # Leases are read by other processes, so they are wall-clock times; the
                # store ends this one ``lease_s`` after its own clock, not this host's.
                writes.append((command.ticket or None, LeaseRenewed(
                    self.broker_id, os.getpid(), self.endpoint, self._started_wall,
                    time.time() + command.lease_s, self.curve_public, command.lease_s)))
                self._handshakes_due = True
            elif kind is ReadBrokers:
                writes.append((None, READ_BROKERS))
                self._handshakes_due = True
            elif self.links.execute(command, encode, self.engine.stats, self.log):
                self._told_failing.discard(command.broker_id)     # closed
        router = self.router
        written = self._written
        sent = 0
        stats = self.engine.stats
        for identity, envs in outbox.items():
            frames = client_frames(envs, encode, stats)
            size = 0
            for frame in frames:
                try:
                    _send(router, identity, _SNDMORE_NOBLOCK)
                    _send(router, frame, _NOBLOCK)
                    sent += 1
                    size += len(frame)
                except zmq.Again:
                    self.engine.stats["dropped.peer_full"] += 1
            written[identity] = written.get(identity, 0) + size
        self.frames_out += sent
        if writes:
            self.worker.submit(writes)

    # -- shutdown ------------------------------------------------------------------------

    def statistics(self) -> dict:
        stats = dict(self.engine.stats) if hasattr(self, "engine") else {}
        stats.update(frames_in=getattr(self, "frames_in", 0), frames_out=getattr(self, "frames_out", 0))
        return stats

    def close(self) -> None:
        if getattr(self, "observer", None) is not None:
            self.observer.close()
        worker = getattr(self, "worker", None)
        if worker is not None:
            worker.stop(release=LeaseReleased(self.broker_id))
        elif getattr(self, "store", None) is not None:
            self.store.close()
        for sock in (self.router, self.pub):
            if sock is not None:
                sock.close(linger=0)
        if getattr(self, "links", None) is not None:
            self.links.close_all()       # with their linger: a link_bye still goes out
        if getattr(self, "curve", None) is not None:
            self.curve.stop()
        self.ctx.term()
        if self.router is not None:     # still under its lock: the files are its own
            remove_ipc_files(self.settings.endpoint, self.settings.pub_endpoint)
        for fd in self._locks:
            os.close(fd)
        self._locks.clear()
