"""Held sends: messages for the background subagents of a dormant run's stages.

A session that connects as the child of a stage session (``parent`` = the stage's
session, with a child grant) is a *subagent* of that stage: the run remembers it
(name, session id, Atomic session id, groups) in its record. While the run is
dormant its subagents stay addressable: a send that names one (by name, Atomic
session id or its pre-restart session id) and finds no live session is *held*:
kept in the run record and answered ``queued`` (``held: true``) once committed.
When the subagent is back (it reconnects, reclaiming its id or with the same Atomic
session id) and its stage is restored (a stage session is bound to it again), each
held message is delivered once and dropped. A session that takes the run over takes
its holds too.

Rules: a stage that never started, or whose saved session cannot be read (its host
says so: ``stage_state`` with ``savedSession: "unreadable"``), has no held subagents
(what was held for them is reported undeliverable; the stage's own route, its path
and queued entries, is unaffected); at
most ``QUEUED_PER_TARGET`` held messages per subagent (``queue_full``); the sender
must share a group with the subagent as it was when it left, as for a live send.
"""

from __future__ import annotations


from schemas import envelopes
from schemas.errors import BusError
from schemas.names import UNDELIVERABLE
from schemas.limits import QUEUED_PER_TARGET

from broker.core.kernel.commands import Send
from broker.core.messaging.delivery import deliver
from broker.core.runs.run_tree import Run, Subagent
from broker.core.sessions.registry import Session
from broker.core.kernel.state import State


def adopt(state: State, session: Session, parent: Session | None) -> None:
    """``session`` connected as a child of ``parent``: a subagent, if ``parent`` is a
    stage session; also the return of a known subagent, which gets what was held."""
    if parent is not None and parent.binding is not None:
        run = state.runs.get(parent.binding.run_id)
        if run is not None:
            run.subagents[session.id] = Subagent(session.id, session.name,
                                                 session.atomic_session_id,
                                                 parent.binding.node_key, list(session.groups))
            state.persist(run.saved(state.broker_id))
    for run in _runs_holding(state):
        sub = _known(run, session)
        if sub is not None:
            release(state, run, sub, session)


def stage_restored(state: State, run: Run, node_key: str) -> None:
    """A stage session is bound again: its subagents that are back get their holds."""
    for sub in list(run.subagents.values()):
        if sub.node_key == node_key and run.held.get(sub.session_id):
            live = state.registry.by_id.get(sub.session_id) or _by_atomic(state, sub)
            if live is not None:
                release(state, run, sub, live)


def find(state: State, sender: Session, to: str) -> tuple[Run, Subagent] | None:
    """The subagent of a dormant run that ``to`` names for ``sender``, if any."""
    for run in state.runs.values():
        if not run.dormant:
            continue
        for sub in run.subagents.values():
            node = run.node_by_key(sub.node_key)
            if node is None or not node.started or node.unreadable or not sub.named(to):
                continue
            if sender.id != sub.session_id and not set(sender.groups).isdisjoint(sub.groups):
                return run, sub
    return None


def hold(state: State, sender: Session, run: Run, sub: Subagent, msg_id: str, text: str,
         attachments: list) -> None:
    """Keep one message for ``sub``; it is answered (``settle``) once the run record is
    committed. Raises BusError(queue_full)."""
    held = run.held.setdefault(sub.session_id, [])
    if len(held) >= QUEUED_PER_TARGET:
        raise BusError("queue_full", limit=QUEUED_PER_TARGET)
    held.append({"id": msg_id, "from": sender.id, "fromName": sender.name, "message": text,
                 "attachments": list(attachments or []), "sentAt": state.wall})
    state.stats["held.kept"] += 1
    answer = {"queued": True, "held": True, "to": sub.session_id, "toName": sub.name,
              "runId": run.run_id, "position": len(held), "messageId": msg_id}
    item = held[-1]

    def failed(at: float, error: BusError) -> None:
        if item in run.held.get(sub.session_id, ()):
            run.held[sub.session_id].remove(item)
        state.settle(state.registry.by_id.get(sender.id), msg_id,
                     run.refusal(error, state.cluster.endpoint))

    state.persist(run.saved(state.broker_id),
                  lambda at: state.settle(state.registry.by_id.get(sender.id), msg_id, answer),
                  failed)


def release(state: State, run: Run, sub: Subagent, session: Session) -> None:
    """Deliver what was held for ``sub`` to ``session`` (once its stage is restored)."""
    node = run.node_by_key(sub.node_key)
    if node is None or node.session_id is None:
        return                  # the stage is not restored yet: stage_restored() will
    for item in run.held.pop(sub.session_id, []):
        deliver(state, item["from"], item["fromName"], session, item["id"], item["message"],
                item["attachments"], item["sentAt"], extra={"held": True})
        state.stats["held.delivered"] += 1
    state.persist(run.saved(state.broker_id))


def unreadable(state: State, run: Run, node_key: str) -> None:
    """The saved session of stage ``node_key`` cannot be read: its subagents will not be
    restored, so what is held for them is reported undeliverable to each sender."""
    for sub in run.subagents.values():
        if sub.node_key != node_key:
            continue
        for item in run.held.pop(sub.session_id, []):
            state.stats["held.undeliverable"] += 1
            sender = state.registry.by_id.get(item["from"])
            if sender is not None:
                state.out.append(Send(sender.identity, envelopes.event(
                    UNDELIVERABLE, messageId=item["id"], runId=run.run_id, target=sub.name,
                    reason="its stage's saved session cannot be read: the subagent will not "
                           "be restored")))


def _runs_holding(state: State) -> list[Run]:
    return [run for run in state.runs.values() if run.held]


def _known(run: Run, session: Session) -> Subagent | None:
    sub = run.subagents.get(session.id)
    if sub is None and session.atomic_session_id:
        sub = next((s for s in run.subagents.values()
                    if s.atomic_session_id == session.atomic_session_id), None)
    return sub


def _by_atomic(state: State, sub: Subagent) -> Session | None:
    if not sub.atomic_session_id:
        return None
    ids = state.registry.by_atomic.get(sub.atomic_session_id, ())
    return state.registry.by_id.get(next(iter(ids))) if ids else None
