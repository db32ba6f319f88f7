"""The ``stats`` request (broker.core.assembly.figures), driven through the engine with a
fake clock: who may ask, and what each figure counts."""

from __future__ import annotations

from broker.core.kernel.inputs import ShellFigures
from schemas.protocol import envelope

from .harness import Bus
from .test_workflow import hosted, queue, send

CONTROL = {"sessionKind": "control"}


def stats(bus: Bus, identity: bytes = b"ops", **fields) -> dict:
    return bus.request(identity, "stats", **fields)


def with_control(bus: Bus, name: str = "ops") -> Bus:
    assert bus.hello(name, group="team", **CONTROL)["ok"]
    return bus


def test_a_session_asking_for_stats_is_refused_control_only():
    bus = Bus()
    bus.hello("alice", group="team")
    answer = stats(bus, b"alice")
    assert answer["ok"] is False and answer["code"] == "control_only"


def test_top_out_of_range_is_invalid_params():
    bus = with_control(Bus())
    assert stats(bus, top=0)["code"] == "invalid_params"
    assert stats(bus, top=101)["code"] == "invalid_params"
    assert stats(bus, top="3")["code"] == "bad_envelope"


def test_sessions_are_counted_by_kind_and_groups_by_name():
    bus = Bus()
    bus.hello("alice", group="team")
    bus.hello("bob", group="other")
    bus.hello("child", group="team", sessionKind="noninteractive")
    with_control(bus)
    answer = stats(bus)
    assert answer["sessions"] == {"local": 4, "mirrored": 0,
                                  "byKind": {"control": 1, "interactive": 2, "noninteractive": 1}}
    assert answer["groups"] == {"count": 2}


def test_backlog_lists_the_sessions_furthest_behind_first_up_to_top():
    bus = with_control(Bus())
    for name in ("a", "b", "c"):
        bus.hello(name, group="team")
    bus.wrote({b"a": 100, b"b": 3000, b"c": 50})
    answer = stats(bus, top=2)
    assert [(row["name"], row["backlogBytes"]) for row in answer["backlog"]["top"]] == \
        [("b", 3000), ("a", 100)]
    assert answer["backlog"]["bytes"] == 3150


def test_routed_messages_settled_asks_and_refusals_are_counted():
    bus = with_control(Bus())
    bus.hello("alice", group="team")
    bus.hello("bob", group="team")
    assert bus.call(b"alice", "send", to="bob", message="hi")["delivered"]
    bus.feed(b"alice", envelope("call", id="ask-1", action="ask", to="bob", message="q?"))
    assert bus.call(b"bob", "reply", replyTo="ask-1", message="a")["ok"]
    assert bus.call(b"alice", "send", to="nobody", message="x", msg_id="lost-1")["code"] == \
        "target_not_found"
    counters = stats(bus)["counters"]
    assert counters["messagesRouted"] == 2          # the send and the ask (a reply settles)
    assert counters["asksSettled"] == 1
    assert counters["refusals"] == {"target_not_found": 1} and counters["refused"] == 1


def test_the_latest_refusals_name_code_caller_and_request():
    bus = with_control(Bus())
    bus.hello("alice", group="team")
    bus.call(b"alice", "send", to="nobody", message="x", msg_id="lost-1")
    (refusal,) = stats(bus)["lastRefusals"]
    assert refusal["code"] == "target_not_found" and refusal["name"] == "alice"
    assert refusal["re"] == "lost-1" and refusal["session"]


def test_queued_entries_are_listed_per_run_and_target_largest_first():
    bus = with_control(hosted())
    for n in range(3):
        assert queue(bus, b"host", "workflow:r1/plan", f"p{n}")["queued"]
    assert queue(bus, b"host", "workflow:r1/audit", "a0")["queued"]
    answer = stats(bus)
    assert [(q["target"], q["entries"]) for q in answer["queues"]["top"]] == \
        [("workflow:r1/plan", 3), ("workflow:r1/audit", 1)]
    assert answer["queues"]["entries"] == 4 and answer["queues"]["bytes"] == 8
    (run,) = answer["runs"]["top"]
    assert run["runId"] == "r1" and run["host"] == "host" and run["entries"] == 4
    assert answer["runs"]["live"] == 1 and answer["runs"]["dormant"] == 0


def test_an_ended_run_with_stages_that_ran_counts_as_closed():
    bus = with_control(hosted())
    assert bus.hello("planner", sessionKind="stage", stage="workflow:r1/plan")["ok"]
    assert bus.workflow(b"host", "end_run", runId="r1")["ok"]
    assert stats(bus)["runs"] | {"top": []} == {"live": 0, "dormant": 0, "closed": 1,
                                                "elsewhere": 0, "top": []}


def test_stats_carries_the_shell_figures_it_was_last_given():
    bus = with_control(Bus())
    assert stats(bus)["store"]["fileBytes"] is None
    bus.engine.handle(ShellFigures(pid=42, started_at=bus.now - 5, store_file_bytes=4096,
                                          commit_p50_s=0.002, commit_p99_s=0.01, commits=7,
                                          pending_records=3))
    answer = stats(bus)
    assert answer["store"] == {"fileBytes": 4096, "commitP50S": 0.002, "commitP99S": 0.01,
                               "commits": 7, "pendingRecords": 3}
    assert answer["broker"]["pid"] == 42 and answer["broker"]["uptimeS"] == 5


def test_sessions_opening_and_leaving_and_refusals_are_noted_for_the_log():
    bus = Bus()
    bus.hello("alice", group="team")
    send(bus, b"alice", "nobody")
    bus.feed(b"alice", envelope("bye"))
    notes = [(event, fields.get("name"), fields.get("code") or fields.get("reason"))
             for event, fields in bus.engine.take_notes()]
    assert notes == [("session_opened", "alice", None),
                     ("request_refused", "alice", "target_not_found"),
                     ("session_left", "alice", "closed")]
    assert bus.engine.take_notes() == []


def test_a_linked_broker_is_listed_and_one_gone_quiet_is_noted_unreachable_with_its_sessions():
    from .brokers_in_memory import linked_pair

    pair = linked_pair()
    pair.hello(pair.b, "bob")
    a = pair.a
    assert ("broker_linked", "bb") in [(e, f.get("peer")) for e, f in a.engine.take_notes()]
    with_control(a)
    brokers = stats(a)["brokers"]
    assert brokers["links"] == 1 and [(p["brokerId"], p["linked"], p["sessions"])
                                      for p in brokers["peers"]] == [("bb", True, 1)]
    a.engine.take_notes()
    a.advance(a.engine.state.limits.liveness_s * 0.6)
    a.feed(b"ops", envelope("hb"))
    a.advance(a.engine.state.limits.liveness_s * 0.6)      # bb said nothing meanwhile
    quiet = [f for e, f in a.engine.take_notes() if e == "broker_unreachable"]
    assert [(f["peer"], f["sessions"]) for f in quiet] == [("bb", 1)]
    assert [(p["brokerId"], p["linked"], p["unreachable"]) for p in stats(a)["brokers"]["peers"]] \
        == [("bb", False, True)]
