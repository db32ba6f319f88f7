"""The routing engine: envelopes and clock ticks in, commands out.

Theory of operation
-------------------
The IO shell hands the engine every decoded envelope together with the routing
identity it arrived from and the current time (:meth:`Engine.receive`), calls
:meth:`Engine.tick` when :meth:`Engine.next_deadline` passes, and reports durable
writes through :meth:`Engine.persisted`. Each call returns the commands to execute,
in order. The engine owns all routing state and never performs IO, reads a clock or
logs; it only counts (``stats``).

Invariants:

* a routing identity speaks for at most one session, and only for that one;
* every request envelope with a usable id gets exactly one ``result`` (possibly
  deferred, e.g. an ask waiting for its reply), and a bad envelope without an id gets
  one error reply or is dropped and counted;
* handlers refuse by raising :class:`~schemas.errors.BusError`; one place (``_fail``)
  turns a refusal into the error reply, so every code carries its table text.
"""

from __future__ import annotations

import hashlib
import uuid
from collections import Counter, OrderedDict
from dataclasses import dataclass
from typing import Any, Callable

from schemas.errors import BusError
from schemas.groups import clean_group, resolve_home_group
from schemas.limits import (ASK_TIMEOUT_S, LIVENESS_S, MAX_NAME_CHARS, MAX_PENDING_ASKS,
                            PROTOCOL_VERSION)
from schemas.protocol import (HELLO_FIELDS, SESSION_KINDS, STATUS_FIELDS, check_fields,
                              envelope, request_id)

from .commands import Command, Persist, Send
from .presence import membership_changed, status_changed
from .sessions import Registry, Session

SWEEP_INTERVAL_S = 0.5
MAX_RESTORED_GROUPS = 64
MAX_IDENTITIES = 200_000
# Sessions expired per sweep at most: a mass expiry is spread over several rounds so
# the shell reads the heartbeats of healthy sessions in between.
EXPIRE_PER_SWEEP = 64


@dataclass(frozen=True, slots=True)
class IdentityRecord:
    """Who last held a session id (persisted so a restart keeps the rule)."""

    atomic_session_id: str | None
    token_hash: str


@dataclass(frozen=True, slots=True)
class Limits:
    max_pending_asks: int = MAX_PENDING_ASKS
    ask_timeout_s: float = ASK_TIMEOUT_S
    liveness_s: float = LIVENESS_S


def _random_id() -> str:
    return str(uuid.uuid4())


