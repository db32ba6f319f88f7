"""A driver for the sans-IO engine: a fake clock and helpers that read like the tool."""

from __future__ import annotations

import itertools
from typing import Any

from broker.core import Engine, Limits, Persist, Publish, Send
from broker.core.kernel import inputs
from broker.core.kernel.records import StickyKept, refusal_codes
from broker.store.memory import MemoryStore
from schemas.agent_config import AgentSettings
from schemas.protocol import envelope


def uuid_from(n: int) -> str:
    """Deterministic UUID-shaped ids whose 8-hex prefixes are distinct and readable."""
    return f"{n:08x}-0000-4000-8000-{n:012x}"


class Bus:
    """One engine, a fake clock, and an in-memory store that keeps what is committed."""

    def __init__(self, **limits: Any) -> None:
        self._limits = Limits(**limits)
        self._new_ids = itertools.count(0xA0000001)
        self._tokens = itertools.count(1)
        self.now = 1000.0
        # The store judges what it keeps by the clock the engine wrote its records with.
        self.store = MemoryStore(clock=lambda: self.now)
        self.agent_settings: dict[str, AgentSettings] = {}
        self.engine = self._engine()
        self.engine.restore(self.store.load())
        self.grants: dict[str, str] = {}   # stage path -> grant, as hosts were given them
        self._ids = itertools.count(1)
        self.last: list = []
        self.uncommitted: list[int] = []
        self._waited: dict[int, object] = {}   # ticket -> its record
        self.written: list = []           # records not yet committed to the store

    def _engine(self) -> Engine:
        engine = Engine(broker_id="test", limits=self._limits,
                        new_id=lambda: uuid_from(next(self._new_ids)),
                        new_token=lambda: f"token-{next(self._tokens)}")
        engine.set_agents(self.agent_settings)
        return engine

    def restart(self) -> list:
        """The broker dies and comes back: what was committed is all it has. Returns
        the commands the restore asked for (tracked: ``commit`` writes them)."""
        self.engine = self._engine()
        self.uncommitted, self.written = [], []
        self.last = self._track(self.engine.restore(self.store.load(), self.now))
        return self.last

    def set_agents(self, **settings: AgentSettings) -> None:
        """The shell read these agents' config files (as at start or on SIGHUP)."""
        self.agent_settings = dict(settings)
        self.engine.set_agents(self.agent_settings)

    def request(self, identity: bytes, kind: str, msg_id: str | None = None, **fields: Any) -> dict:
        """A request of ``kind`` (respond, invoke, sessions, ...) answered at once."""
        msg_id = msg_id or f"r{next(self._ids)}"
        out = self.feed(identity, envelope(kind, id=msg_id, **fields))
        return result_for(out, identity, msg_id)

    def advance(self, seconds: float) -> list:
        self.now += seconds
        self.last = self._track(self.engine.handle(inputs.Tick(self.now)))
        return self.last

    def feed(self, identity: bytes, env: Any, peer: str = "", peer_is_address: bool = False) -> list:
        self.last = self._track(self.engine.handle(inputs.Frame(identity, [env], self.now, peer=peer, peer_is_address=peer_is_address)))
        return self.last

    def wrote(self, counts: dict[bytes, int]) -> list:
        """The shell reports the bytes it wrote to these connections."""
        self.last = self._track(self.engine.handle(inputs.Wrote(counts, self.now)))
        return self.last

    def _track(self, out: list) -> list:
        self.uncommitted += [c.ticket for c in out if isinstance(c, Persist) and c.ticket]
        self._waited.update((c.ticket, c.record) for c in out if isinstance(c, Persist) and c.ticket)
        self.written += [c.record for c in out if isinstance(c, Persist)]
        return out

    def commit(self) -> list:
        """The store commits every write asked for so far and reports it durable."""
        out = []
        not_written = self.store.apply(self.written)
        kept = {id(r.saved): r.kept for r in not_written if isinstance(r, StickyKept)}
        refused = refusal_codes(not_written)
        self.written = []
        # As the persistence worker reports them: runs whose fenced writes were refused
        # (another broker owns them now), before the refused tickets.
        fenced = sorted({r.run_id for r in not_written
                         if not isinstance(r, StickyKept) and getattr(r, "epoch", 0)})
        if fenced:
            out += self._track(self.engine.handle(inputs.RunsFenced(fenced, self.now)))
        tickets, self.uncommitted = self.uncommitted, []
        for ticket in tickets:
            record = self._waited.pop(ticket, None)
            if id(record) in refused:   # a claim another broker holds, a job it started
                out += self._track(self.engine.handle(inputs.CommitFailed(ticket, self.now, code=refused[id(record)])))
            elif id(record) in kept:    # the same request is an entry already
                out += self._track(self.engine.handle(inputs.CommitKept(ticket, kept[id(record)], self.now)))
            else:
                out += self._track(self.engine.handle(inputs.Committed(ticket, self.now)))
        # Writes nobody waits for are kept at once; a waited one waits for the next
        # commit (or fail), as its ticket does.
        waited = {id(record) for record in self._waited.values()}
        self.store.apply([r for r in self.written if id(r) not in waited])
        self.written = [r for r in self.written if id(r) in waited]
        self.last = out
        return out

    def fail(self, code: str = "internal_error") -> list:
        """The store could not commit the writes asked for so far: each waiter is
        refused with ``code``, and nothing of them is kept."""
        out = []
        self.written = []
        tickets, self.uncommitted = self.uncommitted, []
        for ticket in tickets:
            self._waited.pop(ticket, None)
            out += self._track(self.engine.handle(inputs.CommitFailed(ticket, self.now, code=code)))
        self.last = out
        return out

    def workflow(self, identity: bytes, op: str, **fields: Any) -> dict:
        msg_id = f"w{next(self._ids)}"
        out = self.feed(identity, envelope("workflow", id=msg_id, op=op, **fields))
        if not [c for c in out if isinstance(c, Send) and c.env.get("re") == msg_id]:
            fed = out
            out = fed + self.commit()     # register_run is answered once the run is durable
            self.last = out
        result = result_for(out, identity, msg_id)
        self.grants.update(result.get("grants") or {})
        return result

    def grant_child(self, launcher: bytes) -> str:
        """What a launching session asks for before it starts a child."""
        msg_id = f"g{next(self._ids)}"
        return result_for(self.feed(launcher, envelope("grant", id=msg_id)), launcher, msg_id)["grant"]

    def _grant_for(self, fields: dict) -> str | None:
        """The grant a legitimate launcher would have handed this session."""
        if fields.get("stage"):
            from broker.core.workflow.path_delivery import node_at
            from broker.core.runs.paths import parse_path
            if fields["stage"] in self.grants:
                return self.grants[fields["stage"]]
            path = parse_path(fields["stage"])
            run = self.engine.state.runs.get(path.run_id)
            node = node_at(run, path) if run else None
            return self.grants.get(run.canonical(node)) if node else None
        parent = self.engine.registry.by_id.get(fields.get("parent") or "")
        return self.grant_child(parent.identity) if parent else None

    def hello(self, name: str, identity: bytes | None = None, peer: str = "",
              **fields: Any) -> dict:
        identity = identity or name.encode()
        if "grant" not in fields and (fields.get("stage") or fields.get("parent")):
            fields["grant"] = self._grant_for(fields)
        msg_id = f"h{next(self._ids)}"
        out = self.feed(identity, envelope("hello", id=msg_id, name=name, **fields), peer)
        return result_for(out, identity, msg_id)

    def call(self, identity: bytes, action: str, msg_id: str | None = None, **params: Any) -> dict:
        msg_id = msg_id or f"c{next(self._ids)}"
        out = self.feed(identity, envelope("call", id=msg_id, action=action, **params))
        return result_for(out, identity, msg_id)

    def sends(self, identity: bytes, kind: str | None = None) -> list[dict]:
        return [c.env for c in self.last if isinstance(c, Send) and c.identity == identity
                and (kind is None or c.env["k"] == kind)]

    def events(self, identity: bytes) -> list[tuple[str, str]]:
        """(event, session name) pairs sent in-band to ``identity`` by the last input."""
        return [(e["event"], e["session"]["name"]) for e in self.sends(identity, "event")]

    def published(self) -> list[tuple[str, str, str]]:
        return [(c.topic, c.env["event"], c.env["session"]["name"])
                for c in self.last if isinstance(c, Publish)]

    def persisted(self) -> list:
        """The records the last input asked the store to keep."""
        return [c.record for c in self.last if isinstance(c, Persist)]


def result_for(out: list, identity: bytes, msg_id: str) -> dict:
    matches = [c.env for c in out if isinstance(c, Send) and c.identity == identity
               and c.env.get("k") == "result" and c.env.get("re") == msg_id]
    assert len(matches) == 1, f"expected one result for {msg_id}, got {matches}"
    return {k: v for k, v in matches[0].items() if k not in ("v", "k", "re")}
