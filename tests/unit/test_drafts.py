"""Turns and drafts (client.drafts) with no socket: the draft rules and the recovery
reports a turn produces."""

from __future__ import annotations

import itertools

import pytest

from client.drafts import REMEMBERED_DRAFTS, Turns
from schemas.errors import BusError
from schemas.limits import MAX_RECOVERY_DRAFTS


def turns() -> Turns:
    counter = itertools.count(1)
    return Turns(new_id=lambda prefix: f"{prefix}-{next(counter)}")


def code_of(call) -> str:
    with pytest.raises(BusError) as caught:
        call()
    return caught.value.code


def test_begin_gives_a_new_turn_id_each_time():
    t = turns()
    first, _ = t.begin()
    second, _ = t.begin()
    assert first != second and t.turn == second


def test_a_complete_draft_of_the_open_turn_gives_its_exact_text():
    t = turns()
    t.begin()
    text = "Here is the answer.\n\n  With *markdown* and trailing space  "
    draft, _ = t.record(text, True)
    assert t.text_of(draft) == text


def test_recording_a_draft_reports_the_turn_pending_with_every_draft_so_far():
    t = turns()
    turn, _ = t.begin()
    a, report_a = t.record("one", True)
    b, report_b = t.record("two", None)
    assert report_a == {"turn": turn, "outcome": "pending", "drafts": [
        {"id": a, "text": "one", "completion": "complete", "outcome": "pending"}]}
    assert report_b["outcome"] == "pending"
    assert [(d["id"], d["completion"]) for d in report_b["drafts"]] == [(a, "complete"), (b, "unknown")]


def test_incomplete_and_unknown_completion_drafts_cannot_be_sent_by_reference():
    t = turns()
    t.begin()
    cut, _ = t.record("half an ans", False)
    unsure, _ = t.record("maybe whole", None)
    assert code_of(lambda: t.text_of(cut)) == "draft_incomplete"
    assert code_of(lambda: t.text_of(unsure)) == "draft_incomplete"
    with pytest.raises(BusError) as caught:
        t.text_of(unsure)
    assert "unknown completion" in caught.value.text


def test_a_draft_of_an_ended_turn_is_expired_not_unknown():
    t = turns()
    t.begin()
    draft, _ = t.record("old", True)
    t.begin()
    assert code_of(lambda: t.text_of(draft)) == "draft_expired"
    t.end()
    assert code_of(lambda: t.text_of(draft)) == "draft_expired"


def test_an_id_never_recorded_is_unknown():
    t = turns()
    t.begin()
    t.record("real", True)
    assert code_of(lambda: t.text_of("draft-made-up")) == "unknown_draft"


def test_expired_ids_are_remembered_up_to_the_bound_then_unknown():
    t = turns()
    t.begin()
    oldest, _ = t.record("x", True)
    for _ in range(REMEMBERED_DRAFTS):
        t.begin()
        t.record("y", True)
    t.end()
    assert code_of(lambda: t.text_of(oldest)) == "unknown_draft"


def test_recording_needs_an_open_turn_and_well_typed_arguments():
    t = turns()
    with pytest.raises(ValueError):
        t.record("no turn", True)
    t.begin()
    with pytest.raises(ValueError):
        t.record(42, True)
    with pytest.raises(ValueError):
        t.record("text", 1)
    with pytest.raises(ValueError):
        t.record("text", "yes")


def test_a_turn_without_drafts_reports_nothing_when_it_ends():
    t = turns()
    t.begin()
    t.delivered(None)
    assert t.end() is None
    assert t.end() is None           # nothing open any more


def test_delivery_by_reference_recovers_the_turn_and_the_other_drafts_are_replaced():
    t = turns()
    turn, _ = t.begin()
    a, _ = t.record("first try", False)
    b, _ = t.record("full answer", True)
    t.delivered(b)
    report = t.end()
    assert report["turn"] == turn and report["outcome"] == "recovered"
    assert [(d["id"], d["outcome"]) for d in report["drafts"]] == [(a, "replaced"), (b, "delivered")]
    assert report["drafts"][0]["text"] == "first try"


def test_a_content_respond_replaces_every_draft():
    t = turns()
    t.begin()
    a, _ = t.record("draft", True)
    t.delivered(None)
    report = t.end()
    assert report["outcome"] == "recovered"
    assert [d["outcome"] for d in report["drafts"]] == ["replaced"]


def test_nothing_delivered_fails_the_turn_and_declines_every_draft():
    t = turns()
    t.begin()
    t.record("a", True)
    t.record("b", None)
    report = t.end()
    assert report["outcome"] == "failed"
    assert [d["outcome"] for d in report["drafts"]] == ["declined", "declined"]


def test_beginning_a_turn_returns_the_final_report_of_the_turn_it_ends():
    t = turns()
    first, _ = t.begin()
    t.record("a", True)
    second, report = t.begin()
    assert report["turn"] == first and report["outcome"] == "failed"
    assert t.end() is None           # the second turn recorded nothing


def test_a_pending_report_after_a_delivery_shows_that_draft_delivered():
    t = turns()
    t.begin()
    a, _ = t.record("a", True)
    t.delivered(a)
    _, report = t.record("b", True)
    assert report["outcome"] == "pending"
    assert [d["outcome"] for d in report["drafts"]] == ["delivered", "pending"]


def test_a_draft_delivered_by_reference_cannot_be_sent_again():
    t = turns()
    t.begin()
    a, _ = t.record("the answer", True)
    assert t.take(a) == "the answer"
    t.delivered(a)
    assert code_of(lambda: t.text_of(a)) == "draft_already_sent"
    assert code_of(lambda: t.take(a)) == "draft_already_sent"
    assert [d["outcome"] for d in t.end()["drafts"]] == ["delivered"]


def test_a_draft_on_its_way_is_not_taken_twice_and_a_failed_send_releases_it():
    t = turns()
    t.begin()
    a, _ = t.record("the answer", True)
    t.take(a)
    assert code_of(lambda: t.take(a)) == "draft_already_sent"
    t.release(a)
    assert t.take(a) == "the answer"


def test_a_report_lists_the_latest_drafts_the_broker_keeps_and_all_stay_sendable():
    t = turns()
    t.begin()
    ids = [t.record(f"draft {n}", True)[0] for n in range(MAX_RECOVERY_DRAFTS + 3)]
    _, report = t.record("last", True)
    assert len(report["drafts"]) == MAX_RECOVERY_DRAFTS
    assert report["drafts"][-1]["text"] == "last"
    assert report["drafts"][0]["id"] == ids[4]
    assert t.text_of(ids[0]) == "draft 0"
