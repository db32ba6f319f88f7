"""Workflow runs as the broker knows them: a tree of stage nodes per run.

A host session registers a run (its stages, nested children, non-agent nodes) and
reports stage transitions; stage sessions connect bound to a node's canonical path
``workflow:<runId>/<stage>[/<child>...]``. This module holds that model and its
(de)serialisation; authority and delivery live in :mod:`broker.core.workflow`.

Invariants:

* a node's canonical path uses display names; a segment of a target may spell a node
  by its name or by its id (a nested run id, a stage id);
* states only move forward: PENDING → RUNNING → completed | failed | skipped, or
  PENDING straight to a terminal state; a terminal node never changes again;
* non-agent nodes (``prompt``, ``tool``, ``ui``) never receive or queue messages;
* nodes join a run only through :meth:`Run.attach`, which keeps the run's indexes
  (spelling at each level, spelling anywhere, name key) exact, so looking a literal
  path up costs O(path length), whatever the number of stages;
* ``Run.generation`` grows with every attach: anything derived from how the tree
  resolves spellings (the sticky queue keys) is valid only for the generation it was
  computed at.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterator

from schemas.errors import BusError
from schemas.names import (AGENT, NON_AGENT_KINDS, PENDING, STAGE_STATES,
                           TERMINAL_STATES, run_group)

from broker.core.kernel.records import RunSaved

NODE_KINDS = frozenset({AGENT}) | NON_AGENT_KINDS
STATES = STAGE_STATES
MAX_NODES_PER_RUN = 2000


@dataclass(eq=False, slots=True)
class Node:
    name: str
    id: str | None = None
    kind: str = AGENT
    state: str = PENDING
    group: str | None = None          # None: the invocation group; "default": the escape
    intercom: bool = True             # False: pre-start delivery is unavailable
    children: list[Node] = field(default_factory=list)
    parent: Node | None = None
    session_id: str | None = None     # the live stage session, if any
    last_session_id: str | None = None  # the latest stage session (closed stages keep it)
    transcript: str | None = None     # transcript of the latest stage session
    started: bool = False             # a stage session has initialized at least once
    revoked: bool = False             # the host revoked the stage's grant
    unreadable: bool = False          # its saved session cannot be read: no held subagents
    index: dict[str, list[Node]] = field(default_factory=dict)   # children by spelling
    _elements: list[frozenset[str]] | None = field(default=None, repr=False)
    _key: str | None = field(default=None, repr=False)

    @property
    def is_agent(self) -> bool:
        return self.kind == AGENT

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL_STATES

    @property
    def spellings(self) -> frozenset[str]:
        return frozenset(s for s in (self.name, self.id) if s)

    def lineage(self) -> list[Node]:
        chain, node = [], self
        while node is not None:
            chain.append(node)
            node = node.parent
        return chain[::-1]

    def elements(self) -> list[frozenset[str]]:
        """Spellings of every step from the root (names and ids never change: cached)."""
        if self._elements is None:
            self._elements = [n.spellings for n in self.lineage()]
        return self._elements

    def key(self) -> str:
        if self._key is None:
            self._key = "/".join(n.name for n in self.lineage())
        return self._key

    def record(self) -> dict[str, Any]:
        return {"name": self.name, "id": self.id, "kind": self.kind, "state": self.state,
                "group": self.group, "intercom": self.intercom, "started": self.started,
                "transcript": self.transcript, "revoked": self.revoked,
                "unreadable": self.unreadable,
                "children": [c.record() for c in self.children]}


@dataclass(slots=True)
class Subagent:
    session_id: str
    name: str
    atomic_session_id: str | None
    node_key: str
    groups: list[str]

    def record(self) -> dict[str, Any]:
        return {"id": self.session_id, "name": self.name, "atomic": self.atomic_session_id,
                "node": self.node_key, "groups": list(self.groups)}

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> "Subagent":
        return cls(record["id"], record["name"], record.get("atomic"), record["node"],
                   list(record.get("groups") or []))

    def named(self, to: str) -> bool:
        return to in (self.session_id, self.atomic_session_id) or to.lower() == self.name.lower()


@dataclass(eq=False, slots=True)
class Run:
    run_id: str
    host_id: str | None                # the live host session; None once it left
    host_atomic: str | None = None
    last_host_id: str | None = None    # who hosted it last, to take it back after a restart
    # The host left: until ``lease_until`` (wall clock) the run stays as it was; past
    # it the run is dormant (see broker.core.workflow.hosting.expire_leases). Both persisted.
    lease_until: float | None = None
    dormant: bool = False
    late_router: bool = False          # the host answers asks to its closed stages
    # Background subagents of its stages, and messages held for them while the run is
    # dormant (broker.core.workflow.held_sends); both persisted with the run.
    subagents: dict[str, Subagent] = field(default_factory=dict)
    held: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    roots: list[Node] = field(default_factory=list)
    created_at: float = 0.0
    nonce: str = ""                    # this generation of the run id (its grants' salt)
    root_index: dict[str, list[Node]] = field(default_factory=dict)    # roots by spelling
    anywhere: dict[str, list[Node]] = field(default_factory=dict)      # any node by spelling
    by_key: dict[str, Node] = field(default_factory=dict)
    generation: int = 0                # bumped whenever nodes join the tree
    # Bumped by the store whenever the run changes owner; every write this broker
    # makes for the run is fenced by it (see broker.core.cluster.ownership).
    epoch: int = 1

    @property
    def group(self) -> str:
        return run_group(self.run_id)

    def attach(self, nodes: list[Node], parent: Node | None) -> None:
        """Add ``nodes`` (with their subtrees) under ``parent`` (None: the roots)."""
        (parent.children if parent else self.roots).extend(nodes)
        self.generation += 1
        level = parent.index if parent else self.root_index
        for node in nodes:
            for spelling in node.spellings:
                level.setdefault(spelling, []).append(node)
            self._index(node)

    def _index(self, node: Node) -> None:
        for spelling in node.spellings:
            self.anywhere.setdefault(spelling, []).append(node)
        self.by_key[node.key()] = node
        for child in node.children:
            for spelling in child.spellings:
                node.index.setdefault(spelling, []).append(child)
            self._index(child)

    def level(self, parent: Node | None) -> dict[str, list[Node]]:
        return parent.index if parent else self.root_index

    def nodes(self) -> Iterator[Node]:
        stack = list(reversed(self.roots))
        while stack:
            node = stack.pop()
            yield node
            stack.extend(reversed(node.children))

    def canonical(self, node: Node) -> str:
        return f"{self.group}/{node.key()}"

    def node_by_key(self, key: str) -> Node | None:
        return self.by_key.get(key)

    def record(self) -> dict[str, Any]:
        return {"runId": self.run_id, "host": self.host_id or self.last_host_id,
                "hostAtomic": self.host_atomic, "nonce": self.nonce,
                "createdAt": self.created_at, "leaseUntil": self.lease_until,
                "dormant": self.dormant, "lateRouter": self.late_router,
                "subagents": [s.record() for s in self.subagents.values()],
                "held": {k: list(v) for k, v in self.held.items() if v},
                "stages": [n.record() for n in self.roots]}

    def refusal(self, error: BusError, endpoint: str) -> BusError:
        """What the waiter of a save of this run is told when ``error`` failed it: a
        save the store refused (another broker owns the run) with this run and broker."""
        if error.code != "run_moving":
            return error
        return BusError("run_moving", run_id=self.run_id, endpoint=endpoint)

    def saved(self, owner: str) -> RunSaved:
        """The record of this run as broker ``owner``, the one holding it, writes it:
        every run a broker persists names that broker its owner."""
        return RunSaved(self.run_id, self.record(), owner, self.epoch)

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> Run:
        run = cls(record["runId"], None, record.get("hostAtomic"), record.get("host"),
                  created_at=record.get("createdAt", 0.0), nonce=record.get("nonce", ""),
                  lease_until=record.get("leaseUntil"), dormant=bool(record.get("dormant")),
                  late_router=bool(record.get("lateRouter")))
        for saved in record.get("subagents") or ():
            sub = Subagent.from_record(saved)
            run.subagents[sub.session_id] = sub
        run.held = {k: list(v) for k, v in (record.get("held") or {}).items()}
        run.attach(build_nodes(record.get("stages") or [], None, restoring=True), None)
        return run


def build_nodes(specs: Any, parent: Node | None, *, restoring: bool = False,
                budget: list[int] | None = None) -> list[Node]:
    """Nodes from a host's stage list. Raises BusError(invalid_params)."""
    budget = budget if budget is not None else [MAX_NODES_PER_RUN]
    if not isinstance(specs, list):
        raise BusError("invalid_params", detail="stages must be an array")
    nodes, names = [], set()
    for spec in specs:
        budget[0] -= 1
        if budget[0] < 0:
            raise BusError("invalid_params", detail=f"a run holds at most {MAX_NODES_PER_RUN} stages")
        node = _node(spec, parent, restoring)
        if node.name in names:
            raise BusError("invalid_params", detail=f"duplicate stage name {node.name!r}")
        names.add(node.name)
        node.children = build_nodes(spec.get("children") or [], node, restoring=restoring,
                                    budget=budget)
        nodes.append(node)
    return nodes


