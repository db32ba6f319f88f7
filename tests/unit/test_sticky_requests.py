"""One sticky entry per request, store-wide, driven through the engine: a send
another broker committed (and died before answering) is answered from the store's
entry when its sender resends it here, and is never queued twice."""

from broker.core.kernel.records import StickySaved

from .test_workflow import hosted, queue, stage

PLAN = "workflow:r1/plan"
OTHER_BROKERS_SEQ = 7 << 16 | 0xBEEF      # numbered under another broker's tag


def committed_elsewhere(bus, sender: bytes, msg_id: str, message: str) -> StickySaved:
    """The entry another broker on the same store committed for ``sender``'s send,
    its ``queued`` answer lost with that broker."""
    saved = StickySaved(OTHER_BROKERS_SEQ, "r1", PLAN, bus.engine.registry.by_identity[sender].id,
                        "host", msg_id, message, [], 1.0, True, 1, False)
    bus.store.apply([saved])
    return saved


def stored(bus) -> list[tuple[int, str]]:
    return [(row.entry.seq, row.entry.message_id) for row in bus.store.load().sticky]


def test_a_resend_of_a_send_another_broker_committed_gets_the_first_answer_and_no_copy():
    bus = hosted()
    committed_elsewhere(bus, b"host", "m-1", "only once")
    answer = queue(bus, b"host", PLAN, "only once", msg_id="m-1")
    assert answer == {"ok": True, "queued": True, "position": 1, "target": PLAN, "runId": "r1",
                      "messageId": "m-1", "deliveredTo": []}
    assert stored(bus) == [(OTHER_BROKERS_SEQ, "m-1")]


def test_the_entry_taken_from_the_store_is_delivered_once_and_keeps_its_place():
    bus = hosted()
    committed_elsewhere(bus, b"host", "m-1", "first")
    queue(bus, b"host", PLAN, "first", msg_id="m-1")
    assert queue(bus, b"host", PLAN, "second", msg_id="m-2")["position"] == 2
    stage(bus, "plan", PLAN)
    assert [m["message"] for m in bus.sends(b"plan", "msg")] == ["first", "second"]


def test_a_retry_after_the_answer_from_the_store_is_answered_from_memory():
    bus = hosted()
    committed_elsewhere(bus, b"host", "m-1", "once")
    first = queue(bus, b"host", PLAN, "once", msg_id="m-1")
    assert queue(bus, b"host", PLAN, "once", msg_id="m-1") == first
    assert bus.written == [] and stored(bus) == [(OTHER_BROKERS_SEQ, "m-1")]


def test_the_id_of_an_entry_in_the_store_reused_for_another_message_is_refused():
    bus = hosted()
    committed_elsewhere(bus, b"host", "m-1", "the first text")
    refused = queue(bus, b"host", PLAN, "another text", msg_id="m-1")
    assert (refused["ok"], refused["code"]) == (False, "message_id_conflict")
    assert stored(bus) == [(OTHER_BROKERS_SEQ, "m-1")]
    stage(bus, "plan", PLAN)
    assert [m["message"] for m in bus.sends(b"plan", "msg")] == ["the first text"]


def test_a_stage_back_on_a_new_connection_gets_again_what_it_had_not_acknowledged():
    """Entries handed to a stage's old connection (lost with it: a blip, a partition)
    are handed over again when its client comes back with its token on a new one;
    acknowledged ones are not."""
    from schemas.protocol import envelope
    bus = hosted()
    queue(bus, b"host", PLAN, "first", msg_id="m-1")
    queue(bus, b"host", PLAN, "second", msg_id="m-2")
    welcome = stage(bus, "plan", PLAN, instance="i-plan")
    sent = bus.sends(b"plan", "msg")
    assert [m["message"] for m in sent] == ["first", "second"]
    bus.feed(b"plan", envelope("received", ids=[sent[0]["id"]]))      # the first is read
    bus.commit()
    bus.feed(b"plan-again", envelope("hello", id="h2", name="plan", sessionKind="stage",
                                     stage=PLAN, instance="i-plan",
                                     sessionId=welcome["sessionId"], token=welcome["token"]))
    assert [m["message"] for m in bus.sends(b"plan-again", "msg")] == ["second"]
