"""Sticky workflow delivery across a broker killed with SIGKILL.

Each test runs a real broker process on ipc sockets in a short tmp dir with a real
SQLite database, kills it by PID with SIGKILL (no shutdown code runs), starts a new
broker on the same data dir and database, and checks what the stages get.

Sessions are not reopened by hand unless the test says so: a client that loses its
broker says hello again with its session id and token and resends every request
still owed an answer. "The host is back" means its ``status`` call answers ok.

Durability barrier: a ``queued`` answer is sent only after its row is committed, and
the persistence worker commits in the order the engine asked, so once a queued answer
arrives every write the broker asked for before it (such as a stage's receipts) is
durable too. Tests that need receipts to survive the kill wait for one such answer.
"""

from __future__ import annotations

import signal
import threading
import time
import uuid
from concurrent.futures import Future

import pytest

from schemas.limits import CALL_TIMEOUT_S, QUEUED_PER_TARGET
from schemas.protocol import envelope
from tests.conftest import start_broker
from tests.integration.workflow_helpers import GRANTS, granted, new_run_id, ok, path, send_for_id, take

RECEIVE_S = 15.0
BACK_S = 30.0
STAGES = [{"name": "plan"}, {"name": "impl"}]


# -- harness -------------------------------------------------------------------------------

class Crashable:
    """One broker at a time on one data dir; killed and restarted by PID."""

    def __init__(self, data_dir) -> None:
        self.data_dir = data_dir
        self.brokers = []
        self.sessions = []
        self.current = self._start()

    def _start(self):
        broker = start_broker(self.data_dir)
        self.brokers.append(broker)
        return broker

    @property
    def endpoint(self) -> str:
        return self.current.endpoint

    def connect(self, name: str, **kwargs):
        from client import Client

        session = Client.connect(name=name, endpoint=self.endpoint, timeout=15, **kwargs)
        self.sessions.append(session)
        return session

    def kill9(self) -> None:
        broker = self.current
        assert broker.proc.poll() is None, f"broker {broker.pid} died before the kill"
        returncode = broker.stop(signal.SIGKILL)
        assert returncode == -signal.SIGKILL, returncode

    def restart(self):
        assert self.current.proc.poll() is not None, "the previous broker is still running"
        self.current = self._start()
        assert self.current.db == self.brokers[0].db
        return self.current

    def wait_back(self, *sessions) -> None:
        """Each session answers through the current broker (it said hello again)."""
        deadline = time.monotonic() + BACK_S
        for session in sessions:
            while True:
                assert self.current.proc.poll() is None, \
                    f"restarted broker exited: {self.current.log.read_text(errors='replace')[-2000:]}"
                result = session.intercom(action="status")
                if result.get("ok"):
                    break
                assert time.monotonic() < deadline, f"{session.name} not back: {result}"

    def close(self) -> None:
        for session in self.sessions:
            session.close()
        for broker in self.brokers:
            broker.stop()


@pytest.fixture
def crashable(short_tmp):
    harness = Crashable(short_tmp)
    yield harness
    harness.close()


def queued(result: dict) -> dict:
    ok(result)
    assert result.get("queued") is True, result
    return result


def host_run(crashable, stages=STAGES):
    host = crashable.connect("host")
    run = new_run_id()
    granted(ok(host.register_run(run, stages)))
    return host, run


def host_back(crashable, host, run: str) -> None:
    """The host answers through the restarted broker and holds its run again.

    A host that re-hellos should keep its ``workflow:<run>`` membership by itself
    (see test_host_keeps_its_invocation_membership_across_kill9); registering the run
    again, as a resumed workflow does, makes the remaining tests independent of that.
    """
    crashable.wait_back(host)
    ok(host.register_run(run, STAGES))


def assert_nothing_more(stage, sender, target: str) -> None:
    """The stage's next message is a live marker sent now: nothing else was owed."""
    marker = f"marker-{uuid.uuid4().hex[:8]}"
    result = ok(sender.intercom(action="send", to=target, message=marker))
    assert result.get("delivered") is True, result
    msg = stage.receive(RECEIVE_S)
    assert msg is not None, "the live marker never arrived"
    assert msg["message"] == marker, f"duplicate or stray message before the marker: {msg['message']!r}"


def receive_until_marker(stage, sender, target: str) -> list[str]:
    """Every message the stage gets before a live marker sent now (the marker excluded)."""
    marker = f"marker-{uuid.uuid4().hex[:8]}"
    result = ok(sender.intercom(action="send", to=target, message=marker))
    assert result.get("delivered") is True, result
    texts = []
    while True:
        msg = stage.receive(RECEIVE_S)
        assert msg is not None, f"the live marker never arrived; got {texts}"
        if msg["message"] == marker:
            return texts
        texts.append(msg["message"])


