"""invoke jobs and response recovery, driven through the engine with a fake clock."""

from __future__ import annotations

import pytest

from broker.core.kernel.records import (ConversationDeleted, InvocationSaved, InvocationState,
                                 RecoveryDeleted)
from schemas.agent_config import AgentSettings
from schemas.limits import INVOKE_RECHECK_S, MAX_QUEUED_INVOCATIONS
from schemas.protocol import envelope

from .harness import Bus
from broker.core.kernel import inputs

REASON = "It's time for the check-in. Ask how she's feeling."


def agent_bus() -> Bus:
    bus = Bus()
    bus.set_agents(lys=AgentSettings(invoke=True), ana=AgentSettings(invoke=True))
    bus.hello("caller", agent="lys", channel="discord:1")
    bus.hello("dest", agent="lys", channel="discord:2")
    return bus


def invoke(bus: Bus, session: str = "discord:2", caller: bytes = b"caller", msg_id=None) -> str:
    """Send an invoke; the id of the request (its answer comes on commit)."""
    msg_id = msg_id or f"inv-{len(bus.written)}-{bus.now}"
    bus.feed(caller, envelope("invoke", id=msg_id, session=session, reason=REASON))
    return msg_id


def answer(bus: Bus, identity: bytes, msg_id: str) -> dict | None:
    found = [e for e in bus.sends(identity, "result") if e["re"] == msg_id]
    return found[0] if found else None


def invocations(bus: Bus, identity: bytes = b"dest") -> list[dict]:
    return [e for e in bus.sends(identity, "event") if e["event"] == "invocation"]


def queued_and_started(bus: Bus) -> dict:
    """Invoke, commit the job (answer queued) and commit its hand-over: the event."""
    msg_id = invoke(bus)
    bus.commit()
    result = answer(bus, b"caller", msg_id)
    bus.commit()
    return result


def status(bus: Bus, identity: bytes, value: str) -> None:
    bus.feed(identity, envelope("status", status=value))


# -- refusals -----------------------------------------------------------------------------

def refusal_for(bus: Bus, session: str, caller: bytes = b"caller") -> str:
    result = bus.request(caller, "invoke", session=session, reason=REASON)
    assert result["ok"] is False, result
    return result["code"]


@pytest.mark.parametrize("alias", ["current", "last", "owner"])
def test_an_alias_is_refused(alias):
    assert refusal_for(agent_bus(), alias) == "invoke_alias"


def test_the_callers_own_session_is_refused():
    assert refusal_for(agent_bus(), "discord:1") == "invoke_self"


def test_an_ephemeral_destination_is_refused():
    bus = agent_bus()
    bus.hello("eph", agent="lys", channel="discord:3", persistent=False)
    assert refusal_for(bus, "discord:3") == "invoke_ephemeral"


def test_a_remote_destination_is_refused():
    bus = agent_bus()
    bus.hello("rem", agent="lys", channel="remote:3")
    assert refusal_for(bus, "remote:3") == "invoke_remote_target"


def test_a_remote_caller_is_refused():
    bus = agent_bus()
    bus.hello("rem", agent="lys", channel="remote:3")
    assert refusal_for(bus, "discord:2", caller=b"rem") == "invoke_remote_caller"


def test_another_agents_session_is_refused_and_an_unknown_one_is_not_found():
    bus = agent_bus()
    bus.hello("other", agent="ana", channel="discord:9")
    assert refusal_for(bus, "discord:9") == "invoke_cross_agent"
    assert refusal_for(bus, "discord:404") == "channel_not_found"


def test_an_agent_without_invoke_enabled_is_refused():
    bus = agent_bus()
    bus.set_agents(lys=AgentSettings(invoke=False))
    assert refusal_for(bus, "discord:2") == "invoke_disabled"


def test_a_session_without_agent_is_refused():
    bus = agent_bus()
    bus.hello("plain")
    assert refusal_for(bus, "discord:2", caller=b"plain") == "no_agent"


