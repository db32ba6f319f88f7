"""One round: a fresh bus under traffic, one fault, a drain, and the checker's verdict.

What it owns: the order of a round and the :class:`Testbed` every round of a run
shares (the network, the PostgreSQL server, the key directory). A round starts its
brokers on a schema of its own, the sampler, and the workers; waits for every worker's
``ready``; lets traffic run (:attr:`Timing.warmup_s`), applies the fault (the nemesis
holds and heals it), lets traffic run until :attr:`Timing.seconds` have passed and at
least :attr:`Timing.after_s` since the heal; then tells the workers to drain and waits
until every message answered ``queued`` or ``delivered`` has arrived and every invoke
job answered ``queued`` was started, or :attr:`Timing.drain_s` has passed; then stops
everything it started and checks.

Invariant: whatever happens in a round (an exception, Ctrl-C), every process it
started is ended by its PID before the round returns or raises.
"""

from __future__ import annotations

import json
import shutil
import threading
import time
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from . import checker
from .cluster import LEASE_S, LIVENESS_S, ROOT, Broker, Postgres, child_env, make_keys
from .nemesis import Fault, Stage
from .net import Network, open_network
from .sampler import start_sampler
from .workload import AGENT, Worker


@dataclass
class Timing:
    seconds: float = 60.0      # traffic, from the workers' ready to the drain
    warmup_s: float = 8.0      # traffic before the fault
    hold_s: float = 20.0       # how long a fault holds (past the lease by default)
    after_s: float = 8.0       # traffic after the heal, at least
    drain_s: float = 45.0      # the longest wait for what is owed
    interval_s: float = 0.3    # between one worker's calls
    lease_s: float = LEASE_S
    liveness_s: float = LIVENESS_S
    adopt_grace_s: float | None = None     # the broker's default (10 s) when None


@dataclass
class Testbed:
    net: Network
    pg: Postgres
    keys: Path
    root: Path
    brokers: int
    rounds: int = 0


@dataclass
class Round:
    fault: Fault
    verdict: checker.Verdict
    timeline: list[tuple[float, str]]
    started: float
    drained_s: float
    files: Path
    ids: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)     # what went wrong in the set-up


SCRIPTS = ROOT / "scripts"
LINK_WAIT_S = 15.0


@contextmanager
def open_testbed(brokers: int, clients: int = 1, root: Path | None = None):
    """The network (PostgreSQL's host, ``brokers`` broker hosts, client hosts and the
    observer's), the server and the keys; all removed on the way out, but the files
    when ``root`` (the caller's directory) is given."""
    import tempfile
    with ExitStack() as stack:
        if root is None:
            root = Path(tempfile.mkdtemp(prefix="icf-", dir="/tmp"))
            stack.callback(shutil.rmtree, root, True)
        root.chmod(0o755)             # the postgres user reaches its directory through it
        # One broker: the live role's senders get a host of their own, "s1" (no fault
        # cuts it: the nemesis cuts the "c" hosts), so a cut of their receivers' host
        # leaves them sending.
        names = ["pg", *[f"b{i + 1}" for i in range(brokers)],
                 *[f"c{i + 1}" for i in range(clients)], *(["s1"] if brokers == 1 else []), "obs"]
        net = stack.enter_context(open_network(names))
        pg = Postgres(net.hosts["pg"], root / "pg")
        pg.init()
        stack.callback(pg.stop)
        pg.start()
        yield Testbed(net, pg, make_keys(root / "keys"), root, brokers)


def env(root: Path) -> dict:
    extra = {"PYTHONPATH": f"{ROOT}:{SCRIPTS}"}
    return child_env(root, extra)


