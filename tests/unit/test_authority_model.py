"""A stateful test of the core against a simple model of authority.

Sessions connect (some claiming a parent, with its real grant, another's, or none),
join and leave groups, send, ask, reply and contact their supervisor, in any order.
After every step:

* no message reached a session outside the sender's visibility (a shared group in the
  model) unless it is the sender's granted supervisor;
* no ask was settled by anyone but its target;
* no supervisor relation exists that was not granted by that supervisor.
"""

from __future__ import annotations

import itertools

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from broker.core import Send
from schemas.protocol import envelope

from .harness import Bus

NAMES = ["a", "b", "c", "d", "e"]
GROUPS = ["default", "g1", "g2"]


class Authority(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.bus = Bus(liveness_s=1e9)
        self.ids = itertools.count()
        self.live: dict[bytes, dict] = {}        # identity -> {"id", "groups", "parent"}
        self.asks: dict[str, tuple[bytes, bytes]] = {}   # ask id -> (asker, target)
        self.violations: list[str] = []

    # -- helpers -------------------------------------------------------------------------

    def _identity(self, name: str) -> bytes:
        return name.encode()

    def _by_id(self, session_id: str) -> bytes | None:
        return next((i for i, s in self.live.items() if s["id"] == session_id), None)

    def _check(self, sender: bytes, out: list) -> None:
        """Every delivery in ``out`` from ``sender`` is within its authority."""
        me = self.live.get(sender)
        for command in out:
            if not isinstance(command, Send) or command.env.get("k") not in ("msg", "msgs"):
                continue
            target = self.live.get(command.identity)
            if me is None or target is None:
                continue
            shared = set(me["groups"]) & set(target["groups"])
            # The one cross-group path: a child to the supervisor whose grant launched it
            # (a supervisor ask, or a send or ask by its full id or unique prefix),
            # never the reverse and never anyone else in the supervisor's groups.
            supervisor = me["parent"] == target["id"]
            if not shared and not supervisor:
                self.violations.append(f"{sender!r} reached {command.identity!r} outside its groups")

    def _results(self, out: list) -> list[tuple[bytes, dict]]:
        return [(c.identity, c.env) for c in out if isinstance(c, Send) and c.env.get("k") == "result"]

    # -- rules -----------------------------------------------------------------------------

    @rule(name=st.sampled_from(NAMES), group=st.sampled_from(GROUPS),
          parent=st.sampled_from([None, *NAMES]), grant_from=st.sampled_from(["own", "other", "none"]))
    def connect(self, name, group, parent, grant_from):
        identity = self._identity(name)
        if identity in self.live:
            return
        fields = {"group": group}
        parent_session = self.live.get(self._identity(parent)) if parent else None
        if parent_session is not None:
            fields["parent"] = parent_session["id"]
            if grant_from == "own":
                fields["grant"] = self.bus.grant_child(self._identity(parent))
            elif grant_from == "other":
                issuer = next((i for i in self.live if i != self._identity(parent)), None)
                fields["grant"] = self.bus.grant_child(issuer) if issuer else None
            else:
                fields["grant"] = None
        welcome = self.bus.hello(name, identity=identity, **fields)
        if welcome.get("ok"):
            granted = grant_from == "own" and parent_session is not None
            if welcome.get("parent") is not None and not granted:
                self.violations.append(f"{name} got a parent nobody granted")
            self.live[identity] = {"id": welcome["sessionId"], "groups": welcome["groups"],
                                   "parent": welcome.get("parent")}

    @rule(name=st.sampled_from(NAMES), group=st.sampled_from(GROUPS))
    def join(self, name, group):
        identity = self._identity(name)
        if identity in self.live:
            result = self.bus.call(identity, "join", group=group)
            if result.get("ok"):
                self.live[identity]["groups"] = result["groups"]

    @rule(name=st.sampled_from(NAMES), group=st.sampled_from(GROUPS))
    def leave(self, name, group):
        identity = self._identity(name)
        if identity in self.live:
            result = self.bus.call(identity, "leave", group=group)
            if result.get("ok"):
                self.live[identity]["groups"] = result["groups"]

    @rule(sender=st.sampled_from(NAMES), to=st.sampled_from(NAMES), by_id=st.booleans(),
          action=st.sampled_from(["send", "ask"]))
    def message(self, sender, to, by_id, action):
        identity = self._identity(sender)
        target = self.live.get(self._identity(to))
        if identity not in self.live:
            return
        msg_id = f"m{next(self.ids)}"
        address = target["id"] if (by_id and target) else to
        fields = {"to": address, "message": "hi"}
        if action == "ask":
            fields["timeout"] = 1000
        out = self.bus.feed(identity, envelope("call", id=msg_id, action=action, **fields))
        self._check(identity, out)
        if action == "ask":
            for command in out:
                if isinstance(command, Send) and command.env.get("id") == msg_id:
                    self.asks[msg_id] = (identity, command.identity)

    @rule(sender=st.sampled_from(NAMES))
    def supervise(self, sender):
        identity = self._identity(sender)
        if identity in self.live:
            out = self.bus.feed(identity, envelope("supervisor", id=f"s{next(self.ids)}", message="?"))
            self._check(identity, out)

    @rule(replier=st.sampled_from(NAMES), pick=st.integers(0, 20))
    def reply(self, replier, pick):
        identity = self._identity(replier)
        if identity not in self.live or not self.asks:
            return
        ask_id = sorted(self.asks)[pick % len(self.asks)]
        out = self.bus.feed(identity, envelope("call", id=f"r{next(self.ids)}", action="reply",
                                               replyTo=ask_id, message="answer"))
        asker, target = self.asks[ask_id]
        for to, env in self._results(out):
            if env.get("re") == ask_id and env.get("ok") and "replyId" in env:
                if identity != target:
                    self.violations.append(f"{replier} settled an ask sent to {target!r}")
                self.asks.pop(ask_id, None)

    @rule(name=st.sampled_from(NAMES))
    def close(self, name):
        identity = self._identity(name)
        if identity in self.live:
            self.bus.feed(identity, envelope("bye"))
            del self.live[identity]
            self.asks = {k: v for k, v in self.asks.items() if identity not in v}

    @invariant()
    def nothing_outside_authority(self):
        assert self.violations == []
        assert self.bus.engine.stats["internal_error"] == 0


Authority.TestCase.settings = settings(max_examples=60, stateful_step_count=30, deadline=None)
TestAuthority = Authority.TestCase
