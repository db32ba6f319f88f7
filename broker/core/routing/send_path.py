"""The one send path: every ``send`` is admitted, deduplicated, recorded and answered here.

A send arrives alone (a ``call`` with ``action: send``), as a run of pipelined sends
to one target (a ``sends`` envelope), or addressed to a ``workflow:`` path; all of
them are :func:`admit_sends` with one or more (id, text) items. For each item, in
order:

1. a bad id is dropped and counted (there is nobody to answer);
2. an id seen before is a retry: it gets exactly the answer it got the first time
   (refusals included, except a pipelined send's ``target_backlogged``, which asks
   for the same id again later: see :mod:`broker.core.sessions.backlog`), or nothing
   yet while that answer is pending; the same id for another message is refused
   with ``message_id_conflict``;
3. the text is checked like the tool's ``message`` (a refusal is remembered);
4. the target is resolved once for the batch (:func:`broker.core.routing.resolver.resolve`):
   a live session (every admitted item is delivered to it, in order, as one
   :class:`~broker.core.kernel.commands.Deliver`), a closed stage's host, a workflow
   path (each item is delivered or queued by
   :func:`broker.core.workflow.path_delivery.send`), or a dormant run's subagent (each
   item is held: :mod:`broker.core.workflow.held_sends`); a ``replyTo`` thread is no
   target (a single send that is a reply, see :mod:`broker.core.messaging.replies`);
5. a sender with a flood and loop guard (:mod:`broker.core.messaging.guard`) is checked
   once the target is a session: the loop bound refuses the whole run, the flood bound
   the items past its quota; what is delivered counts for whichever side is guarded.

Answers leave as :class:`~broker.core.kernel.commands.Answer` commands; a quiet plain
delivery is ``ackable`` and becomes part of one ``acks`` in the final pass, any other
answer (``queued`` included) is sent whole, first time and on every retry.

:func:`once` is the same dedup rule for asks, replies and supervisor asks.
"""

from __future__ import annotations

from typing import Any, Callable

from schemas.attention import ACCEPT, HOLD
from schemas.errors import BusError
from schemas.kinds import ID_MAX
from schemas.limits import MAX_MESSAGE_CHARS, MAX_TARGET_CHARS, PROTOCOL_VERSION

from broker.core.messaging import guard
from broker.core.sessions import backlog
from broker.core.workflow import held_sends as held
from broker.core.kernel.commands import Answer
from broker.core.messaging.dedup import fingerprints
from broker.core.messaging.delivery import deliver, deliver_texts
from broker.core.kernel.params import tool_params
from broker.core.routing.resolver import ClosedStageHost, HeldSubagent, Target, resolve
from broker.core.workflow.path_delivery import send as send_to_path, send_late
from broker.core.runs.paths import looks_like_path
from broker.core.messaging.replies import body, reply
from broker.core.sessions.registry import Session
from broker.core.kernel.state import State

_DELIVERED_KEYS = frozenset({"delivered", "to", "toName", "messageId"})