def _random_token() -> str:
    return uuid.uuid4().hex + uuid.uuid4().hex


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class Engine:
    """All routing state of one broker. See the module docstring."""

    def __init__(self, *, broker_id: str = "broker", limits: Limits = Limits(),
                 identities: dict[str, IdentityRecord] | None = None,
                 new_id: Callable[[], str] = _random_id,
                 new_token: Callable[[], str] = _random_token) -> None:
        self.broker_id = broker_id
        self.limits = limits
        self.registry = Registry()
        # Who last held each id, newest last; bounded so connect/close loops cannot
        # grow it without end (the oldest records are forgotten first).
        self.identities: OrderedDict[str, IdentityRecord] = OrderedDict(identities or {})
        self.new_id = new_id
        self.new_token = new_token
        self.other_brokers = 0
        self.stats: Counter[str] = Counter()
        self.out: list[Command] = []
        self.internal_errors: list[Exception] = []   # drained and logged by the shell
        # Quiet (pipelined) calls that succeeded, answered together per peer at flush.
        self.acks: dict[bytes, list[str]] = {}
        self._next_sweep_at = 0.0
        self._next_ticket = 0
        # Subsystems register here: kind handlers, action handlers, tick and
        # persisted hooks, disconnect hooks.
        from . import actions, bulk, messaging, workflow  # noqa: PLC0415  (avoid an import cycle)
        self.actions: dict[str, Callable[..., dict | None]] = {}
        self.kinds_extra: dict[str, Callable[..., None]] = {}
        self.on_disconnect: list[Callable[[Session, str, float], None]] = []
        self.on_tick: list[Callable[[float], None]] = []
        self.on_persisted: dict[int, tuple[Callable[[float], None], Callable[[float], None] | None]] = {}
        actions.install(self)
        self.workflows = workflow.Workflows(self)
        self.messaging = messaging.Messaging(self)
        bulk.install(self)

    # -- inputs ----------------------------------------------------------------------

    def receive(self, identity: bytes, env: Any, now: float) -> list[Command]:
        """Handle one decoded envelope from ``identity``."""
        self._handle(identity, env, now)
        return self._flush()

    def receive_batch(self, identity: bytes, envs: list, now: float) -> list[Command]:
        """Handle the envelopes of one frame, in order."""
        for env in envs:
            self._handle(identity, env, now)
        return self._flush()

    def refuse_frame(self, identity: bytes, error: BusError) -> list[Command]:
        """Answer a frame the shell could not decode (too large, not msgpack)."""
        self.stats[f"bad_frame.{error.code}"] += 1
        self.out.append(Send(identity, envelope("result", re=None, ok=False,
                                                code=error.code, error=error.text)))
        return self._flush()

    def tick(self, now: float) -> list[Command]:
        """Expire silent sessions and run timers that are due."""
        if now >= self._next_sweep_at:
            self._next_sweep_at = now + SWEEP_INTERVAL_S
            cutoff = now - self.limits.liveness_s
            silent = [s for s in self.registry.by_id.values() if s.last_seen_at < cutoff]
            if len(silent) > EXPIRE_PER_SWEEP:
                silent = silent[:EXPIRE_PER_SWEEP]
                self._next_sweep_at = now    # more to do: come back next round
            for session in silent:
                self.stats["sessions.expired"] += 1
                self.disconnect(session, "heartbeat", now)
        for hook in self.on_tick:
            hook(now)
        return self._flush()

    def persisted(self, ticket: int, now: float) -> list[Command]:
        """A write asked for with ``ticket`` is durable."""
        callbacks = self.on_persisted.pop(ticket, None)
        if callbacks is not None:
            callbacks[0](now)
        return self._flush()

    def persist_failed(self, ticket: int, now: float) -> list[Command]:
        """A write asked for with ``ticket`` could not be committed."""
        callbacks = self.on_persisted.pop(ticket, None)
        self.stats["persist.failed"] += 1
        if callbacks is not None and callbacks[1] is not None:
            callbacks[1](now)
        return self._flush()

    def next_deadline(self) -> float:
        """When :meth:`tick` next has work: the liveness sweep or an ask's deadline."""
        ask_at = self.messaging.asks.next_deadline()
        return self._next_sweep_at if ask_at is None or ask_at > self._next_sweep_at else ask_at

    # -- helpers for subsystems --------------------------------------------------------

    def reply(self, session_or_identity: Session | bytes, re: str | None,
              fields: dict[str, Any] | None = None) -> None:
        identity = getattr(session_or_identity, "identity", session_or_identity)
        env = envelope("result", re=re, ok=True)
        if fields:
            env.update(fields)
        self.out.append(Send(identity, env))

    def fail(self, session_or_identity: Session | bytes, re: str | None, error: BusError) -> None:
        identity = getattr(session_or_identity, "identity", session_or_identity)
        self.stats[f"refused.{error.code}"] += 1
        self.out.append(Send(identity, envelope("result", re=re, ok=False,
                                                code=error.code, error=error.text)))

    def persist(self, op: tuple, on_durable: Callable[[float], None] | None = None,
                on_failed: Callable[[float], None] | None = None) -> None:
        """Queue a store write; ``on_durable`` runs once it is committed, ``on_failed``
        if the commit fails."""
        if on_durable is None:
            self.out.append(Persist(op))
            return
        self._next_ticket += 1
        self.on_persisted[self._next_ticket] = (on_durable, on_failed)
        self.out.append(Persist(op, self._next_ticket))

    def disconnect(self, session: Session, reason: str, now: float) -> None:
        """Remove a session and tell everyone who could see it."""
        if self.registry.by_id.get(session.id) is not session:
            return
        before = set(session.groups)
        self.registry.remove(session)
        membership_changed(self.registry, session, before, set(), self.out, departing=True)
        for hook in self.on_disconnect:
            hook(session, reason, now)

    def handle_one(self, identity: bytes, env: dict, now: float) -> None:
        """Handle one envelope as if it had arrived alone, from inside another
        handler (a ``sends`` item); its commands join the current output."""
        self._handle(identity, env, now)

    # -- dispatch --------------------------------------------------------------------------

    def _flush(self) -> list[Command]:
        if self.acks:
            for identity, ids in self.acks.items():
                self.out.append(Send(identity, envelope("acks", ids=ids)))
            self.acks = {}
        out, self.out = self.out, []
        return out

    def _handle(self, identity: bytes, env: Any, now: float) -> None:
        if not isinstance(env, dict):
            self.stats["dropped.not_a_map"] += 1
            return
        re = request_id(env)
        try:
            version = env.get("v")
            if version != PROTOCOL_VERSION or type(version) is not int:
                raise BusError("unsupported_version", version=env.get("v"),
                               supported=PROTOCOL_VERSION)
            kind = env.get("k")
            session = self.registry.by_identity.get(identity)
            if kind == "hello":
                self._hello(identity, session, env, now)
                return
            handler = (_KINDS.get(kind) or self.kinds_extra.get(kind)) if isinstance(kind, str) else None
            if handler is None:
                raise BusError("unknown_kind", kind=kind)
            if session is None:
                raise BusError("not_connected")
            session.last_seen_at = now
            handler(self, session, env, re, now)
        except BusError as error:
            self._refuse(identity, env, re, error)
        except Exception as exc:  # a bug must cost one request, never the broker
            self.stats["internal_error"] += 1
            self.internal_errors.append(exc)
            self.fail(identity, re, BusError("internal_error"))

    def _refuse(self, identity: bytes, env: dict, re: str | None, error: BusError) -> None:
        if re is None and env.get("k") in ("hb", "status", "bye", "received"):
            self.stats[f"dropped.{error.code}"] += 1
            if error.code == "not_connected":
                # Tell a client that lost its session (broker restart) to say hello.
                self.fail(identity, None, error)
            return
        self.fail(identity, re, error)

    def _hello(self, identity: bytes, current: Session | None, env: dict, now: float) -> None:
        check_fields(env, HELLO_FIELDS)
        re = env["id"]
        if current is not None:
            if env.get("sessionId") == current.id and self._token_ok(current, env.get("token")):
                self.reply(current, re, self._welcome(current))
                return
            raise BusError("already_connected")
        name = env["name"].strip()
        if not name or len(name) > MAX_NAME_CHARS:
            raise BusError("invalid_name", limit=MAX_NAME_CHARS)
        kind = env.get("sessionKind") or "interactive"
        if kind not in SESSION_KINDS:
            raise BusError("bad_envelope", detail=f"sessionKind must be one of {', '.join(SESSION_KINDS)}")

        live = self.registry.by_id.get(env.get("sessionId") or "")
        if live is not None and self._token_ok(live, env.get("token")):
            self._reattach(live, identity, env, now)
            return

        parent = self.registry.by_id.get(env.get("parent") or "")
        stage = None
        if kind == "stage" and env.get("stage"):
            home, run, node = self.workflows.stage_home(env)
            stage = (run, node)
        else:
            home = clean_group(env.get("homeGroup") or resolve_home_group(
                explicit=env.get("group"),
                inherited=parent.home_group if parent else None,
                config=env.get("fallbackGroup")))
        restore = env.get("groups")
        if restore and len(restore) > MAX_RESTORED_GROUPS:
            raise BusError("bad_envelope", detail=f"at most {MAX_RESTORED_GROUPS} groups")
        groups = [clean_group(g) for g in restore] if restore else [home]
        # Memberships a client claims at connect obey the same authority as join.
        self.workflows.check_claimed(groups, home, stage is not None)
        session = Session(
            id=self._grant_id(env), name=name, identity=identity, token=self.new_token(),
            home_group=home, groups=dict.fromkeys(groups), kind=kind,
            agent=env.get("agent"), atomic_session_id=env.get("atomicSessionId") or None,
            parent_id=parent.id if parent else None,
            status_suffix=env.get("statusSuffix"), connected_at=now, last_seen_at=now)
        session.extra["notify_undeliverable"] = env.get("notifyUndeliverable", True) is not False
        self.registry.add(session)
        record = IdentityRecord(session.atomic_session_id, token_hash(session.token))
        self.identities[session.id] = record
        self.identities.move_to_end(session.id)
        if len(self.identities) > MAX_IDENTITIES:
            self.identities.popitem(last=False)
        self.persist(("identity", session.id, record.atomic_session_id, record.token_hash,
                      session.name, now))
        membership_changed(self.registry, session, set(), set(session.groups), self.out,
                           connecting=True)
        self.stats["sessions.opened"] += 1
        self.reply(session, re, self._welcome(session))
        if stage is not None:
            # The welcome goes first; the retained entries follow before anything else.
            transcript = env.get("transcript") or session.atomic_session_id or session.id
            self.workflows.stage_started(session, *stage, transcript, now)
        self.workflows.host_returned(session)

    def _reattach(self, session: Session, identity: bytes, env: dict, now: float) -> None:
        """The same client came back on a new connection: keep everything, move the route."""
        self.registry.rebind(session, identity)
        session.last_seen_at = now
        self.stats["sessions.reattached"] += 1
        self.reply(session, env["id"], self._welcome(session))

    def _grant_id(self, env: dict) -> str:
        """The requested id when the caller may hold it, else a fresh one."""
        wanted = env.get("sessionId")
        if not wanted or not _is_uuid(wanted) or wanted in self.registry.by_id:
            return self.new_id()
        record = self.identities.get(wanted)
        if record is None:
            return wanted
        atomic = env.get("atomicSessionId")
        if atomic and atomic == record.atomic_session_id:
            return wanted
        if env.get("token") and token_hash(env["token"]) == record.token_hash:
            return wanted
        return self.new_id()

    @staticmethod
    def _token_ok(session: Session, token: Any) -> bool:
        return isinstance(token, str) and token == session.token

    def _welcome(self, session: Session) -> dict[str, Any]:
        return {
            "sessionId": session.id, "token": session.token, "name": session.name,
            "groups": list(session.groups), "homeGroup": session.home_group,
            "brokerId": self.broker_id, "livenessS": self.limits.liveness_s,
            "parent": session.parent_id,
        }