def test_the_101st_queued_invocation_is_refused():
    bus = agent_bus()
    status(bus, b"dest", "thinking")
    for n in range(MAX_QUEUED_INVOCATIONS):
        invoke(bus, msg_id=f"i{n}")
    bus.commit()
    assert refusal_for(bus, "discord:2") == "too_many_invocations"
    (row,) = [r for r in bus.request(b"caller", "sessions")["sessions"] if r["session"] == "discord:2"]
    assert row["queuedInvocations"] == MAX_QUEUED_INVOCATIONS


# -- job states ------------------------------------------------------------------------------

def test_queued_is_answered_only_after_the_job_is_committed():
    bus = agent_bus()
    msg_id = invoke(bus)
    assert answer(bus, b"caller", msg_id) is None
    assert [type(r) for r in bus.persisted()] == [InvocationSaved]
    bus.commit()
    result = answer(bus, b"caller", msg_id)
    assert result["ok"] is True and result["queued"] is True and result["session"] == "discord:2"


def test_an_idle_destination_gets_the_event_only_once_started_is_committed():
    bus = agent_bus()
    msg_id = invoke(bus)
    bus.commit()
    job_id = answer(bus, b"caller", msg_id)["id"]
    assert invocations(bus) == []
    assert [(type(r), r.state) for r in bus.persisted()] == [(InvocationState, "started")]
    bus.commit()
    (event,) = invocations(bus)
    assert event == {"v": 1, "k": "event", "event": "invocation", "id": job_id, "agent": "lys",
                     "fromSession": "discord:1", "reason": REASON}


def test_a_busy_destination_is_checked_every_second_and_served_when_it_turns_idle():
    bus = agent_bus()
    status(bus, b"dest", "tool:bash")
    invoke(bus)
    bus.commit()
    assert bus.engine.next_deadline() <= bus.now + INVOKE_RECHECK_S
    for _ in range(3):
        bus.advance(INVOKE_RECHECK_S)
        assert bus.persisted() == []           # still busy: nothing started
        assert bus.engine.next_deadline() <= bus.now + INVOKE_RECHECK_S
    status(bus, b"dest", "idle")
    assert [r.state for r in bus.persisted()] == ["started"]
    bus.commit()
    assert len(invocations(bus)) == 1


def test_a_recheck_finds_the_destination_idle_and_hands_the_job_over():
    bus = agent_bus()
    status(bus, b"dest", "thinking")
    invoke(bus)
    bus.commit()
    bus.engine.registry.by_id[bus.engine.registry.by_identity[b"dest"].id].status = "idle"
    bus.advance(INVOKE_RECHECK_S)
    assert [r.state for r in bus.persisted()] == ["started"]


def test_an_offline_destination_gets_its_job_when_it_connects():
    bus = agent_bus()
    bus.feed(b"dest", envelope("bye"))
    invoke(bus)
    bus.commit()
    assert bus.persisted() == []
    welcome = bus.hello("dest-again", agent="lys", channel="discord:2")
    assert welcome["channel"] == "discord:2"
    bus.commit()
    assert len(invocations(bus, b"dest-again")) == 1


def test_jobs_for_one_destination_run_one_at_a_time_and_finish_starts_the_next():
    bus = agent_bus()
    first = queued_and_started(bus)
    second_id = invoke(bus)
    bus.commit()
    second = answer(bus, b"caller", second_id)
    assert invocations(bus) == []          # the first one still runs
    bus.feed(b"dest", envelope("finish_invocation", id=first["id"], ok=True))
    done = [r for r in bus.persisted() if isinstance(r, InvocationState)]
    assert [(r.id, r.state) for r in done] == [(first["id"], "done"), (done[1].id, "started")]
    bus.commit()
    (event,) = invocations(bus)
    assert event["id"] not in (first["id"], None)
    assert second["id"] == event["id"]


