"""``delivery`` rows of a run in ``list``: per-stage evidence for the sticky targets
that are not (or no longer) in the future list, and which states a run's entries
show while it is dormant (broker.core.workflow.run_listing, broker.core.workflow.sticky_queue)."""

from schemas.protocol import envelope

from .harness import Bus
from .test_workflow import STAGES, hosted, queue, stage

LEASE = 30.0


def listed(bus, identity=b"host"):
    (run,) = bus.call(identity, "list")["workflows"]
    return run


def delivery(run) -> dict[str, list[tuple[str, str, str]]]:
    return {row["target"]: [(s["stage"], s["messageId"], s["state"]) for s in row["deliveryStates"]]
            for row in run["delivery"]}


def test_an_exact_target_leaves_the_future_list_for_a_delivery_row_once_its_stage_is_declared():
    bus = hosted()
    queue(bus, b"host", "workflow:r1/review/later", "early", msg_id="m-early")
    run = listed(bus)
    assert run["future"] == [{"target": "workflow:r1/review/later", "queued": 1}]
    assert run["delivery"] == []
    bus.workflow(b"host", "add_stages", runId="r1", parent="review", stages=[{"name": "later"}])
    run = listed(bus)
    assert run["future"] == []
    assert delivery(run) == {"workflow:r1/review/later": [
        ("workflow:r1/review/later", "m-early", "queued")]}


def test_a_delivery_row_follows_its_entry_from_queued_to_delivered_to_stage_terminal():
    bus = hosted()
    queue(bus, b"host", "workflow:r1/plan", "p", msg_id="m-done")
    queue(bus, b"host", "workflow:r1/s-plan", "by id", msg_id="m-id")   # the same stage's queue
    assert delivery(listed(bus)) == {"workflow:r1/plan": [
        ("workflow:r1/plan", "m-done", "queued"), ("workflow:r1/plan", "m-id", "queued")]}
    stage(bus, "plan", "workflow:r1/plan")
    bus.feed(b"plan", envelope("received", ids=["m-done"]))
    assert delivery(listed(bus)) == {"workflow:r1/plan": [
        ("workflow:r1/plan", "m-done", "delivered"), ("workflow:r1/plan", "m-id", "receipt-unverified")]}
    bus.feed(b"plan", envelope("bye"))
    bus.workflow(b"host", "stage_state", runId="r1", stage="plan", state="completed")
    # Evidence stays after the stage ended; only the admitted entry counts as delivered.
    assert delivery(listed(bus)) == {"workflow:r1/plan": [
        ("workflow:r1/plan", "m-done", "delivered"), ("workflow:r1/plan", "m-id", "stage-terminal")]}


def test_patterns_and_unknown_paths_stay_future_and_have_no_delivery_row():
    bus = hosted()
    queue(bus, b"host", "workflow:r1/**", "all", msg_id="m-all")
    queue(bus, b"host", "workflow:r1/someday", "later", msg_id="m-later")
    run = listed(bus)
    assert {f["target"]: f["queued"] for f in run["future"]} == {"workflow:r1/**": 1,
                                                                 "workflow:r1/someday": 1}
    assert run["delivery"] == []


def test_a_stage_without_pre_start_delivery_shows_delivery_unavailable_in_its_delivery_row():
    bus = Bus(liveness_s=1e9)
    bus.hello("host")
    bus.workflow(b"host", "register_run", runId="r1",
                 stages=[{"name": "quiet", "intercom": False}, {"name": "plan"}])
    queue(bus, b"host", "workflow:r1/quiet", "q", msg_id="m-q")
    assert delivery(listed(bus)) == {"workflow:r1/quiet": [
        ("workflow:r1/quiet", "m-q", "delivery-unavailable")]}


def test_a_dormant_runs_entries_are_queued_not_root_unresolved():
    bus = Bus(liveness_s=1e9, host_lease_s=LEASE)
    bus.hello("host")
    bus.workflow(b"host", "register_run", runId="r1", stages=STAGES)
    bus.hello("peer")
    bus.call(b"peer", "join", group="workflow:r1")
    queue(bus, b"peer", "workflow:r1/plan", "before", msg_id="m-before")
    bus.feed(b"host", {"v": 1, "k": "bye"})
    bus.advance(LEASE + 1)
    queue(bus, b"peer", "workflow:r1/plan", "while dormant", msg_id="m-dormant")
    run = listed(bus, b"peer")
    assert run["dormant"] is True
    plan = next(s for s in run["stages"] if s["name"] == "plan")
    # Delivered once the run is resumed: waiting, with no ownership problem to report.
    assert [(s["messageId"], s["state"]) for s in plan["deliveryStates"]] == \
        [("m-before", "queued"), ("m-dormant", "queued")]
    assert plan["queued"] == 2
    assert [s for _, _, s in delivery(run)["workflow:r1/plan"]] == ["queued", "queued"]
