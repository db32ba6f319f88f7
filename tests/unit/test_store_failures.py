"""A write the store could not commit: its waiter is refused with the code the shell
reports (``store_unavailable`` for a store that cannot take writes now), and the
refused send holds nothing (no queue place, no entry)."""

from schemas.errors import error_text
from schemas.protocol import envelope

from .harness import Bus, result_for

STAGES = [{"name": "plan"}]


def hosted() -> Bus:
    bus = Bus(liveness_s=1e9)
    bus.hello("host")
    assert bus.workflow(b"host", "register_run", runId="r1", stages=STAGES)["ok"]
    bus.commit()
    return bus


def queue_send(bus: Bus, msg_id: str, message: str = "m") -> None:
    out = bus.feed(b"host", envelope("call", id=msg_id, action="send", to="workflow:r1/plan",
                                     message=message))
    assert [c for c in out if getattr(c, "env", {}).get("re") == msg_id] == [], "answered early"


def test_a_queued_send_the_store_could_not_take_is_refused_store_unavailable():
    bus = hosted()
    queue_send(bus, "q1")
    answer = result_for(bus.fail("store_unavailable"), b"host", "q1")
    assert answer == {"ok": False, "code": "store_unavailable",
                      "error": error_text("store_unavailable")}


def test_a_refused_send_leaves_no_entry_and_no_place_in_the_queue():
    bus = hosted()
    queue_send(bus, "q1", "lost")
    bus.fail("store_unavailable")
    queue_send(bus, "q2", "kept")
    answer = result_for(bus.commit(), b"host", "q2")
    assert (answer["queued"], answer["position"]) == (True, 1)
    bus.restart()
    assert [row.entry.message for row in bus.store.load().sticky] == ["kept"]


def test_a_failure_of_another_kind_stays_an_internal_error():
    bus = hosted()
    queue_send(bus, "q1")
    assert result_for(bus.fail(), b"host", "q1")["code"] == "internal_error"
