"""Every resource bound, through the engine's inputs and outputs."""

import pytest

from schemas.protocol import envelope

from .harness import Bus, result_for
from .test_workflow import STAGES, queue, send


def test_broker_wide_session_cap_refuses_new_sessions_and_serves_the_rest():
    bus = Bus(max_sessions=2, liveness_s=1e9)
    bus.hello("a"), bus.hello("b")
    refused = bus.hello("c")
    assert refused["code"] == "too_many_sessions" and "--max-sessions 2" in refused["error"]
    assert send(bus, b"a", "b")["delivered"] is True
    bus.feed(b"b", envelope("bye"))
    assert bus.hello("c")["ok"]


def test_per_connection_cap_counts_sessions_from_one_peer():
    bus = Bus(max_sessions_per_connection=2, liveness_s=1e9)
    assert bus.hello("a", peer="pid=1")["ok"] and bus.hello("b", peer="pid=1")["ok"]
    refused = bus.hello("c", peer="pid=1")
    assert refused["code"] == "too_many_sessions" and "from this connection" in refused["error"]
    assert bus.hello("d", peer="pid=2")["ok"]


def test_a_reattach_moves_a_session_without_counting_it_twice():
    bus = Bus(max_sessions=1, liveness_s=1e9)
    first = bus.hello("a")
    again = bus.hello("a", identity=b"a2", sessionId=first["sessionId"], token=first["token"])
    assert again["ok"] and again["sessionId"] == first["sessionId"]


def test_join_register_and_reconnect_share_one_group_cap():
    bus = Bus(max_groups=3, liveness_s=1e9)
    bus.hello("a")
    assert bus.call(b"a", "join", group="g1")["ok"]
    assert bus.call(b"a", "join", group="g2")["ok"]
    refused = bus.call(b"a", "join", group="g3")
    assert refused["code"] == "too_many_groups" and "3" in refused["error"]
    assert bus.workflow(b"a", "register_run", runId="r1", stages=[])["code"] == "too_many_groups"
    assert "r1" not in bus.engine.state.runs
    assert bus.call(b"a", "status")["groups"] == ["default", "g1", "g2"]


def test_a_reconnect_with_more_groups_than_the_cap_keeps_home_and_the_first_that_fit():
    bus = Bus(max_groups=3, liveness_s=1e9)
    welcome = bus.hello("a", homeGroup="home", groups=["g1", "home", "g2", "g3", "g4"])
    assert welcome["ok"], welcome
    assert welcome["groups"] == ["home", "g1", "g2"]
    assert welcome["droppedGroups"] == ["g3", "g4"]


def test_runs_per_session_cap():
    bus = Bus(max_runs_per_session=2, liveness_s=1e9)
    bus.hello("host")
    assert bus.workflow(b"host", "register_run", runId="r1", stages=[])["ok"]
    assert bus.workflow(b"host", "register_run", runId="r2", stages=[])["ok"]
    refused = bus.workflow(b"host", "register_run", runId="r3", stages=[])
    assert refused["code"] == "too_many_runs"
    assert bus.workflow(b"host", "register_run", runId="r1", stages=STAGES)["ok"]   # its own again
    assert bus.workflow(b"host", "end_run", runId="r2")["ok"]
    assert bus.workflow(b"host", "register_run", runId="r3", stages=[])["ok"]


def hosted(**limits):
    bus = Bus(liveness_s=1e9, **limits)
    bus.hello("host")
    assert bus.workflow(b"host", "register_run", runId="r1", stages=STAGES)["ok"]
    return bus


def test_run_entry_cap_spans_every_target_of_the_run():
    bus = hosted(max_run_entries=3)
    for n in range(3):
        assert queue(bus, b"host", f"workflow:r1/future{n}", f"m{n}")["queued"]
    refused = send(bus, b"host", "workflow:r1/future9", "m9")
    assert refused["code"] == "run_full" and "--max-run-entries 3" in refused["error"]
    # nothing was evicted: a stage declared later still gets its entry
    bus.workflow(b"host", "add_stages", stages=[{"name": "future0"}], runId="r1")
    bus.hello("f0", sessionKind="stage", stage="workflow:r1/future0")
    assert [m["message"] for m in bus.sends(b"f0", "msg")] == ["m0"]


def test_run_byte_cap_and_held_places_count():
    bus = hosted(max_run_bytes=25)
    bus.feed(b"host", envelope("call", id="q1", action="send", to="workflow:r1/plan", message="x" * 20))
    refused = send(bus, b"host", "workflow:r1/audit", "y" * 10)     # q1 not committed yet
    assert refused["code"] == "run_full" and "bytes" in refused["error"]
    assert result_for(bus.commit(), b"host", "q1")["queued"]
    assert queue(bus, b"host", "workflow:r1/audit", "y" * 5)["queued"]