def send_with_id(session, to: str, message: str, msg_id: str | None = None) -> tuple[str, dict]:
    """A send under an id the test chose: the client's own ``call`` envelope.

    Only for retrying an id on purpose: the public ``intercom`` call picks the id
    itself (its answer names it as ``messageId``) and cannot reuse one, so this goes
    through the session's private transport.
    """
    msg_id = msg_id or str(uuid.uuid4())
    future = session._transport.request(
        envelope("call", id=msg_id, action="send", to=to, message=message))
    return msg_id, future.result(CALL_TIMEOUT_S)


def durability_barrier(host, run: str) -> None:
    """Everything the broker asked to write before this answer is committed."""
    queued(host.intercom(action="send", to=path(run, "barrier", uuid.uuid4().hex[:6]),
                         message="barrier"))


def queue_backlog(host, run: str) -> list[str]:
    """20 exact entries for plan with pattern entries in between; the texts plan must
    get, in FIFO order. Entries for other targets are mixed in too."""
    expected = []
    for n in range(20):
        text = f"exact-{n:02d}"
        answer = queued(host.intercom(action="send", to=path(run, "plan"), message=text))
        assert answer["position"] == n + 1, answer
        expected.append(text)
        if n % 4 == 1:
            pattern = path(run, "**") if n % 8 == 1 else path(run, "pl*")
            text = f"pattern-{n:02d}"
            queued(host.intercom(action="send", to=pattern, message=text))
            expected.append(text)
        if n % 7 == 3:
            queued(host.intercom(action="send", to=path(run, "impl"), message=f"impl-{n:02d}"))
            queued(host.intercom(action="send", to=path(run, "ghost"), message=f"ghost-{n:02d}"))
    return expected


# -- tests -----------------------------------------------------------------------------------

@pytest.mark.timeout(120)
def test_host_keeps_its_invocation_membership_across_kill9(crashable):
    host, run = host_run(crashable)
    lead = crashable.connect("lead")
    ok(lead.intercom(action="join", group=f"workflow:{run}"))
    queued(host.intercom(action="send", to=path(run, "plan"), message="before"))

    crashable.kill9()
    crashable.restart()
    crashable.wait_back(host, lead)

    for session in (host, lead):
        status = ok(session.intercom(action="status"))
        assert f"workflow:{run}" in status["groups"], (session.name, status["groups"])
        answer = session.intercom(action="send", to=path(run, "**"), message=f"after from {session.name}")
        assert answer.get("ok") is True and answer.get("queued") is True, (session.name, answer)


@pytest.mark.timeout(120)
def test_queued_entries_survive_kill9_and_reach_the_stage_once_in_fifo_order(crashable):
    host, run = host_run(crashable)
    expected = queue_backlog(host, run)
    assert len(expected) == 25

    crashable.kill9()
    crashable.restart()
    host_back(crashable, host, run)

    plan = crashable.connect("plan", kind="stage", stage=path(run, "plan"), transcript="plan-t1",
                             grant=GRANTS[path(run, "plan")])
    got = take(plan, len(expected), RECEIVE_S)
    assert [m["message"] for m in got] == expected
    assert all(m["receivedBeforeStart"] is True and m["from"] == host.id for m in got)
    assert len({m["id"] for m in got}) == len(got)
    assert_nothing_more(plan, host, path(run, "plan"))


@pytest.mark.timeout(120)
def test_restored_run_lists_its_queued_entries_after_kill9(crashable):
    host, run = host_run(crashable)
    expected = queue_backlog(host, run)

    crashable.kill9()
    crashable.restart()
    host_back(crashable, host, run)

    rows = [r for r in ok(host.intercom(action="list")).get("workflows", []) if r["runId"] == run]
    assert len(rows) == 1, rows
    row = rows[0]
    assert row["host"] == host.id and row["dormant"] is False, row
    plan = next(s for s in row["stages"] if s["name"] == "plan")
    assert plan["label"] == "PENDING" and plan["queued"] == len(expected), plan
    future = {f["target"]: f["queued"] for f in row["future"]}
    assert future[path(run, "ghost")] == 3 and future[path(run, "**")] == 3, future


