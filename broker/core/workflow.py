"""Workflow addressing: authority over runs, path targets, and sticky delivery.

Authority is a relation the broker records, never a flag a client asserts. A session
*controls* run R when it is a member of R's invocation group ``workflow:R`` and it is
not a stage of some run whose home is elsewhere: a stage session controls only its
own run, and only when it lives in the invocation group itself (not a subgroup).
Control lets a session list, send to, queue for and ask the stages of R, including
those isolated in R's subgroups; subgroup members see only their own subgroup.

A ``send`` to a ``workflow:`` path reaches live matching stages at once; anything
else it names (a pending or future stage, a name or a pattern) is kept as a sticky
entry and answered ``queued`` only after the entry is committed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from schemas.errors import BusError
from schemas.protocol import RECEIVED_FIELDS, check_fields, envelope

from . import hosting
from .commands import Send
from .dedup import fingerprint
from .paths import WorkflowPath, matches, parse_path
from .runs import AGENT, RUNNING, Node, Run, build_nodes
from .sessions import Session
from .sticky import ACKED, SENT, Entry, StickyQueues, delivery_state, entry_from_row, undeliverable_event

if TYPE_CHECKING:
    from .engine import Engine


class Workflows:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.registry = engine.registry
        self.runs: dict[str, Run] = {}
        self.sticky = StickyQueues()
        self._reserved: dict[tuple[str, WorkflowPath], int] = {}
        engine.kinds_extra["workflow"] = self._on_workflow
        engine.kinds_extra["received"] = self._on_received
        engine.on_disconnect.append(self._session_gone)
        self.registry.extra_visibility = self._controls_session
        self.registry.extra_watchers = self._watchers
        self.registry.sees_into = self._sees_into

    # -- restore after a restart -------------------------------------------------------

    def restore(self, runs: list[dict], entries: list[tuple], deliveries: list[tuple]) -> None:
        for record in runs:
            run = Run.from_record(record)
            self.runs[run.run_id] = run
        for row in entries:
            try:
                target = parse_path(row[2])
            except BusError:
                continue
            self.sticky.add(entry_from_row(row, target))
        by_seq = {e.seq: e for run in self.sticky.by_run.values() for e in run.values()}
        for seq, key, transcript, state in deliveries:
            entry = by_seq.get(seq)
            if entry is not None:
                entry.deliveries[(key, transcript)] = state
        for entry in by_seq.values():
            # A sender retrying a queued send after the restart gets the same answer.
            params = {"to": str(entry.target), "message": entry.message,
                      "attachments": entry.attachments}
            self.engine.messaging.ids.record(
                entry.message_id, entry.sender_id, fingerprint("send", params),
                {"queued": True, "position": self.sticky.count(entry.run_id, entry.target),
                 "target": str(entry.target), "runId": entry.run_id,
                 "messageId": entry.message_id, "deliveredTo": []})

    # -- authority ---------------------------------------------------------------------

    def controls(self, session: Session, run: Run) -> bool:
        if run.group not in session.groups:
            return False
        own = session.extra.get("run_id")
        return own is None or (own == run.run_id and session.home_group == run.group)

    def _controls_session(self, viewer: Session, other: Session) -> bool:
        """Extra visibility: invocation control reaches into the run's own subgroups."""
        return self._sees_into(viewer, other.groups)

    def _owned_subgroups(self, groups) -> list[Run]:
        runs = []
        for group in groups:
            if group.startswith("workflow:") and "/" in group:
                run = self.runs.get(group[len("workflow:"):].split("/", 1)[0])
                if run is not None:
                    runs.append(run)
        return runs

    def _watchers(self, groups) -> set[str]:
        """Sessions that may see members of ``groups`` through invocation control."""
        found: set[str] = set()
        for run in self._owned_subgroups(groups):
            found |= {i for i in self.registry.by_group.get(run.group, ())
                      if self.controls(self.registry.by_id[i], run)}
        return found

    def _sees_into(self, viewer: Session, groups) -> bool:
        return any(self.controls(viewer, run) for run in self._owned_subgroups(groups))

    def check_join(self, session: Session, group: str) -> None:
        """Subgroups are joined only with control over their run."""
        if group.startswith("workflow:") and "/" in group:
            run = self.runs.get(group[len("workflow:"):].split("/", 1)[0])
            if run is None or not self.controls(session, run):
                raise BusError("workflow_different_group")

    def check_claimed(self, groups: list[str], home: str, is_stage: bool) -> None:
        """Groups a connecting session claims (home and restored memberships).

        A stage keeps its own home; anyone else may hold a run's subgroup only
        together with that run's invocation group, as control requires.
        """
        for group in {home, *groups}:
            if not (group.startswith("workflow:") and "/" in group):
                continue
            run_group = group.split("/", 1)[0]
            if is_stage:
                if group != home:
                    raise BusError("workflow_different_group")
            elif run_group not in groups:
                raise BusError("workflow_different_group")

    def _run_for(self, session: Session, path: WorkflowPath) -> Run:
        run = self.runs.get(path.run_id)
        if run is None:
            if f"workflow:{path.run_id}" in session.groups:
                raise BusError("unknown_run", run_id=path.run_id)
            raise BusError("workflow_different_group")
        if not self.controls(session, run):
            raise BusError("workflow_different_group")
        return run

    # -- stage sessions --------------------------------------------------------------------

    def stage_home(self, env: dict) -> tuple[str, Run, Node]:
        """Home group and node of a connecting stage session. Raises BusError."""
        path = parse_path(env["stage"])
        if path.is_pattern:
            raise BusError("invalid_path", to=env["stage"], detail="a stage binds to an exact path")
        run = self.runs.get(path.run_id)
        if run is None:
            raise BusError("unknown_run", run_id=path.run_id)
        node = self.node_at(run, path) or self._materialize(run, path)
        group = env.get("group") or node.group
        if group is None:
            home = run.group
        elif group == "default":
            home = "default"
        elif group in ("true", "auto"):
            home = f"{run.group}/{node.name}"
        else:
            home = f"{run.group}/{group.strip()}"
        return home, run, node

    def stage_started(self, session: Session, run: Run, node: Node, transcript: str,
                      now: float) -> None:
        """Bind the session to its node and hand it the retained entries, FIFO."""
        session.extra.update(run_id=run.run_id, node_key=node.key(), transcript=transcript)
        session.stage = run.canonical(node)
        node.session_id = session.id
        node.transcript = transcript
        node.started = True
        if node.state == "PENDING":
            node.state = RUNNING
        self.save(run)
        if not self._deliverable(node):
            return
        for entry in self.sticky.matching(run.run_id, node):
            if entry.deliveries.get((node.key(), transcript)) != ACKED:
                self._hand_over(entry, run, node, session, now, before_start=True)

    def _session_gone(self, session: Session, reason: str, now: float) -> None:
        run = self.runs.get(session.extra.get("run_id", ""))
        if run is not None:
            node = run.node_by_key(session.extra.get("node_key", ""))
            if node is not None and node.session_id == session.id:
                node.session_id = None
        for run in self.runs.values():
            if run.host_id == session.id:
                run.last_host_id, run.host_id = session.id, None

    def host_returned(self, session: Session) -> None:
        """A host that reconnects (even to a restarted broker) takes its runs back."""
        for run in self.runs.values():
            if run.host_id is None and run.last_host_id == session.id:
                run.host_id = session.id

    # -- send / ask to paths ---------------------------------------------------------------

    def send(self, session: Session, params: dict, re: str, now: float,
             message: str, attachments: list) -> dict | None:
        path = parse_path(params["to"])
        run = self._run_for(session, path)
        agents = self._agent_matches(run, path)
        if not path.is_pattern and len(agents) == 1:
            node = agents[0]
            live = self._live_session(node)
            if live is session:
                raise BusError("self_target")
            if live is not None:
                entry = Entry(0, run.run_id, path, session.id, session.name, re, message,
                              attachments, now, False)
                self._hand_over(entry, run, node, live, now, before_start=False, record=False)
                return {"delivered": True, "to": live.id, "toName": live.name,
                        "target": run.canonical(node), "messageId": re}
        key = (run.run_id, path)
        self.sticky.check_room(run.run_id, path, self._reserved.get(key, 0))
        self._reserved[key] = self._reserved.get(key, 0) + 1
        entry = Entry(self.sticky.allocate(), run.run_id, path, session.id, session.name, re,
                      message, attachments, now, bool(session.extra.get("notify_undeliverable", True)))

        def committed(at: float) -> None:
            self._release(key)
            self.sticky.add(entry)
            delivered = []
            for node in self._agent_matches(run, path):
                live = self._live_session(node)
                if live is not None and live.id != session.id and self._deliverable(node):
                    self._hand_over(entry, run, node, live, at, before_start=False)
                    delivered.append(live.id)
            answer = {"queued": True, "position": self.sticky.count(run.run_id, path),
                      "target": str(path), "runId": run.run_id, "messageId": re,
                      "deliveredTo": delivered}
            if not agents:
                answer["notInKnownSet"] = True
            self._answer(session.id, re, answer)

        def failed(at: float) -> None:
            self._release(key)
            self._answer(session.id, re, BusError("internal_error").reply())

        self.engine.persist(entry.row(), committed, failed)
        return None

    def resolve_ask(self, session: Session, to: str) -> Session:
        path = parse_path(to)
        run = self._run_for(session, path)
        if path.is_pattern:
            raise BusError("pending_stage_ask_unsupported", to=to)
        if run.dormant:
            raise BusError("run_dormant", run_id=run.run_id)
        agents = self._agent_matches(run, path)
        live = [s for s in map(self._live_session, agents) if s is not None]
        if len(live) > 1:
            raise BusError("ambiguous_stage", to=to, candidates=", ".join(sorted(s.stage or s.id for s in live)))
        if live:
            if live[0] is session:
                raise BusError("self_target")
            return live[0]
        raise BusError("pending_stage_ask_unsupported", to=to)

    def refuse_non_agent(self, caller: Session, to: str, target: Session | None) -> None:
        """Known non-agent ids, names and connections never receive messages."""
        if target is not None:
            run = self.runs.get(target.extra.get("run_id", ""))
            node = run.node_by_key(target.extra.get("node_key", "")) if run else None
            if node is not None and not node.is_agent:
                raise BusError("non_agent_target", to=to)
            return
        for run in self.runs.values():
            if run.group in caller.groups or self.controls(caller, run):
                nodes = [n for n in run.nodes() if to in n.spellings]
                if nodes and not any(n.is_agent for n in nodes):
                    raise BusError("non_agent_target", to=to)

    # -- list ------------------------------------------------------------------------------

    def list_extras(self, session: Session) -> dict:
        rows = [self._run_row(run) for run in self.runs.values() if self.controls(session, run)]
        return {"workflows": rows} if rows else {}

    def _run_row(self, run: Run) -> dict[str, Any]:
        stages = []
        known_targets = set()
        for node in run.nodes():
            if not node.is_agent:
                continue
            entries = self.sticky.matching(run.run_id, node)
            unavailable = not self._deliverable(node)
            states = [{"messageId": e.message_id, "target": str(e.target),
                       "state": delivery_state(e, node, unavailable=unavailable, dormant=run.dormant)}
                      for e in entries]
            label = node.state
            if label == RUNNING and run.dormant and node.session_id is None:
                label = "PENDING"   # the host is gone: the stage waits for a resume
            row = {"name": node.name, "id": node.id, "state": node.state, "label": label,
                   "sessionId": node.session_id,
                   "queued": sum(1 for s in states if s["state"] == "queued"),
                   "deliveryStates": states}
            if unavailable:
                row["label"] = "delivery-unavailable"
            else:
                row["target"] = run.canonical(node)
            stages.append(row)
            known_targets.add(run.canonical(node))
        future: dict[str, int] = {}
        for entry in self.sticky.entries(run.run_id):
            target = str(entry.target)
            if target not in known_targets:
                future[target] = future.get(target, 0) + 1
        return {"runId": run.run_id, "group": run.group, "dormant": run.dormant,
                "host": run.host_id, "stages": stages,
                "future": [{"target": t, "queued": n} for t, n in future.items()]}

    # -- workflow host operations -------------------------------------------------------------

    def _on_workflow(self, engine: Engine, session: Session, env: dict, re: str | None,
                     now: float) -> None:
        if re is None:
            raise BusError("bad_envelope", detail="a workflow operation needs a string id")
        op = hosting.OPS.get(env["op"]) if isinstance(env.get("op"), str) else None
        if op is None:
            raise BusError("bad_envelope", detail="op must be register_run, add_stages, stage_state or end_run")
        engine.reply(session, re, op(self, session, env, now))

    # -- helpers -----------------------------------------------------------------------------

    @staticmethod
    def _literal_walk(run: Run, segments: tuple[str, ...]) -> tuple[list[Node], bool]:
        """Nodes at a literal path, and whether the walk passed only non-agent nodes."""
        level, hits = run.roots, []
        for segment in segments:
            hits = [n for n in level if segment in n.spellings]
            if not hits:
                return [], False
            if not any(n.is_agent for n in hits):
                return hits, True
            level = [child for n in hits for child in n.children]
        return hits, False

    def node_at(self, run: Run, path: WorkflowPath) -> Node | None:
        hits, _ = self._literal_walk(run, path.segments)
        hits = [n for n in hits if len(n.elements()) == len(path.segments)]
        return hits[0] if len(hits) == 1 else None

    def _materialize(self, run: Run, path: WorkflowPath) -> Node:
        parent = None
        if len(path.segments) > 1:
            parent = self.node_at(run, WorkflowPath(run.run_id, path.segments[:-1]))
            if parent is None:
                raise BusError("invalid_path", to=str(path), detail="its parent stage is not known")
        (node,) = build_nodes([{"name": path.segments[-1]}], parent)
        (parent.children if parent else run.roots).append(node)
        return node

    def _agent_matches(self, run: Run, path: WorkflowPath) -> list[Node]:
        """Agent stages the path names; a literal path through a non-agent node is refused."""
        if path.is_pattern:
            return [n for n in run.nodes() if n.is_agent and matches(path.segments, n.elements())]
        hits, non_agent = self._literal_walk(run, path.segments)
        agents = [n for n in hits if n.is_agent]
        if non_agent or (hits and not agents):
            raise BusError("non_agent_target", to=str(path))
        return agents

    def _live_session(self, node: Node) -> Session | None:
        return self.registry.by_id.get(node.session_id) if node.session_id else None

    @staticmethod
    def _deliverable(node: Node) -> bool:
        return node.is_agent and node.intercom and node.group != "default"

    def _hand_over(self, entry: Entry, run: Run, node: Node, session: Session, now: float, *,
                   before_start: bool, record: bool = True) -> None:
        sender = self.registry.by_id.get(entry.sender_id)
        msg = envelope("msg", id=entry.message_id, message=entry.message,
                       attachments=entry.attachments, sentAt=entry.sent_at, expectsReply=False,
                       fromName=entry.sender_name, target=str(entry.target), ackRequired=True)
        msg["from"] = entry.sender_id
        if before_start:
            msg["receivedBeforeStart"] = True
        self.engine.out.append(Send(session.identity, msg))
        if sender is not None:
            self.engine.messaging.remember(session, entry.message_id, sender)
        if record:
            transcript = session.extra.get("transcript", session.id)
            entry.deliveries[(node.key(), transcript)] = SENT
            self.engine.persist(("sticky_delivery", entry.seq, node.key(), transcript, SENT, now))

    def _on_received(self, engine: Engine, session: Session, env: dict, re: str | None,
                     now: float) -> None:
        check_fields(env, RECEIVED_FIELDS)
        ids = env["ids"]
        key = session.extra.get("node_key")
        transcript = session.extra.get("transcript", session.id)
        for msg_id in ids[:512]:
            entry = self.sticky.by_message.get(msg_id) if isinstance(msg_id, str) else None
            if entry is not None and key and (key, transcript) in entry.deliveries:
                entry.deliveries[(key, transcript)] = ACKED
                engine.persist(("sticky_delivery", entry.seq, key, transcript, ACKED, now))

    def settle_exact(self, run: Run, node: Node, reason: str) -> None:
        """Exact entries for a stage that ended unstarted can never be delivered."""
        for entry in list(self.sticky.entries(run.run_id)):
            if entry.target.is_pattern or entry.deliveries:
                continue
            hits = [n for n in run.nodes() if matches(entry.target.segments, n.elements())]
            if hits == [node]:
                self.sticky.remove(entry)
                self.engine.persist(("sticky_drop", entry.seq))
                self.notify(entry, reason)

    def notify(self, entry: Entry, reason: str) -> None:
        sender = self.registry.by_id.get(entry.sender_id)
        if entry.ack and sender is not None:
            self.engine.out.append(Send(sender.identity, envelope("event", **undeliverable_event(entry, reason))))

    def _answer(self, session_id: str, re: str, answer: dict) -> None:
        self.engine.messaging.ids.answer(re, answer)
        session = self.registry.by_id.get(session_id)
        if session is not None:
            self.engine.reply(session, re, answer)

    def _release(self, key: tuple[str, WorkflowPath]) -> None:
        left = self._reserved.get(key, 0) - 1
        if left > 0:
            self._reserved[key] = left
        else:
            self._reserved.pop(key, None)

    def save(self, run: Run) -> None:
        self.engine.persist(("run", run.run_id, run.record()))



__all__ = ["AGENT", "Workflows"]