def _node(spec: Any, parent: Node | None, restoring: bool) -> Node:
    if not isinstance(spec, dict):
        raise BusError("invalid_params", detail="each stage must be an object")
    name, node_id = spec.get("name"), spec.get("id")
    if not _segment_ok(name) or (node_id is not None and not _segment_ok(node_id)):
        raise BusError("invalid_params", detail="stage name and id must be non-empty strings without '/' or '*'")
    kind = spec.get("kind", AGENT)
    if kind not in NODE_KINDS:
        raise BusError("invalid_params", detail=f"stage kind must be one of {', '.join(sorted(NODE_KINDS))}")
    state = spec.get("state", PENDING)
    if state not in STATES:
        raise BusError("invalid_params", detail=f"stage state must be one of {', '.join(sorted(STATES))}")
    group = spec.get("group")
    if group is not None and not (isinstance(group, str) and _segment_ok(group.strip())) \
            and group is not True:
        raise BusError("invalid_params", detail="stage group must be a name or true")
    intercom = spec.get("intercom", True)
    if not isinstance(intercom, bool):
        raise BusError("invalid_params", detail="stage intercom must be a boolean")
    node = Node(name=name, id=node_id, kind=kind, state=state,
                group="true" if group is True else (group.strip() if group else None),
                intercom=intercom, parent=parent)
    if restoring:
        node.started = bool(spec.get("started"))
        node.transcript = spec.get("transcript")
        node.revoked = bool(spec.get("revoked"))
        node.unreadable = bool(spec.get("unreadable"))
    return node


def _segment_ok(value: Any) -> bool:
    return (isinstance(value, str) and 0 < len(value) <= 128 and value.strip() == value
            and "/" not in value and "*" not in value and value.isprintable())