def test_finish_of_an_invocation_not_running_here_is_refused():
    bus = agent_bus()
    first = queued_and_started(bus)
    result = bus.request(b"caller", "finish_invocation", msg_id=first["id"], ok=True)
    assert result["code"] == "unknown_invocation"
    result = bus.request(b"dest", "finish_invocation", msg_id="nope", ok=False)
    assert result["code"] == "unknown_invocation"


def test_a_job_is_never_handed_over_again_when_its_session_leaves_mid_turn():
    bus = agent_bus()
    queued_and_started(bus)
    bus.feed(b"dest", envelope("bye"))
    (failed,) = [r for r in bus.persisted() if isinstance(r, InvocationState)]
    assert (failed.state, failed.error) == ("failed", "destination session ended during the turn")
    bus.commit()
    bus.hello("dest-again", agent="lys", channel="discord:2")
    bus.commit()
    assert invocations(bus, b"dest-again") == []


def test_a_session_leaving_before_started_commits_gets_no_event_and_the_job_fails():
    bus = agent_bus()
    invoke(bus)
    bus.store.apply(bus.written)          # the job is durable; its answer is due
    bus.written = []
    tickets, bus.uncommitted = bus.uncommitted, []
    for ticket in tickets:
        bus._track(bus.engine.handle(inputs.Committed(ticket, bus.now)))   # hand-over asked for, not committed
    bus.feed(b"dest", envelope("bye"))
    bus.commit()
    assert invocations(bus) == []
    assert bus.store.load().invocations == []


def test_a_failed_write_of_started_puts_the_job_back_without_handing_it_over():
    bus = agent_bus()
    invoke(bus)
    bus.commit()                            # queued committed; started asked for
    bus.fail("store_unavailable")
    assert invocations(bus) == []
    bus.advance(INVOKE_RECHECK_S)
    assert [r.state for r in bus.persisted()] == ["started"]
    bus.commit()
    assert len(invocations(bus)) == 1


def test_a_resent_invoke_request_is_the_same_job():
    bus = agent_bus()
    status(bus, b"dest", "thinking")
    first = invoke(bus, msg_id="same")
    bus.commit()
    job_id = answer(bus, b"caller", first)["id"]
    again = bus.request(b"caller", "invoke", msg_id=first, session="discord:2", reason=REASON)
    assert (again["queued"], again["id"]) == (True, job_id)
    assert bus.persisted() == [] and len(bus.store.load().invocations) == 1


# -- restarts ----------------------------------------------------------------------------------

def test_unstarted_jobs_survive_a_restart_and_are_delivered_once():
    bus = agent_bus()
    status(bus, b"dest", "thinking")
    for n in range(3):
        invoke(bus, msg_id=f"i{n}")
    bus.commit()
    bus.restart()
    bus.hello("caller", agent="lys", channel="discord:1")
    bus.hello("dest", agent="lys", channel="discord:2")
    seen = []
    for _ in range(3):
        bus.commit()
        seen += [e["id"] for e in invocations(bus)]
        for job_id in seen[-1:]:
            bus.feed(b"dest", envelope("finish_invocation", id=job_id, ok=True))
    bus.commit()
    assert len(seen) == len(set(seen)) == 3
    assert bus.store.load().invocations == []


def test_a_job_started_before_a_crash_is_failed_on_restart_and_not_handed_over():
    bus = agent_bus()
    queued_and_started(bus)
    bus.restart()
    assert [(r.state, r.error) for r in bus.written] == [("failed", "the broker restarted during the turn")]
    bus.commit()
    bus.hello("dest", agent="lys", channel="discord:2")
    bus.commit()
    assert invocations(bus) == []
    assert bus.store.load().invocations == []