def admit_sends(state: State, sender: Session, to: Any, ids: list, texts: list, now: float, *,
                attachments: list | None = None, reply_to: str | None = None,
                turn: str | None = None, quiet: bool = False, batched: bool = False) -> None:
    """Admit the sends ``ids``/``texts`` (one text per id) from ``sender`` to ``to``.

    ``batched``: pipelined plain sends, delivered as one ``msgs``; otherwise a single
    send, delivered as a ``msg`` with its attachments.
    """
    identity = sender.identity
    seen = state.ids
    out = state.out
    target: Session | None = None       # the live session every admitted item goes to
    route: Target | None = None         # what ``to`` names, resolved once for the batch
    route_error: BusError | None = None
    batch: dict[str, int] = {}          # admitted ids, in order -> fingerprint
    batch_texts: list[str] = []
    path = looks_like_path(to)
    plain = to.__class__ is str and not path and reply_to is None
    # The common case (a new id, a plain text within limits, a resolved live target)
    # is decided inline; anything else takes the full checks below. Same rules, cheaper.
    quick = plain and 0 < len(to) <= MAX_TARGET_CHARS
    # Bytes a pipelined run may still hand the target within its backlog bound: the
    # first item is admitted whenever the target is within it (as a single send is),
    # the rest while they fit (broker.core.sessions.backlog).
    room = 0
    # Items the sender's flood guard still admits in this run (set with the target:
    # broker.core.messaging.guard); a sender without a guard has no such bound.
    quota = guard.UNBOUNDED
    delivered = 0                       # items handed to ``target`` so far
    young, old = seen.generations()     # valid until the memory is written: refreshed then
    for msg_id, text, mark in zip(ids, texts, fingerprints("send", to, texts, reply_to, attachments)):
        if msg_id.__class__ is not str or not 0 < len(msg_id) <= ID_MAX:
            state.stats["dropped.bad_send_id"] += 1
            continue
        if msg_id in young or msg_id in old or msg_id in batch:
            if msg_id in batch:      # the earlier copy is recorded before it is looked up
                _deliver(state, sender, target, batch, batch_texts, quiet)
                delivered += len(batch)
                batch, batch_texts = {}, []
            _replay(state, sender, msg_id, mark, quiet)
            young, old = seen.generations()
            continue
        if quick and target is not None and text.__class__ is str and 0 < len(text) <= MAX_MESSAGE_CHARS:
            room -= (len(text) if text.isascii() else backlog.text_bytes([text])) + backlog.ITEM_BYTES
            if room >= 0 and quota:
                quota -= 1
                batch[msg_id] = mark
                batch_texts.append(text)
                continue
            if room >= 0:           # the sender's guard admits no more of this run
                route_error = guard.full(state, sender, target, now)
            else:
                # The rest of this run would take the target past its bound: it waits.
                route_error = backlog.refusal(state, target, room)
                backlog.latch(sender, to, msg_id, route_error, now)
            quick = False
        try:
            _check_item(to, text, attachments)
            if path and route is None and route_error is None:
                try:
                    route = resolve(state, sender, to, "send")
                except BusError as error:
                    route_error = error
            if path and route_error is not None:
                raise route_error
            if not plain:
                answer = _route_one(state, sender, to, route, msg_id, text, attachments,
                                    reply_to, turn, now)
                seen.record(msg_id, sender.id, mark, answer)
                if answer is not None:
                    out.append(Answer(identity, [msg_id], answer, quiet, _ackable(answer)))
                continue
            if route is None and route_error is None:
                try:
                    if batched and sender.latches:
                        backlog.check_latch(sender, to, msg_id, now)
                    route = resolve(state, sender, to, "send")
                    if route.__class__ is not HeldSubagent:
                        found = route if route.__class__ is Session else route.session
                        if sender.guard is not None:
                            quota = guard.quota(state, sender, found, now)
                        target = found
                        if batched:
                            room = backlog.room(state, target)
                except BusError as error:
                    route_error = error
                    if batched and error.code == "target_backlogged" and \
                            not backlog.latched(sender, to):
                        backlog.latch(sender, to, msg_id, error, now)
            if route_error is not None:
                raise route_error
            if target is None:
                _hold(state, sender, route, msg_id, text, attachments, mark)
                continue
            if quota <= 0:
                raise guard.full(state, sender, target, now)
        except BusError as error:
            if batched and error.code == "target_backlogged":
                state.stats["refused.target_backlogged"] += 1   # a pipelined wait, not final
            else:
                seen.record(msg_id, sender.id, mark, error)
                state.refused(sender, msg_id, error.code)
            out.append(Answer(identity, [msg_id], error, quiet))
            continue
        finally:
            young, old = seen.generations()
        if text.__class__ is str:
            room -= backlog.text_bytes([text]) + backlog.ITEM_BYTES
        quota -= 1
        batch[msg_id] = mark
        batch_texts.append(text)
    if batch:
        delivered += len(batch)
        if batched:
            _deliver(state, sender, target, batch, batch_texts, quiet)
        else:
            (msg_id, mark), = batch.items()
            _deliver_one(state, sender, target, msg_id, batch_texts[0], mark, attachments or [],
                         quiet)
    if delivered and (sender.guard is not None or target.guard is not None):
        guard.passed(state, sender, target, now, delivered)


def once(state: State, session: Session, action: str, mark: int, re: str,
         run: Callable[[], dict[str, Any] | None]) -> dict[str, Any] | None:
    """Run ``run`` once per message id; a retry gets the first answer again.

    Returns the answer (None while it is pending); a remembered refusal is raised
    again. Raises BusError(message_id_conflict) and whatever ``run`` raises.
    """
    entry = state.ids.lookup(re, session.id, mark)
    if entry is not None:
        state.stats["dedup.retries"] += 1
        if isinstance(entry[0], BusError):
            raise entry[0]
        return entry[0]
    try:
        answer = run()
    except BusError as error:
        state.ids.record(re, session.id, mark, error)
        raise
    state.ids.record(re, session.id, mark, answer)
    return answer


