"""Host leases, dormant runs and held subagent sends over real processes: a short
configured lease, a broker kill -9 and restart in the middle."""

import time

import pytest

from client import Client

from ..conftest import start_broker
from .workflow_helpers import GRANTS, granted, new_run_id, ok, path

LEASE_S = 2.0


def until(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)   # polling a condition with a deadline, not settling
    raise AssertionError(f"timed out waiting for {what}")


class Sessions:
    """Sessions opened on ``broker`` (which a test may replace after a restart)."""

    def __init__(self, broker):
        self.broker = broker
        self.opened = []

    def connect(self, name, **kw):
        session = Client.connect(name, endpoint=self.broker.endpoint, timeout=15, **kw)
        self.opened.append(session)
        return session

    def close(self):
        for session in self.opened:
            session.close()


def run_row(session, run):
    rows = session.intercom(action="list").get("workflows") or []
    return next((r for r in rows if r["runId"] == run), None)


@pytest.mark.timeout(120)
def test_a_dormant_run_holds_sends_for_its_subagent_across_a_kill9(short_tmp):
    broker = start_broker(short_tmp, "--host-lease-s", str(LEASE_S))
    sessions = Sessions(broker)
    connect = sessions.connect

    try:
        host = connect("host")
        run = new_run_id()
        granted(ok(host.register_run(run, [{"name": "plan"}])))
        planner = connect("plan", kind="stage", stage=path(run, "plan"),
                          grant=GRANTS[path(run, "plan")], transcript="t-plan")
        helper = connect("helper", parent=planner.id, grant=ok(planner.grant_child())["grant"])
        helper_id, helper_token = helper.id, helper.welcome["token"]
        peer = connect("peer")
        ok(peer.intercom(action="join", group=f"workflow:{run}"))
        for session in (helper, planner, host):
            session.close()
        # While the lease holds the run is as it was; past it, dormant.
        assert run_row(peer, run)["dormant"] is False
        until(lambda: run_row(peer, run)["dormant"], LEASE_S + 5, "the run to go dormant")
        answer = ok(peer.intercom(action="send", to="helper", message="while you were away"))
        assert answer["queued"] is True and answer["held"] is True, answer
        assert peer.intercom(action="ask", to="helper", message="?")["code"] == "run_dormant"

        broker.kill()
        broker = sessions.broker = start_broker(short_tmp, "--host-lease-s", str(LEASE_S))
        until(lambda: peer.connected, 15, "the peer back")
        planner = connect("plan", kind="stage", stage=path(run, "plan"),
                          grant=GRANTS[path(run, "plan")], transcript="t-plan")
        helper = connect("helper", session_id=helper_id,
                         identity={"sessionId": helper_id, "reclaimSecret": helper_token})
        assert helper.id == helper_id, helper.welcome
        msg = helper.receive(timeout=10)
        assert msg is not None and msg["message"] == "while you were away"
        assert helper.receive(timeout=1) is None                   # once only
    finally:
        sessions.close()
        sessions.broker.stop()


@pytest.mark.timeout(60)
def test_a_post_mortem_ask_reaches_the_host_through_receive_and_its_reply_the_asker(short_tmp):
    import threading
    broker = start_broker(short_tmp)
    sessions = Sessions(broker)
    connect = sessions.connect

    try:
        host = connect("host")
        run = new_run_id()
        granted(ok(host.register_run(run, [{"name": "review"}], post_mortem=True)))
        reviewer = connect("review", kind="stage", stage=path(run, "review"),
                           grant=GRANTS[path(run, "review")], transcript="t-review")
        peer = connect("peer")
        ok(peer.intercom(action="join", group=f"workflow:{run}"))
        reviewer.close()
        ok(host.end_run(run))
        rows = peer.intercom(action="list")["closedStages"]
        assert [r["label"] for r in rows] == ["closed · reply: post-mortem only"]
        answers = []
        asking = threading.Thread(target=lambda: answers.append(
            peer.intercom(action="ask", to=path(run, "review"), message="why that verdict?")))
        asking.start()
        ask = host.receive(timeout=10)
        assert ask is not None and ask["expectsReply"] and ask["stage"] == path(run, "review")
        ok(host.intercom(action="reply", replyTo=ask["id"], message="the tests were thin"))
        asking.join(10)
        assert answers and answers[0]["message"] == "the tests were thin", answers
    finally:
        sessions.close()
        sessions.broker.stop()