def test_persistent_conversations_are_listed_after_a_restart():
    bus = agent_bus()
    bus.feed(b"caller", envelope("turn"))
    bus.commit()
    bus.restart()
    bus.hello("x", agent="lys", channel="discord:5")
    rows = {r["session"]: r for r in bus.request(b"x", "sessions")["sessions"]}
    assert set(rows) == {"discord:1", "discord:2", "discord:5"}
    assert rows["discord:1"]["lastActiveAt"] == bus.now and not rows["discord:1"]["connected"]


# -- response recovery, reset, delete ---------------------------------------------------------

DRAFTS = [{"id": "d1", "text": "the answer", "completion": "complete", "outcome": "pending"}]


def report(bus: Bus, identity: bytes, turn: str, outcome: str = "pending", drafts=DRAFTS) -> str:
    msg_id = f"rec-{turn}-{outcome}"
    bus.feed(identity, envelope("recovery", id=msg_id, turn=turn, drafts=drafts, outcome=outcome))
    return msg_id


def test_a_recovery_report_is_kept_answered_on_commit_and_replaced_by_the_next_turn():
    bus = agent_bus()
    msg_id = report(bus, b"dest", "t1")
    assert answer(bus, b"dest", msg_id) is None
    bus.commit()
    assert answer(bus, b"dest", msg_id)["ok"] is True
    report(bus, b"dest", "t2", "failed")
    bus.commit()
    (row,) = bus.store.load().recoveries
    assert (row.channel, row.turn, row.outcome, row.drafts) == ("discord:2", "t2", "failed", DRAFTS)


def test_an_ephemeral_session_keeps_no_recovery_row():
    bus = agent_bus()
    bus.hello("eph", agent="lys", channel="discord:3", persistent=False)
    msg_id = report(bus, b"eph", "t1")
    assert answer(bus, b"eph", msg_id)["ok"] is True
    bus.commit()
    assert bus.store.load().recoveries == []


def test_a_malformed_draft_is_refused():
    bus = agent_bus()
    msg_id = report(bus, b"dest", "t1", drafts=[{"id": "d1", "text": "x", "completion": "maybe",
                                                 "outcome": "pending"}])
    assert answer(bus, b"dest", msg_id)["code"] == "invalid_params"


def test_reset_deletes_the_recovery_row_and_keeps_the_conversation():
    bus = agent_bus()
    report(bus, b"dest", "t1")
    bus.commit()
    bus.feed(b"dest", envelope("reset", id="reset-1"))
    assert answer(bus, b"dest", "reset-1") is None
    assert bus.persisted() == [RecoveryDeleted("lys", "discord:2")]
    bus.commit()
    assert answer(bus, b"dest", "reset-1")["ok"] is True
    snapshot = bus.store.load()
    assert snapshot.recoveries == [] and "discord:2" in [c.channel for c in snapshot.conversations]


def test_delete_drops_record_recovery_and_queued_jobs_and_the_session_goes_on_ephemeral():
    bus = agent_bus()
    status(bus, b"dest", "thinking")
    invoke(bus)
    report(bus, b"dest", "t1")
    bus.commit()
    bus.feed(b"dest", envelope("delete", id="del-1"))
    assert bus.persisted() == [ConversationDeleted("lys", "discord:2")]
    bus.commit()
    assert answer(bus, b"dest", "del-1")["ok"] is True
    snapshot = bus.store.load()
    assert "discord:2" not in [c.channel for c in snapshot.conversations]
    assert snapshot.recoveries == [] and snapshot.invocations == []
    assert bus.request(b"dest", "reset")["code"] == "not_persistent"
    assert refusal_for(bus, "discord:2") == "invoke_ephemeral"
    bus.feed(b"dest", envelope("bye"))
    assert "discord:2" not in [r["session"] for r in bus.request(b"caller", "sessions")["sessions"]]


def test_reset_of_an_ephemeral_session_is_refused():
    bus = agent_bus()
    bus.hello("eph", agent="lys", channel="discord:3", persistent=False)
    assert bus.request(b"eph", "reset")["code"] == "not_persistent"
    assert bus.request(b"eph", "delete")["code"] == "not_persistent"