# -- internals -----------------------------------------------------------------------

def _hold(state: State, sender: Session, dormant: HeldSubagent, msg_id: str, text: str,
          attachments: list | None, mark: int) -> None:
    """A send to a subagent of a dormant run is held (see broker.core.workflow.held_sends):
    answered once committed. Raises BusError(queue_full)."""
    state.ids.record(msg_id, sender.id, mark, None)      # the answer is pending
    held.hold(state, sender, dormant.run, dormant.sub, msg_id, text, attachments or [])


def _check_item(to: Any, text: Any, attachments: list | None) -> None:
    """The checks of send's parameters and of the tool schema, for one item (a
    pipelined item has not been through the schema yet)."""
    if not to:
        raise BusError("missing_param", action="send", param="to")
    if text is not None and not (text.__class__ is str and len(text) <= MAX_MESSAGE_CHARS
                                 and to.__class__ is str and len(to) <= MAX_TARGET_CHARS):
        tool_params({"v": PROTOCOL_VERSION, "k": "call", "action": "send", "to": to,
                     "message": text})
    body("send", {"message": text, "attachments": attachments})


def _route_one(state: State, sender: Session, to: str, route: Target | None, msg_id: str,
               text: str, attachments: list | None, reply_to: str | None, turn: str | None,
               now: float) -> dict[str, Any] | None:
    """A send to a path (``route``: what it names) or, with ``replyTo``, a reply."""
    if route.__class__ is ClosedStageHost:
        return send_late(state, sender, route.session, route.stage, msg_id, text,
                         attachments or [])
    if route is not None:
        return send_to_path(state, sender, route.run, route.path, msg_id, text,
                            attachments or [], now)
    # A send with replyTo is a reply: the thread must exist and be from ``to``.
    params = {"to": to, "message": text, "replyTo": reply_to}
    if attachments:
        params["attachments"] = attachments
    return reply(state, sender, params, turn, msg_id, now)


def _replay(state: State, sender: Session, msg_id: str, mark: int, quiet: bool) -> None:
    """Answer a retried id as the first time (or refuse a conflicting reuse)."""
    try:
        entry = state.ids.lookup(msg_id, sender.id, mark)
    except BusError as error:
        state.out.append(Answer(sender.identity, [msg_id], error, quiet))
        return
    state.stats["dedup.retries"] += 1
    value = entry[0] if entry is not None else None
    if value is not None:
        state.out.append(Answer(sender.identity, [msg_id], value, quiet, _ackable(value)))


def _ackable(value: Any) -> bool:
    """A plain live delivery: all an ``acks`` entry can stand for."""
    return isinstance(value, dict) and value.get("delivered") is True and \
        _DELIVERED_KEYS.issuperset(value)


def _deliver(state: State, sender: Session, target: Session, batch: dict[str, int],
             texts: list[str], quiet: bool) -> None:
    """Record, deliver and answer admitted plain text sends to one live target."""
    answer = {"delivered": True, "to": target.id, "toName": target.name} \
        if target.inbound == ACCEPT else _gated(target)
    ids = list(batch)
    state.ids.record_delivered(ids, sender.id, list(batch.values()), answer)
    deliver_texts(state, sender, target, ids, texts)
    state.out.append(Answer(sender.identity, ids, answer, quiet, True, own_id=True))


def _deliver_one(state: State, sender: Session, target: Session, msg_id: str, text: str,
                 mark: int, attachments: list, quiet: bool) -> None:
    """A single send with attachments (a ``msg``, not a ``msgs``)."""
    answer = {"delivered": True, "to": target.id, "toName": target.name, "messageId": msg_id} \
        if target.inbound == ACCEPT else {**_gated(target), "messageId": msg_id}
    state.ids.record(msg_id, sender.id, mark, answer)
    deliver(state, sender.id, sender.name, target, msg_id, text, attachments, state.wall)
    state.out.append(Answer(sender.identity, [msg_id], answer, quiet, True))


def _gated(target: Session) -> dict[str, Any]:
    """The answer of a send to a target whose inbound gate holds messages: ``held``
    (a mirror's gate is its broker's: the row's policy says what it will do)."""
    if target.inbound == HOLD:
        return {"delivered": False, "held": True, "to": target.id, "toName": target.name}
    return {"delivered": True, "to": target.id, "toName": target.name}
