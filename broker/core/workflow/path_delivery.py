"""Messages to ``workflow:`` paths: live delivery, sticky entries, settlement.

A ``send`` to a path reaches live matching stages at once; anything else it names (a
pending or future stage, a name or a pattern) is kept as a sticky entry and answered
``queued`` only after the entry is committed. The answer (its FIFO position, the
live stages it reached, whether the target was outside the known set) is part of
the entry, so a retry after a restart is told exactly what it was told first. Its
``target`` echoes the path as the sender spelled it; its position is the place in
the one queue that every spelling of a known stage shares (:func:`queue_key`).

One entry per request, store-wide: a resend of a send another broker (or this one,
before a restart) already committed finds that entry in the store, which writes
nothing, and gets the first answer (:func:`kept_answer`). So a client that fails
over to another broker while a ``queued`` answer was on its way queues nothing twice.

Cost: a literal path is looked up through the run's per-level spelling index, so a
send costs O(path length) whatever the number of stages; a pattern is matched
against every stage, as its meaning requires. The first send after the run's tree
grew (or after a restart) re-keys the run's entries once (:func:`queue_key`).
"""

from __future__ import annotations

from typing import Any

from schemas import envelopes
from schemas.errors import BusError
from schemas.names import DEFAULT_GROUP, SENT, UNDELIVERABLE

from broker.core.sessions import backlog
from broker.core.workflow.closed_stages import ClosedStage
from broker.core.kernel.commands import Send
from broker.core.messaging.delivery import deliver
from broker.core.runs.paths import WorkflowPath, matches, parse_path
from broker.core.kernel.records import StickyAnswered, StickyDelivery, StickyRow
from broker.core.runs.run_tree import Node, Run
from broker.core.sessions.registry import Session
from broker.core.kernel.state import State
from broker.core.workflow.sticky_queue import Entry, entry_from_row, entry_size, undeliverable_fields


def send(state: State, session: Session, run: Run, path: WorkflowPath, re: str, message: str,
         attachments: list, now: float) -> dict[str, Any] | None:
    """Deliver or queue one message to ``path`` of ``run`` (resolved:
    :func:`broker.core.routing.resolver.resolve`); None while the entry is being
    committed.

    Raises BusError(non_agent_target | self_target | target_backlogged |
    stage_not_deliverable | queue_full | run_full | sticky_storage_full).
    """
    to = str(path)
    agents = agent_matches(run, path)
    if not path.is_pattern and len(agents) == 1:
        node = agents[0]
        live = live_session(state, node)
        if live is session:
            raise BusError("self_target")
        if live is not None:
            backlog.check(state, live)
            entry = Entry(0, run.run_id, path, session.id, session.name, re, message,
                          attachments, state.wall, False)
            # Not queued: the receipts keep it until the stage's client has it.
            hand_over(state, entry, node, live, now, before_start=False, record=False,
                      keep=True)
            return {"delivered": True, "to": live.id, "toName": live.name,
                    "target": run.canonical(node), "messageId": re}
        if node.group == DEFAULT_GROUP:
            # Not workflow-owned: it gets no pre-start delivery, so nothing is queued.
            raise BusError("stage_not_deliverable", to=to)
    state.sticky.rekey(run, lambda target: queue_key(run, target))
    entry = Entry(state.sticky.allocate(), run.run_id, path, session.id, session.name, re,
                  message, attachments, state.wall, session.notify_undeliverable, 0,
                  not agents, key=queue_key(run, path), size=entry_size(message, attachments))
    entry.position = state.sticky.reserve(entry, state.limits)

    def committed(at: float) -> None:
        state.sticky.add(entry)
        for node in agent_matches(run, path):
            live = live_session(state, node)
            if live is not None and live.id != session.id and deliverable(node):
                hand_over(state, entry, node, live, at, before_start=False)
                entry.delivered_to.append(live.id)
        if entry.delivered_to:
            state.persist(StickyAnswered(entry.seq, list(entry.delivered_to), entry.run_id))
        _settle(state, session.id, re, entry.answer())

    def failed(at: float, error: BusError) -> None:
        state.sticky.release(entry)
        # run_moving: the store fenced the entry out (another broker took the run).
        _settle(state, session.id, re, run.refusal(error, state.cluster.endpoint))

    def kept(at: float, row: StickyRow) -> None:
        state.sticky.release(entry)
        _settle(state, session.id, re, kept_answer(state, entry, row))

    state.persist(entry.record(), committed, failed, kept)
    return None


def kept_answer(state: State, entry: Entry, row: StickyRow) -> dict[str, Any] | BusError:
    """The answer to ``entry``'s send when the store already holds an entry for the
    same request (``row``): a resend whose first answer was lost with its broker, or
    whose first broker's memory is gone. It is told exactly what the first send was
    told, and nothing is queued again; the same id used for another message is
    refused. An entry this broker did not know (another broker wrote it) is taken
    into its run's queue here, so it is delivered like any other."""
    first = state.sticky.by_message.get(row.entry.message_id)
    if first is None or first.seq != row.entry.seq:
        first = _adopt(state, row)
    if str(first.target) != str(entry.target) or first.fingerprint() != entry.fingerprint():
        return BusError("message_id_conflict", id=entry.message_id)
    return first.answer()


def _adopt(state: State, row: StickyRow) -> Entry:
    """The entry of ``row``, retained in its run's queue if this broker holds the run."""
    target = parse_path(row.entry.target)
    first = entry_from_row(row, target)
    run = state.runs.get(first.run_id)
    if run is not None:
        first.key = queue_key(run, target)
        state.sticky.add(first)
    return first