@pytest.mark.timeout(150)
@pytest.mark.parametrize("reconnect", ["automatic", "new-connection"])
def test_taken_entries_are_not_redelivered_after_kill9_to_the_same_transcript(crashable, reconnect):
    host, run = host_run(crashable)
    expected = queue_backlog(host, run)
    crashable.kill9()
    crashable.restart()
    host_back(crashable, host, run)
    plan = crashable.connect("plan", kind="stage", stage=path(run, "plan"), transcript="plan-t1",
                             grant=GRANTS[path(run, "plan")])
    assert [m["message"] for m in take(plan, len(expected), RECEIVE_S)] == expected
    ok(plan.intercom(action="status"))       # its receipts are handled ...
    durability_barrier(host, run)             # ... and committed
    if reconnect == "new-connection":
        plan.close()

    crashable.kill9()
    crashable.restart()
    host_back(crashable, host, run)
    if reconnect == "automatic":
        crashable.wait_back(plan)              # the same session said hello again
    else:
        plan = crashable.connect("plan", kind="stage", stage=path(run, "plan"), transcript="plan-t1",
                             grant=GRANTS[path(run, "plan")])

    assert_nothing_more(plan, host, path(run, "plan"))


@pytest.mark.timeout(120)
def test_sends_queued_before_a_mid_stream_kill9_are_delivered_after_restart(crashable):
    _host, run = host_run(crashable)
    # The sender starts in the invocation group (its home group), so the membership
    # is part of its startup identity and the resends after the restart keep it.
    host = crashable.connect("streamer", group=f"workflow:{run}")
    # Several targets that all match "plan", so the stream stays under 50 per target.
    targets = [path(run, t) for t in ("plan", "*", "**", "p*", "pl*", "pla*", "*n", "*an", "*lan", "p*n")]
    total = 40 * len(targets)
    window = 8
    futures: list[Future] = [None] * total
    answers: list[dict | None] = [None] * total
    enough = threading.Event()
    failure: list[BaseException] = []

    def wait_answer(n: int) -> None:
        try:
            answers[n] = futures[n].result(60)
        except TimeoutError:
            raise AssertionError(f"send m{n:03d} (to {targets[n % len(targets)]}) was never "
                                 f"answered within 60 s of being waited for") from None

    def stream() -> None:
        try:
            done = 0
            for n in range(total):
                futures[n] = host.send_nowait(targets[n % len(targets)], f"m{n:03d}")
                if n >= window:
                    wait_answer(n - window)
                    done += 1
                    if done == 60:
                        enough.set()
            for n in range(max(0, total - window), total):
                wait_answer(n)
        except BaseException as exc:  # reported by the test thread
            failure.append(exc)
            enough.set()

    sender = threading.Thread(target=stream, name="sender", daemon=True)
    sender.start()
    assert enough.wait(30), "the sender never got going"
    assert not failure, failure
    answered_before = [n for n in range(total)
                       if futures[n] is not None and futures[n].done()]
    crashable.kill9()
    assert len(answered_before) < total, "the stream finished before the kill; nothing was mid-stream"
    crashable.restart()
    sender.join(90)
    assert not sender.is_alive(), "the sender is still waiting for answers after the restart"
    assert not failure, f"{failure[0]} (answered before the kill: {len(answered_before)})"

    pre_kill = [n for n in answered_before if answers[n].get("queued")]
    assert len(pre_kill) == len(answered_before), [answers[n] for n in answered_before if not answers[n].get("queued")]
    queued_all = [n for n in range(total) if answers[n].get("ok") and answers[n].get("queued")]
    plan = crashable.connect("plan", kind="stage", stage=path(run, "plan"), transcript="plan-t1",
                             grant=GRANTS[path(run, "plan")])
    got = [m["message"] for m in take(plan, len(queued_all), RECEIVE_S)]
    got += receive_until_marker(plan, host, path(run, "plan"))

    sent_text = {f"m{n:03d}" for n in queued_all}
    missing = sorted(sent_text - set(got))
    assert not missing, f"{len(missing)} queued sends never delivered: {missing[:10]}"
    pre_kill_text = [f"m{n:03d}" for n in pre_kill]
    pre_kill_set = set(pre_kill_text)
    assert [t for t in got if t in pre_kill_set] == pre_kill_text, \
        "pre-kill entries missing, duplicated or out of FIFO order"
    # Sends in flight at the kill may be queued twice when the old broker committed
    # them but died before answering (the client resends under the same id); that is
    # test_send_retried_with_the_same_id_after_kill9_is_not_queued_twice, made
    # deterministic. Here it is only reported.
    duplicated = sorted(t for t in set(got) if got.count(t) > 1)
    print(f"answered before the kill: {len(answered_before)}/{total}; queued: {len(queued_all)}; "
          f"delivered: {len(got)}; in-flight duplicates: {duplicated}")


