"""The checker: the invariants, judged over one round's recorded histories.

What it owns: :func:`check`, from the workers' histories and the sampler's lines to a
:class:`Verdict`. The invariants (each a column of the report):

- every send answered ``queued`` is received by its stage exactly once (``lost``:
  never, ``doubled``: more than once; receipts are counted by the token in the
  message's body, so a copy under another message id counts too);
- no workflow run is held by two brokers at once (``two_holders_s``): at each
  PostgreSQL sample, a run's holders are its ``owner`` row there and every broker
  whose own overview, answered within :data:`FRESH_S`, lists it in memory;
- no session id is taken from its client (a session whose id differs from the one it
  connected with) nor served by two brokers at once (their overviews) (``ids_lost``);
- every live send answered ``delivered`` is received (``delivered_not_received``);
- no call stays unanswered past its timeout (``hung``: no completion, or a completion
  later than :data:`HUNG_AFTER_S` after the call), invoke and finish_invocation
  included: each is answered, ok or with an error code, within its bound;
- no invoke job is started twice (``jobs_twice``): across every responder's history,
  each job id is handed over (an ``invocation`` event) at most once, and no invoke
  (its token, the job's reason) is started under two job ids.

It also lists, not as failures, the jobs answered ``queued`` that no responder was
handed by the end of the drain (``jobs_not_started``: at most once allows a job whose
session left during its turn to fail unseen) and the jobs started whose invoke got
another answer (``jobs_unanswered``: refused or given up on by the client, yet
committed).

For a fault that cuts the clients from a broker (its window given), it counts the live
sends made during the cut to receivers homed on that broker (:class:`CutSends`): what
they were answered, how many arrived, through which broker, how late, and the copies
the receivers dropped (messages the broker sent again): the evidence that the round
had live traffic to the cut clients, which ``delivered_not_received`` is judged on.

It also measures, per side (the sessions whose home is one broker), the longest
stretch of refusals in a row (``unavailable_s``), to read against the lease, and the
longest call (``slowest_s``: a call a failover answered late is no refusal).
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

FRESH_S = 1.5                  # an overview older than this says nothing about now
HUNG_AFTER_S = {"send": 15.0, "ask": 15.0, "register": 15.0, "connect": 20.0,
                "invoke": 15.0, "finish": 15.0}
# The bus answering as it should: the 50-entry cap, the 100 unstarted jobs per
# destination, and a finish for a job that failed when its session moved.
NOT_A_REFUSAL = {"queue_full", "too_many_invocations", "unknown_invocation"}


@dataclass
class CutSends:
    """Live sends made while the clients were cut from ``broker`` (invoked between
    ``start`` and ``end``, monotonic) to receivers whose home is ``broker``."""
    broker: str
    start: float
    end: float
    receivers: list[str] = field(default_factory=list)    # their session names
    made: int = 0
    delivered: int = 0                    # answered delivered
    answers: Counter = field(default_factory=Counter)     # every other answer, by code
    received: int = 0                     # of those answered delivered
    after_heal: int = 0                   # of those received, received after ``end``
    via: Counter = field(default_factory=Counter)         # broker that had welcomed the receiver
    slowest_s: float = 0.0                # longest from the send to its receipt
    not_received: list[str] = field(default_factory=list)   # tokens answered delivered
    moves: list[str] = field(default_factory=list)       # "name: b1 -> b2 at 13.2 s"
    copies_dropped: int = 0               # resent copies the receivers' clients dropped


@dataclass
class Verdict:
    queued: int = 0
    lost: list[str] = field(default_factory=list)
    lost_by_target: Counter = field(default_factory=Counter)
    disconnected: list[str] = field(default_factory=list)   # sessions not connected at the end
    doubled: list[str] = field(default_factory=list)
    two_holders_s: float = 0.0
    two_holders: list[str] = field(default_factory=list)     # "run: b1+b2 from..to"
    ids_lost: list[str] = field(default_factory=list)
    delivered: int = 0
    delivered_not_received: list[str] = field(default_factory=list)
    # by target: a session's name, or a workflow stage's path (a send to a stage whose
    # session is live is answered delivered too, not queued)
    delivered_not_received_by_target: Counter = field(default_factory=Counter)
    hung: list[str] = field(default_factory=list)
    jobs_queued: int = 0            # invoke jobs answered queued
    jobs_started: int = 0           # distinct job ids handed to a responder
    jobs_twice: list[str] = field(default_factory=list)
    jobs_not_started: list[str] = field(default_factory=list)    # tokens
    jobs_unanswered: list[str] = field(default_factory=list)     # tokens
    unavailable_s: dict[str, float] = field(default_factory=dict)
    slowest_s: dict[str, float] = field(default_factory=dict)     # longest call, per side
    codes: Counter = field(default_factory=Counter)
    cut: CutSends | None = None     # a clients' cut: the live sends it could have hurt

    @property
    def failed(self) -> list[str]:
        """The invariants that do not hold, by column name."""
        checks = {"lost": self.lost, "doubled": self.doubled, "two_holders": self.two_holders,
                  "ids_lost": self.ids_lost, "delivered_not_received": self.delivered_not_received,
                  "hung": self.hung, "jobs_twice": self.jobs_twice}
        return [name for name, found in checks.items() if found]


def read_lines(path: Path) -> list[dict]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text(errors="replace").splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:    # a line cut short by a killed worker
            pass
    return out


def expected(histories: list[list[dict]]) -> tuple[set[str], set[str]]:
    """The tokens answered ``queued`` and those answered ``delivered`` (live sends)."""
    queued, delivered = set(), set()
    for events in histories:
        for e in events:
            if e["type"] == "complete" and e["f"] == "send" and e["ok"]:
                (queued if e["queued"] else delivered if e["delivered"] else set()).add(e["token"])
    return queued, delivered


def receipts(histories: list[list[dict]]) -> Counter:
    return Counter(e["token"] for events in histories for e in events if e["type"] == "recv")


def invoke_jobs(histories: list[list[dict]]) -> dict[str, str]:
    """The invoke jobs answered ``queued``: job id -> the token its invoke carried."""
    return {e["job"]: e["token"] for events in histories for e in events
            if e["type"] == "complete" and e["f"] == "invoke" and e["ok"] and e.get("job")}


def starts(histories: list[list[dict]]) -> Counter:
    """How many times each job id was handed to a responder."""
    return Counter(e["job"] for events in histories for e in events if e["type"] == "started")


def check(histories: list[list[dict]], samples: list[dict], names: dict[str, str],
          end: float, cut: tuple[str, float, float] | None = None) -> Verdict:
    """``names``: broker id -> broker name (a restarted broker's ids map to one name);
    ``end``: when traffic stopped (a refusal stretch still open ends there); ``cut``:
    (broker name, start, end) when the round cut the clients from that broker."""
    verdict = Verdict()
    queued, delivered = expected(histories)
    got = receipts(histories)
    verdict.queued, verdict.delivered = len(queued), len(delivered)
    verdict.lost = sorted(t for t in queued if got[t] == 0)
    targets = {e["token"]: e.get("to") for events in histories for e in events
               if e["type"] == "complete" and e["f"] == "send"}
    verdict.lost_by_target = Counter(targets.get(t) for t in verdict.lost)
    verdict.disconnected = [f"{e.get('session')} ({(e.get('id') or '')[:8]})" for events in histories
                            for e in events if e["type"] == "final" and not e.get("connected", True)]
    verdict.doubled = sorted(t for t, n in got.items() if n > 1 and not t.startswith("re:"))
    verdict.delivered_not_received = sorted(t for t in delivered if got[t] == 0)
    verdict.delivered_not_received_by_target = Counter(targets.get(t) for t in
                                                       verdict.delivered_not_received)
    for events in histories:
        _calls(events, verdict, end)
        _ids(events, verdict)
    _jobs(histories, names, verdict)
    _holders(samples, names, verdict)
    if cut is not None:
        verdict.cut = cut_sends(histories, names, *cut)
    return verdict


def cut_sends(histories: list[list[dict]], names: dict[str, str], broker: str, start: float,
              end: float) -> CutSends:
    """The live role's sends (sessions ``a``, from any history) made between ``start``
    and ``end`` to a receiver (a session ``b``) whose home is ``broker``."""
    found = CutSends(broker, start, end)
    receivers: dict[str, list[dict]] = {}          # name -> the history it is in
    for events in histories:
        homes = {e["session"]: e.get("side") for e in events if e["type"] == "complete"}
        if homes.get("b") != broker:
            continue
        name = next((e.get("name") for e in events
                     if e["type"] == "session" and e["session"] == "b" and e.get("name")), "?")
        receivers[name] = events
    found.receivers = sorted(receivers)
    sends = [e for events in histories for e in events
             if e["type"] == "complete" and e["f"] == "send" and e["session"] == "a"
             and e.get("to") in receivers and start <= e["invoked"] <= end]
    recv = {e["token"]: e for events in receivers.values() for e in events
            if e["type"] == "recv" and e["session"] == "b"}
    found.made = len(sends)
    for e in sends:
        if not e["delivered"]:
            found.answers[e["code"] or ("queued" if e["queued"] else "ok")] += 1
            continue
        found.delivered += 1
        got = recv.get(e["token"])
        if got is None:
            found.not_received.append(e["token"])
            continue
        found.received += 1
        found.after_heal += got["t"] > end
        found.via[names.get(got.get("broker"), (got.get("broker") or "?")[:8])] += 1
        found.slowest_s = max(found.slowest_s, got["t"] - e["invoked"])
    for name, events in receivers.items():
        last = None
        for e in events:
            if e["type"] == "broker" and e["session"] == "b":
                where = names.get(e.get("broker"), (e.get("broker") or "none")[:8])
                if last is not None:
                    found.moves.append(f"{name}: {last} -> {where} at {e['t'] - start:+.1f} s "
                                       f"from the cut")
                last = where
        found.copies_dropped += sum(e.get("duplicates_dropped") or 0 for e in events
                                    if e["type"] == "final" and e.get("session") == "b")
    return found


def _jobs(histories: list[list[dict]], names: dict[str, str], verdict: Verdict) -> None:
    """Each job started at most once, each invoke under one job at most."""
    jobs = invoke_jobs(histories)
    started = [e for events in histories for e in events if e["type"] == "started"]
    count = starts(histories)
    verdict.jobs_queued, verdict.jobs_started = len(jobs), len(count)
    where: dict[str, list[str]] = defaultdict(list)
    as_jobs: dict[str, set[str]] = defaultdict(set)
    for e in started:
        broker = e.get("broker") or "?"
        where[e["job"]].append(f"{e.get('session')} on {names.get(broker, broker[:8])} "
                               f"at {e['t']:.1f}")
        as_jobs[e.get("token") or "?"].add(e["job"])
    verdict.jobs_twice = [f"job {job[:8]} ({jobs.get(job, '?')}) started {n} times: "
                          f"{', '.join(where[job])}" for job, n in count.items() if n > 1]
    verdict.jobs_twice += [f"invoke {token} started as {len(ids)} jobs: "
                           f"{', '.join(sorted(j[:8] for j in ids))}"
                           for token, ids in as_jobs.items() if len(ids) > 1]
    verdict.jobs_not_started = sorted(token for job, token in jobs.items() if not count[job])
    verdict.jobs_unanswered = sorted({e.get("token") or e["job"] for e in started
                                      if e["job"] not in jobs})


def _calls(events: list[dict], verdict: Verdict, end: float) -> None:
    invoked = {e["op"]: e for e in events if e["type"] == "invoke"}
    done = [e for e in events if e["type"] == "complete"]
    for e in done:
        invoked.pop(e["op"], None)
        verdict.codes[f"{e['f']}:{'ok' if e['ok'] else e['code']}"] += 1
        took = e["t"] - e.get("invoked", e["t"])
        side = e.get("side") or "?"
        verdict.slowest_s[side] = max(verdict.slowest_s.get(side, 0.0), took)
        if took > HUNG_AFTER_S.get(e["f"], 15.0):
            verdict.hung.append(f"{e['f']} {_what(e)} took {took:.1f} s")
    for e in invoked.values():
        verdict.hung.append(f"{e['f']} {_what(e)} never answered")
    failing: dict[str, float] = {}
    for e in sorted(done, key=lambda e: e["t"]):
        side = e.get("side") or "?"
        if e["ok"]:
            if side in failing:
                stretch = e["t"] - failing.pop(side)
                verdict.unavailable_s[side] = max(verdict.unavailable_s.get(side, 0.0), stretch)
        elif e["code"] not in NOT_A_REFUSAL:
            failing.setdefault(side, e.get("invoked", e["t"]))
            verdict.unavailable_s.setdefault(side, 0.0)
    for side, since in failing.items():
        verdict.unavailable_s[side] = max(verdict.unavailable_s.get(side, 0.0), end - since)


def _what(e: dict) -> str:
    """What an operation was for: its token, or the job it finished."""
    return e.get("token") or (f"job {e['job'][:8]}" if e.get("job") else "")


def _ids(events: list[dict], verdict: Verdict) -> None:
    ids: dict[str, list[str]] = defaultdict(list)
    for e in events:
        if e["type"] == "session" and e.get("id") and e["id"] not in ids[e["session"]]:
            ids[e["session"]].append(e["id"])
    for label, seen in ids.items():
        if len(seen) > 1:
            verdict.ids_lost.append(f"{label}: {' -> '.join(s[:8] for s in seen)}")


def _holders(samples: list[dict], names: dict[str, str], verdict: Verdict) -> None:
    """Walk the PostgreSQL samples in time; at each, who holds each run, and which
    session ids two brokers serve."""
    latest: dict[str, dict] = {}            # broker name -> its last answered overview
    open_since: dict[tuple, float] = {}     # (run, holders) -> first seen
    twice: dict[str, str] = {}
    owners: dict[str, str] = {}
    previous = None
    for s in sorted(samples, key=lambda s: s["t"]):
        if s["type"] == "overview":
            if "error" not in s:
                latest[s["broker"]] = s
            continue
        if "owners" in s:
            owners = s["owners"]
        now = s["t"]
        holders: dict[str, set[str]] = defaultdict(set)
        serving: dict[str, set[str]] = defaultdict(set)
        for run, owner in owners.items():
            if owner:
                holders[run].add(names.get(owner, owner))
        for name, view in latest.items():
            if now - view["t"] <= FRESH_S:
                for run in view["runs"]:
                    holders[run].add(name)
                for sid in view["sessions"]:
                    serving[sid].add(name)
        doubled = {run: frozenset(h) for run, h in holders.items() if len(h) > 1}
        if doubled and previous is not None:
            verdict.two_holders_s += min(now - previous, 1.0)
        for run, who in doubled.items():
            open_since.setdefault((run, who), now)
        for key in [k for k in open_since if doubled.get(k[0]) != k[1]]:
            verdict.two_holders.append(f"{key[0]}: {'+'.join(sorted(key[1]))} "
                                       f"for {now - open_since.pop(key):.1f} s")
        for sid, who in serving.items():
            if len(who) > 1:
                twice[sid] = "+".join(sorted(who))
        previous = now
    for (run, who), since in open_since.items():
        verdict.two_holders.append(f"{run}: {'+'.join(sorted(who))} "
                                   f"for {previous - since:.1f} s (at the end)")
    verdict.ids_lost += [f"{sid[:8]} served by {who}" for sid, who in twice.items()]
