"""Stages of an ended run: listed closed while the host is open; late messages."""

from schemas.protocol import envelope

from .harness import Bus
from .test_workflow import stage


def ended(late_router):
    bus = Bus(liveness_s=1e9)
    bus.hello("host")
    bus.workflow(b"host", "register_run", runId="r1", stages=[{"name": "plan", "id": "s-plan"}],
                 **({} if late_router is None else {"lateRouter": late_router}))
    planner = stage(bus, "plan", "workflow:r1/plan")
    bus.hello("peer")
    bus.call(b"peer", "join", group="workflow:r1")
    bus.feed(b"plan", envelope("bye"))
    assert bus.workflow(b"host", "end_run", runId="r1")["ok"]
    return bus, planner["sessionId"]


def test_closed_stages_are_listed_with_their_reply_mode_while_the_host_is_open():
    bus, planner = ended(True)
    (row,) = bus.call(b"peer", "list")["closedStages"]
    assert row["target"] == "workflow:r1/plan" and row["label"] == "closed · reply: post-mortem only"
    assert row["sessionId"] == planner
    bus2, _ = ended(None)
    assert bus2.call(b"host", "list")["closedStages"][0]["label"] == "closed · reply: unavailable"
    bus.feed(b"host", envelope("bye"))
    assert "closedStages" not in bus.call(b"peer", "list")


def test_an_ask_to_a_post_mortem_stage_goes_to_the_host_by_path_or_session_id():
    bus, planner = ended(True)
    for n, to in enumerate(["workflow:r1/plan", planner]):
        bus.feed(b"peer", envelope("call", id=f"a{n}", action="ask", to=to, message="why?"))
        (msg,) = bus.sends(b"host", "msg")
        assert msg["id"] == f"a{n}" and msg["postMortem"] is True and msg["target"] == "workflow:r1/plan"
        out = bus.feed(b"host", envelope("call", id=f"r{n}", action="reply", replyTo=f"a{n}",
                                         message="because"))
        answers = [c.env for c in out if getattr(c, "identity", None) == b"peer"
                   and c.env.get("re") == f"a{n}"]
        assert answers and answers[0]["message"] == "because"


def test_an_ask_to_an_unavailable_stage_is_refused_with_guidance_and_a_send_reaches_the_host():
    bus, planner = ended(False)
    refused = bus.call(b"peer", "ask", to="workflow:r1/plan", message="why?")
    assert refused["code"] == "stage_closed" and "start new work" in refused["error"]
    sent = bus.call(b"peer", "send", to="workflow:r1/plan", message="fyi")
    (msg,) = bus.sends(b"host", "msg")
    assert sent["delivered"] is True and sent["to"] == bus.call(b"host", "status")["sessionId"]
    assert msg["message"] == "fyi" and msg["postMortem"] is True


def test_a_session_outside_the_run_cannot_reach_its_closed_stages():
    bus, planner = ended(True)
    bus.hello("stranger")
    assert bus.call(b"stranger", "ask", to=planner, message="?")["ok"] is False
    assert "closedStages" not in bus.call(b"stranger", "list")
