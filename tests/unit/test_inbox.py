"""The client's inbox drops a message id it was given before: a sender's resend to
another broker (after a failover) or to a restarted one is not received twice."""

from client.inbox import Inbox


def msg(msg_id: str, text: str = "hi") -> dict:
    return {"k": "msg", "id": msg_id, "message": text}


def taken(inbox: Inbox) -> list[str]:
    got = []
    while (item := inbox.take(0)) is not None:
        got.append(item["id"])
    return got


def test_a_message_id_handed_out_before_is_dropped_when_it_comes_again():
    inbox = Inbox()
    inbox.put_all([msg("m1"), msg("m2")])
    assert taken(inbox) == ["m1", "m2"]
    inbox.put_all([msg("m2"), msg("m3")])
    assert taken(inbox) == ["m3"] and inbox.duplicates_dropped == 1


def test_two_copies_of_one_message_in_one_batch_are_received_once():
    inbox = Inbox()
    inbox.put_all([msg("m1"), msg("m2"), msg("m1")])
    assert taken(inbox) == ["m1", "m2"] and inbox.duplicates_dropped == 1