def _is_uuid(value: str) -> bool:
    try:
        return str(uuid.UUID(value)) == value.lower() and len(value) == 36
    except ValueError:
        return False


# -- kind handlers ----------------------------------------------------------------------

def _on_call(engine: Engine, session: Session, env: dict, re: str | None, now: float) -> None:
    if re is None:
        raise BusError("bad_envelope", detail="a call needs a string id")
    action = env.get("action")
    handler = engine.actions.get(action) if isinstance(action, str) else None
    if handler is None:
        raise BusError("unknown_action", action=action)
    result = handler(session, env, re, now)
    if result is not None:
        if env.get("quiet") is True and result.get("ok", True) is not False:
            acks = engine.acks.get(session.identity)
            if acks is None:
                engine.acks[session.identity] = [re]
            else:
                acks.append(re)
        else:
            engine.reply(session, re, result)


def _on_hb(engine: Engine, session: Session, env: dict, re: str | None, now: float) -> None:
    engine.out.append(Send(session.identity, envelope("hb")))


def _on_bye(engine: Engine, session: Session, env: dict, re: str | None, now: float) -> None:
    engine.stats["sessions.closed"] += 1
    engine.disconnect(session, "closed", now)
    if re is not None:
        engine.reply(session, re)


def _on_status(engine: Engine, session: Session, env: dict, re: str | None, now: float) -> None:
    check_fields(env, STATUS_FIELDS)
    status = env.get("status")
    capability = env.get("replyCapability")
    if status is not None:
        if status in TERMINAL_CHILD_STATUSES and session.kind == "noninteractive":
            capability = "terminal"   # a finished child cannot answer asks any more
        elif not (status in ("idle", "thinking") or
                  (status.startswith("tool:") and 5 < len(status) <= MAX_NAME_CHARS)):
            raise BusError("invalid_status")
        session.status = status
    if capability is not None:
        if capability not in ("live", "terminal"):
            raise BusError("bad_envelope", detail="replyCapability must be 'live' or 'terminal'")
        engine.messaging.set_capability(session, capability, now)
    status_changed(engine.registry, session, engine.out)
    if re is not None:
        engine.reply(session, re, {"status": session.status_text})


TERMINAL_CHILD_STATUSES = frozenset({"completed", "failed", "interrupted", "cancelled"})

_KINDS: dict[str, Callable[[Engine, Session, dict, str | None, float], None]] = {
    "call": _on_call,
    "hb": _on_hb,
    "bye": _on_bye,
    "status": _on_status,
}

__all__ = ["Engine", "IdentityRecord", "Limits", "token_hash"]