@pytest.mark.timeout(120)
def test_send_retried_with_the_same_id_after_kill9_is_not_queued_twice(crashable):
    """A client resends, under the same id, every request still owed an answer after
    its broker restarts; if the old broker committed the entry but died before the
    answer left, the retry must not queue a second copy (fault injected: the answer
    is 'lost' by retrying the answered id)."""
    host, run = host_run(crashable)
    msg_id, first = send_with_id(host, path(run, "plan"), "exactly once")
    queued(first)

    crashable.kill9()
    crashable.restart()
    host_back(crashable, host, run)
    _, retry = send_with_id(host, path(run, "plan"), "exactly once", msg_id=msg_id)
    ok(retry)

    plan = crashable.connect("plan", kind="stage", stage=path(run, "plan"), transcript="plan-t1",
                             grant=GRANTS[path(run, "plan")])
    (msg,) = take(plan, 1, RECEIVE_S)
    assert msg["id"] == msg_id and msg["message"] == "exactly once"
    assert_nothing_more(plan, host, path(run, "plan"))


@pytest.mark.timeout(120)
def test_queue_limit_still_holds_after_kill9(crashable):
    host, run = host_run(crashable)
    for n in range(QUEUED_PER_TARGET):
        queued(host.intercom(action="send", to=path(run, "plan"), message=f"m{n}"))

    crashable.kill9()
    crashable.restart()
    host_back(crashable, host, run)

    refused = host.intercom(action="send", to=path(run, "plan"), message="m50")
    assert refused.get("ok") is False and refused["code"] == "queue_full", refused
    assert refused["error"] == "Pending stage message queue is full (limit 50)", refused
    plan = crashable.connect("plan", kind="stage", stage=path(run, "plan"), transcript="plan-t1",
                             grant=GRANTS[path(run, "plan")])
    got = take(plan, QUEUED_PER_TARGET, RECEIVE_S)
    assert [m["message"] for m in got] == [f"m{n}" for n in range(QUEUED_PER_TARGET)]


@pytest.mark.timeout(120)
def test_end_run_after_kill9_notifies_with_the_queued_message_ids(crashable):
    host, run = host_run(crashable)
    exact_id, _ = send_for_id(host, path(run, "impl"), "never started")
    ghost_id, _ = send_for_id(host, path(run, "ghost"), "outside the known set")
    delivered_id, _ = send_for_id(host, path(run, "plan"), "will be taken")

    crashable.kill9()
    crashable.restart()
    host_back(crashable, host, run)
    plan = crashable.connect("plan", kind="stage", stage=path(run, "plan"), transcript="plan-t1",
                             grant=GRANTS[path(run, "plan")])
    (msg,) = take(plan, 1, RECEIVE_S)
    assert msg["id"] == delivered_id
    while host.next_event(0) is not None:
        pass

    result = ok(host.end_run(run))

    assert result["undeliverable"] == 2, result
    notices = []
    while (event := host.next_event(0)) is not None:
        if event.get("event") == "undeliverable":
            notices.append(event)
    assert {e["messageId"] for e in notices} == {exact_id, ghost_id}, notices


@pytest.mark.timeout(120)
def test_one_queue_for_a_stage_name_and_id_still_holds_after_kill9(crashable):
    host, run = host_run(crashable, [{"name": "plan", "id": "s-plan"}, {"name": "impl"}])
    for n in range(30):
        queued(host.intercom(action="send", to=path(run, "plan"), message=f"n{n}"))
    for n in range(19):
        queued(host.intercom(action="send", to=path(run, "s-plan"), message=f"i{n}"))

    crashable.kill9()
    crashable.restart()
    host_back(crashable, host, run)

    last = queued(host.intercom(action="send", to=path(run, "s-plan"), message="i19"))
    assert last["position"] == QUEUED_PER_TARGET, last
    refused = host.intercom(action="send", to=path(run, "plan"), message="51st")
    assert refused.get("ok") is False and refused["code"] == "queue_full", refused
    assert ok(host.intercom(action="list"))["workflows"][0]["future"] == []


@pytest.mark.timeout(120)
def test_settled_entries_of_a_failed_stage_are_listed_and_not_reported_again_after_kill9(crashable):
    host, run = host_run(crashable)
    settled_id, _ = send_for_id(host, path(run, "impl"), "impl never starts")
    ok(host.set_stage_state(run, "impl", "failed"))
    durability_barrier(host, run)

    crashable.kill9()
    crashable.restart()
    crashable.wait_back(host)
    ok(host.register_run(run, STAGES))

    (row,) = [r for r in ok(host.intercom(action="list"))["workflows"] if r["runId"] == run]
    (impl,) = [s for s in row["stages"] if s["name"] == "impl"]
    assert {s["messageId"]: s["state"] for s in impl["deliveryStates"]} == {settled_id: "stage-terminal"}
    while host.next_event(0) is not None:
        pass
    ok(host.end_run(run))
    notices = []
    while (event := host.next_event(0)) is not None:
        if event.get("event") == "undeliverable":
            notices.append(event["messageId"])
    assert len(notices) == 1 and settled_id not in notices, notices   # the barrier's only