def send_late(state: State, session: Session, host: Session, stage: ClosedStage, re: str,
              message: str, attachments: list) -> dict[str, Any]:
    """A late plain send to a closed stage's path reaches the session that ran the
    workflow, marked post-mortem. Raises BusError(target_backlogged)."""
    backlog.check(state, host)
    deliver(state, session.id, session.name, host, re, message, attachments, state.wall,
            extra=stage.late_fields())
    return {"delivered": True, "to": host.id, "toName": host.name, "target": stage.target,
            "messageId": re}


def stage_for_ask(state: State, session: Session, run: Run, path: WorkflowPath,
                  to: str) -> Session:
    """The live stage session an ask to ``path`` of ``run`` reaches.

    Raises BusError(pending_stage_ask_unsupported | run_dormant | ambiguous_stage |
    self_target | non_agent_target).
    """
    if path.is_pattern:
        raise BusError("pending_stage_ask_unsupported", to=to)
    if run.dormant:
        raise BusError("run_dormant", run_id=run.run_id)
    live = [s for s in (live_session(state, n) for n in agent_matches(run, path)) if s is not None]
    if len(live) > 1:
        raise BusError("ambiguous_stage", to=to,
                       candidates=", ".join(sorted(s.stage or s.id for s in live)))
    if live:
        if live[0] is session:
            raise BusError("self_target")
        return live[0]
    raise BusError("pending_stage_ask_unsupported", to=to)


def literal_nodes(run: Run, segments: tuple[str, ...]) -> tuple[list[Node], bool]:
    """Nodes at a literal path, and whether the walk passed only non-agent nodes."""
    hits: list[Node] = []
    levels: list[dict[str, list[Node]]] = [run.root_index]
    for segment in segments:
        hits = [n for level in levels for n in level.get(segment, ())]
        if not hits:
            return [], False
        if not any(n.is_agent for n in hits):
            return hits, True
        levels = [n.index for n in hits]
    return hits, False


def node_at(run: Run, path: WorkflowPath) -> Node | None:
    """The one node an exact path names, if exactly one."""
    hits, _ = literal_nodes(run, path.segments)
    hits = [n for n in hits if len(n.elements()) == len(path.segments)]
    return hits[0] if len(hits) == 1 else None


def queue_key(run: Run, path: WorkflowPath) -> str:
    """The queue an entry for ``path`` counts in: its positions and its cap.

    A literal path naming exactly one known agent stage, in any spelling (names, ids,
    both mixed), is that stage's queue, keyed by its canonical path; anything else (a
    pattern, a path outside the known set, a spelling several stages share) is a queue
    of its own text. A stage declared later joins the queue of an earlier spelling:
    keys are recomputed when the tree grows (:meth:`StickyQueues.rekey`).
    """
    if not path.is_pattern:
        hits, non_agent = literal_nodes(run, path.segments)
        if not non_agent and len(hits) == 1 and hits[0].is_agent:
            return run.canonical(hits[0])
    return str(path)


def agent_matches(run: Run, path: WorkflowPath) -> list[Node]:
    """Agent stages the path names; a literal path through a non-agent node is refused.

    Raises BusError(non_agent_target).
    """
    if path.is_pattern:
        return [n for n in run.nodes() if n.is_agent and matches(path.segments, n.elements())]
    hits, non_agent = literal_nodes(run, path.segments)
    agents = [n for n in hits if n.is_agent]
    if non_agent or (hits and not agents):
        raise BusError("non_agent_target", to=str(path))
    return agents


def live_session(state: State, node: Node) -> Session | None:
    return state.registry.by_id.get(node.session_id) if node.session_id else None


def deliverable(node: Node) -> bool:
    """Whether pre-start delivery to the stage is possible at all."""
    return node.is_agent and node.intercom and node.group != DEFAULT_GROUP


def hand_over(state: State, entry: Entry, node: Node, session: Session, now: float, *,
              before_start: bool, record: bool = True, keep: bool = False) -> None:
    """Deliver ``entry`` to a stage session; ``record``: note the hand-over durably;
    ``keep``: an entry no queue holds (a live send), kept by the receipts instead."""
    extra = {"target": str(entry.target), "ackRequired": True}
    if before_start:
        extra["receivedBeforeStart"] = True
    deliver(state, entry.sender_id, entry.sender_name, session, entry.message_id,
            entry.message, entry.attachments, entry.sent_at, extra=extra, keep=keep)
    if record:
        transcript = session.binding.transcript if session.binding else session.id
        entry.deliveries[(node.key(), transcript)] = SENT
        state.persist(StickyDelivery(entry.seq, node.key(), transcript, SENT, state.wall,
                                     entry.run_id))


def settle_exact(state: State, run: Run, node: Node, reason: str) -> None:
    """Exact entries for a stage that ended unstarted can never be delivered: their
    senders are told now, once, and the entries stay until the run ends, listed
    ``stage-terminal`` for that stage."""
    for entry in state.sticky.entries(run.run_id):
        if entry.target.is_pattern or entry.deliveries:
            continue
        hits = [n for n in run.nodes() if matches(entry.target.segments, n.elements())]
        if hits == [node]:
            state.persist(entry.settle(node, state.wall))
            notify_undeliverable(state, entry, reason)


def notify_undeliverable(state: State, entry: Entry, reason: str) -> None:
    sender = state.registry.by_id.get(entry.sender_id)
    if entry.ack and sender is not None:
        state.out.append(Send(sender.identity, envelopes.event(
            UNDELIVERABLE, **undeliverable_fields(entry, reason))))


def _settle(state: State, sender_id: str, re: str, value: dict | BusError) -> None:
    """The deferred answer of a queued send, remembered for retries."""
    state.settle(state.registry.by_id.get(sender_id), re, value)