def play(bed: Testbed, fault: Fault, timing: Timing, log=print) -> Round:
    """One round of ``fault``. Raises RuntimeError when the bus cannot be set up."""
    bed.rounds += 1
    schema = f"r{bed.rounds}_{fault.letter}"
    files = bed.root / schema
    files.mkdir()
    url = bed.pg.url(schema)
    extra = ["--broker-lease-s", f"{timing.lease_s:g}", "--liveness-s", f"{timing.liveness_s:g}"]
    if timing.adopt_grace_s is not None:
        extra += ["--adopt-grace-s", f"{timing.adopt_grace_s:g}"]
    brokers = [Broker(f"b{i + 1}", bed.net.hosts[f"b{i + 1}"], files / f"b{i + 1}", url, bed.keys,
                      faketime=fault.skew if i == 0 else None, extra=extra, agents=(AGENT,))
               for i in range(bed.brokers)]
    clients = [h for h in bed.net.hosts if h.startswith("c")]
    workers: list[Worker] = []
    ids: dict[str, str] = {}
    stop = threading.Event()
    with ExitStack() as stack:
        for broker in brokers:
            stack.callback(broker.stop)
            broker.start()
        notes = _wait_linked(brokers)
        endpoints = ",".join(b.endpoint for b in brokers)
        names = ",".join(b.name for b in brokers)
        sampler = start_sampler(bed.net.hosts["obs"].prefix(), files / "samples.jsonl",
                                f"postgresql://postgres@{bed.pg.host.address}:5432/postgres",
                                schema, {b.name: b.endpoint for b in brokers}, bed.keys,
                                env(bed.root), ROOT)
        stack.callback(_end_sampler, sampler)
        for role in ("sticky", "live", "invoke"):
            for i in range(bed.brokers):
                host = bed.net.hosts[clients[i % len(clients)]]
                args = ["--role", role, "--index", str(i), "--endpoints", endpoints,
                        "--names", names, "--keys", str(bed.keys), "--tag", schema,
                        "--interval", f"{timing.interval_s:g}"]
                parts = [(host, [], f"{role}{i}")]
                if role == "live" and "s1" in bed.net.hosts:     # receiver first: a waits for it
                    parts = [(host, ["--only", "b"], f"{role}{i}-b"),
                             (bed.net.hosts["s1"], ["--only", "a"], f"{role}{i}-a")]
                for where, only, label in parts:
                    worker = Worker(where.prefix(), [*args, *only], files / f"{label}.jsonl",
                                    env(bed.root), ROOT)
                    stack.callback(worker.stop)
                    workers.append(worker)
        for worker in workers:
            worker.wait_ready(90)
        started = time.monotonic()
        log(f"  [{fault.letter}] traffic on {len(brokers)} brokers, {len(workers)} workers")
        stage = Stage(bed.net, bed.pg, brokers, clients, stop, hold_s=timing.hold_s,
                      lease_s=timing.lease_s)
        stack.callback(bed.net.heal)            # a fault cut short still heals
        stop.wait(timing.warmup_s)
        fault.act(stage)
        healed = time.monotonic()
        stop.wait(max(started + timing.seconds - healed, timing.after_s))
        traffic_end = time.monotonic()
        for worker in workers:
            worker.tell("drain")
        drained_s = _drain(workers, timing.drain_s)
        for broker in brokers:
            ids.update({one: broker.name for one in broker.ids})
        for worker in workers:
            worker.stop()
    histories = [checker.read_lines(w.history) for w in workers]
    cut = (stage.target.name, *stage.cut_window) if stage.cut_window else None
    verdict = checker.check(histories, checker.read_lines(files / "samples.jsonl"), ids,
                            traffic_end, cut)
    timeline = [(t - started, what) for t, what in stage.timeline]
    return Round(fault, verdict, timeline, started, drained_s, files, ids, notes)


def _wait_linked(brokers: list[Broker], limit_s: float = LINK_WAIT_S) -> list[str]:
    """Wait until every broker says it linked with every other; what is still not
    linked after ``limit_s`` (the round goes on: the checker judges what follows)."""
    def missing() -> list[str]:
        return [f"{b.name} not linked with {o.name}" for b in brokers for o in brokers
                if o is not b and o.broker_id not in b.linked()]
    began = time.monotonic()
    while missing() and time.monotonic() - began < limit_s:
        time.sleep(0.1)           # reading the logs again: waiting for the brokers' word
    return [f"{one} after {limit_s:g} s" for one in missing()]


def _drain(workers: list[Worker], limit_s: float) -> float:
    """Wait until every message answered queued or delivered arrived and every invoke
    job answered queued was started (read from the histories), at most ``limit_s``;
    the seconds waited."""
    began = time.monotonic()
    while time.monotonic() - began < limit_s:
        histories = [checker.read_lines(w.history) for w in workers]
        queued, delivered = checker.expected(histories)
        got = checker.receipts(histories)
        jobs = checker.invoke_jobs(histories)
        started = checker.starts(histories)
        if all(got[t] for t in queued | delivered) and all(started[j] for j in jobs):
            break
        time.sleep(0.5)           # reading the histories again: waiting for receipts
    return time.monotonic() - began


def _end_sampler(sampler) -> None:
    try:
        sampler.stdin.close()
        sampler.wait(15)
    except Exception:
        sampler.kill()
        sampler.wait(10)


def summary(round_: Round) -> dict:
    v = round_.verdict
    return {"fault": round_.fault.letter, "queued": v.queued, "lost": len(v.lost),
            "doubled": len(v.doubled), "two_holders_s": round(v.two_holders_s, 1),
            "ids_lost": len(v.ids_lost), "delivered_not_received": len(v.delivered_not_received),
            "hung": len(v.hung), "jobs_queued": v.jobs_queued, "jobs_started": v.jobs_started,
            "jobs_started_twice": len(v.jobs_twice),
            "unavailable_s": {k: round(s, 1) for k, s in sorted(v.unavailable_s.items())},
            "cut": None if v.cut is None else {
                "made": v.cut.made, "delivered": v.cut.delivered, "received": v.cut.received,
                "after_heal": v.cut.after_heal, "via": dict(v.cut.via),
                "slowest_s": round(v.cut.slowest_s, 1), "copies_dropped": v.cut.copies_dropped,
                "moves": v.cut.moves, "not_received": v.cut.not_received},
            "failed": v.failed}


def dump(round_: Round) -> None:
    (round_.files / "verdict.json").write_text(json.dumps(summary(round_), indent=1))
