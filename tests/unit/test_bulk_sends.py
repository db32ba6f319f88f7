"""The ``sends`` kind: each item is the quiet send it stands for; deliveries leave as ``msgs``."""

from schemas.protocol import envelope

from .harness import Bus, uuid_from

ALICE, BOB, CAROL = (uuid_from(0xA0000001), uuid_from(0xA0000002), uuid_from(0xA0000003))


def pair():
    bus = Bus()
    bus.hello("alice")
    bus.hello("bob")
    return bus


def sends(bus, to, *items):
    return bus.feed(b"alice", envelope("sends", to=to, ids=[i[0] for i in items],
                                       messages=[i[1] for i in items]))


def delivered(bus, identity=b"bob"):
    return [[i, m] for env in bus.sends(identity, "msgs") for i, m in zip(env["ids"], env["messages"])]


def acked(bus, identity=b"alice"):
    return [i for env in bus.sends(identity, "acks") for i in env["ids"]]


def results(bus, identity=b"alice"):
    return {env["re"]: env for env in bus.sends(identity, "result")}


def test_items_to_one_target_are_delivered_in_order_as_one_msgs_envelope():
    bus = pair()
    sends(bus, "bob", ("m1", "one"), ("m2", "two"), ("m3", "three"))
    (msgs,) = bus.sends(b"bob", "msgs")
    assert msgs["ids"] == ["m1", "m2", "m3"] and msgs["messages"] == ["one", "two", "three"]
    assert msgs["from"] == ALICE and msgs["fromName"] == "alice" and msgs["sentAt"] == bus.now
    assert acked(bus) == ["m1", "m2", "m3"]
    assert results(bus) == {}


def test_a_retried_item_is_acknowledged_again_and_not_delivered_twice():
    bus = pair()
    sends(bus, "bob", ("m1", "one"))
    sends(bus, "bob", ("m1", "one"), ("m2", "two"))
    assert delivered(bus) == [["m2", "two"]]
    assert bus.sends(b"bob", "msg") == []
    assert sorted(acked(bus)) == ["m1", "m2"]


def test_a_retry_as_an_ordinary_call_gets_the_first_answer():
    bus = pair()
    sends(bus, "bob", ("m1", "one"))
    result = bus.call(b"alice", "send", msg_id="m1", to="bob", message="one")
    assert result["ok"] and result["delivered"] and result["to"] == BOB and result["messageId"] == "m1"
    assert bus.sends(b"bob") == []


def test_an_id_reused_for_other_text_is_refused_with_its_own_result():
    bus = pair()
    sends(bus, "bob", ("m1", "one"))
    sends(bus, "bob", ("m1", "changed"), ("m2", "two"))
    assert results(bus)["m1"]["code"] == "message_id_conflict"
    assert acked(bus) == ["m2"]
    assert delivered(bus) == [["m2", "two"]]


def test_every_item_to_an_unknown_target_gets_the_ordinary_refusal():
    bus = pair()
    sends(bus, "nobody", ("m1", "one"), ("m2", "two"))
    got = results(bus)
    assert {got["m1"]["code"], got["m2"]["code"]} == {"target_not_found"}
    assert acked(bus) == []


def test_a_self_send_is_refused_per_item():
    bus = pair()
    sends(bus, "alice", ("m1", "one"))
    assert results(bus)["m1"]["code"] == "self_target"


def test_an_empty_text_is_refused_and_the_order_of_the_rest_is_kept():
    bus = pair()
    sends(bus, "bob", ("m1", "one"), ("m2", ""), ("m3", "three"))
    assert results(bus)["m2"]["code"] == "missing_param"
    assert delivered(bus) == [["m1", "one"], ["m3", "three"]]
    assert acked(bus) == ["m1", "m3"]


def test_a_target_in_another_group_is_refused():
    bus = Bus()
    bus.hello("alice")
    bus.hello("bob", group="elsewhere")
    sends(bus, BOB, ("m1", "one"))
    assert results(bus)["m1"]["code"] == "different_group"
    assert bus.sends(b"bob") == []


def test_a_delivered_item_can_be_replied_to_by_its_id():
    bus = pair()
    sends(bus, "bob", ("m1", "one"))
    result = bus.call(b"bob", "reply", msg_id="r1", message="got it", replyTo="m1", currentTurn="m1")
    assert result["ok"] and result["to"] == ALICE and result["replyTo"] == "m1"


def test_unusable_ids_are_dropped_and_counted_and_the_rest_still_delivered():
    bus = pair()
    bus.feed(b"alice", envelope("sends", to="bob", ids=["m1", 5, "", "x" * 200],
                                messages=["one", "two", "three", "four"]))
    assert delivered(bus) == [["m1", "one"]]
    assert bus.engine.stats["dropped.bad_send_id"] == 3


def test_a_sends_whose_lists_do_not_pair_up_is_refused_as_a_bad_envelope():
    bus = pair()
    for bad in ({"ids": "m1", "messages": ["one"]}, {"ids": ["m1", "m2"], "messages": ["one"]},
                {"ids": ["m1"]}):
        out = bus.feed(b"alice", envelope("sends", to="bob", **bad))
        (error,) = [c.env for c in out if c.env.get("k") == "result"]
        assert error["code"] == "bad_envelope"
    assert bus.sends(b"bob") == []


def test_a_target_that_is_not_a_string_makes_a_bad_envelope():
    bus = pair()
    for to in (5, ["bob"], {"bob": 1}):
        out = sends(bus, to, ("m1", "one"))
        (error,) = [c.env for c in out if c.env.get("k") == "result"]
        assert error["code"] == "bad_envelope" and "'to'" in error["error"]
    assert bus.engine.stats["internal_error"] == 0 and bus.sends(b"bob") == []


def test_a_message_that_is_not_a_string_makes_a_bad_envelope():
    bus = pair()
    for text in (["one"], {"one": 1}, 5, None):
        out = sends(bus, "bob", ("m1", "fine"), ("m2", text))
        (error,) = [c.env for c in out if c.env.get("k") == "result"]
        assert error["code"] == "bad_envelope" and "'messages'" in error["error"]
    assert bus.engine.stats["internal_error"] == 0 and bus.sends(b"bob") == []
    sends(bus, "bob", ("m1", "fine"))
    assert delivered(bus) == [["m1", "fine"]]


def test_a_target_that_names_nobody_is_still_refused_per_item():
    bus = pair()
    sends(bus, "nobody", ("m1", "one"), ("m2", "two"))
    assert [results(bus)[i]["code"] for i in ("m1", "m2")] == ["target_not_found"] * 2


def test_a_sends_before_hello_is_refused():
    bus = Bus()
    out = bus.feed(b"ghost", envelope("sends", to="bob", ids=["m1"], messages=["one"]))
    assert [c.env["code"] for c in out] == ["not_connected"]


def test_an_id_twice_in_one_envelope_is_delivered_once():
    bus = pair()
    sends(bus, "bob", ("m1", "one"), ("m1", "one"), ("m2", "two"))
    assert delivered(bus) == [["m1", "one"], ["m2", "two"]]
    assert sorted(acked(bus)) == ["m1", "m1", "m2"]


def test_an_id_twice_in_one_envelope_with_other_text_is_a_conflict():
    bus = pair()
    sends(bus, "bob", ("m1", "one"), ("m1", "other"))
    assert delivered(bus) == [["m1", "one"]]
    assert results(bus)["m1"]["code"] == "message_id_conflict"