def test_broker_wide_sticky_byte_cap_and_it_frees_when_a_run_ends():
    bus = Bus(liveness_s=1e9, max_sticky_bytes=30)
    bus.hello("host")
    for run in ("r1", "r2"):
        assert bus.workflow(b"host", "register_run", runId=run, stages=STAGES)["ok"]
    assert queue(bus, b"host", "workflow:r1/plan", "a" * 20)["queued"]
    refused = send(bus, b"host", "workflow:r2/plan", "b" * 20)
    assert refused["code"] == "sticky_storage_full"
    assert bus.workflow(b"host", "end_run", runId="r1")["ok"]
    bus.commit()
    assert queue(bus, b"host", "workflow:r2/plan", "b" * 20)["queued"]


def test_sticky_bytes_are_counted_again_after_a_restart():
    bus = hosted(max_run_bytes=25)
    assert queue(bus, b"host", "workflow:r1/plan", "x" * 20)["queued"]
    bus.restart()
    bus.hello("host2")
    assert bus.engine.state.sticky.held("r1") == (1, 20)


def test_a_session_not_reading_is_refused_sends_until_it_reads():
    bus = Bus(liveness_s=1e9, max_backlog_bytes=1000)
    bus.hello("a"), bus.hello("b")
    bus.wrote({b"b": 1500})
    refused = send(bus, b"a", "b", "hi")
    assert refused["code"] == "target_backlogged" and "1500" in refused["error"]
    assert bus.call(b"a", "ask", to="b", message="?")["code"] == "target_backlogged"
    bus.feed(b"b", envelope("hb", read=1200))
    assert send(bus, b"a", "b", "hi")["delivered"] is True


def test_a_read_report_cannot_hide_a_backlog():
    bus = Bus(liveness_s=1e9, max_backlog_bytes=1000)
    bus.hello("a"), bus.hello("b")
    bus.feed(b"b", envelope("hb", read=10**9))      # claims more than was ever sent
    bus.wrote({b"b": 1500})
    assert send(bus, b"a", "b", "hi")["code"] == "target_backlogged"


def test_past_twice_the_bound_the_session_is_dropped_as_not_reading():
    bus = Bus(liveness_s=1e9, max_backlog_bytes=1000)
    bus.hello("a"), bus.hello("b")
    bus.wrote({b"b": 2500})
    assert b"b" not in bus.engine.registry.by_identity
    assert ("session_left", "b") in bus.events(b"a")
    assert send(bus, b"a", "b")["ok"] is False


def test_a_reconnect_starts_the_backlog_count_again():
    bus = Bus(liveness_s=1e9, max_backlog_bytes=1000)
    bus.hello("a")
    first = bus.hello("b")
    bus.wrote({b"b": 1500})
    bus.hello("b", identity=b"b2", sessionId=first["sessionId"], token=first["token"])
    assert send(bus, b"a", "b")["delivered"] is True


@pytest.mark.parametrize("field", ["maxSessions", "maxGroups", "maxBacklogBytes"])
def test_bounds_are_config_fields_checked_strictly(field):
    from schemas.config import ConfigError, parse_config
    assert getattr(parse_config({field: 7}), field) == 7
    with pytest.raises(ConfigError):
        parse_config({field: 0})


def test_a_refused_send_keeps_nothing_of_its_text():
    """The dedup memory keeps each refusal for a retry; that must not keep the text."""
    import gc
    import tracemalloc
    bus = Bus(liveness_s=1e9)
    bus.hello("a")
    send(bus, b"a", "nobody", "warm-up")
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    for n in range(200):
        assert send(bus, b"a", "nobody", f"{n}" + "x" * 10_000)["code"] == "target_not_found"
    gc.collect()     # what is kept, not garbage the collector has not reached yet
    grown = sum(s.size_diff for s in tracemalloc.take_snapshot().compare_to(before, "filename"))
    tracemalloc.stop()
    assert grown < 500_000, grown       # 200 x 10 KB would be 2 MB


def test_conversations_per_agent_are_bounded_and_resuming_one_is_not_refused():
    bus = Bus(liveness_s=1e9, max_conversations=2)
    assert bus.hello("a", agent="lys", channel="discord:1")["ok"]
    assert bus.hello("b", agent="lys", channel="discord:2")["ok"]
    refused = bus.hello("c", agent="lys", channel="discord:3")
    assert refused["code"] == "too_many_conversations"
    assert bus.hello("d", agent="other")["ok"]                  # another agent's own count
    bus.feed(b"a", {"v": 1, "k": "bye"})
    assert bus.hello("a2", agent="lys", channel="discord:1")["ok"]   # resumes, not new
