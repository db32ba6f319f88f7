"""How inbound messages read to the agent: the cached plain path reads like the long one."""

from client.render import render_body


def plain(sender: str, name: str, sent_at: float, text: str) -> dict:
    return {"id": f"id-{text}", "from": sender, "fromName": name, "sentAt": sent_at,
            "message": text, "attachments": [], "expectsReply": False}


def test_interleaved_senders_each_get_their_own_head_and_hint():
    a = render_body(plain("id-a", "alice", 1_700_000_000.25, "one"))
    b = render_body(plain("id-b", "bob", 1_700_000_000.75, "two"))
    again = render_body(plain("id-a", "alice", 1_700_000_000.25, "three"))
    assert a.startswith("Message from alice (id-a)\nSent: 2023-11-14 22:13:20 UTC\n\none")
    assert a.endswith('To answer: intercom({action: "send", to: "id-a", message: "..."})')
    assert b.startswith("Message from bob (id-b)") and 'to: "id-b"' in b
    assert again == a.replace("one", "three")


def test_the_reply_hint_follows_the_setting_per_call():
    msg = plain("id-a", "alice", 1.0, "x")
    assert "intercom(" in render_body(msg, True)
    assert "intercom(" not in render_body(msg, False)


def test_odd_field_types_render_instead_of_raising():
    msg = plain("id-a", "alice", 1.0, "x")
    msg["fromName"] = ["not", "a", "name"]
    msg["sentAt"] = {"not": "a time"}
    body = render_body(msg)
    assert "['not', 'a', 'name']" in body and "unknown time" in body


# The body a message from a control connection (the command line) reads as, character
# for character the same in clients/node/test/inbox.test.js.
UNANSWERABLE_BODY = ("Message from cli (c1)\nSent: 2026-12-02 12:57:52 UTC\n\nhi\n\nIts sender cannot "
                     "be answered: it came from a command line or tool that nobody can send to, "
                     "so a send or reply to it fails.")


def test_a_message_whose_sender_nobody_can_message_says_so_instead_of_the_reply_hint():
    msg = {**plain("c1", "cli", 1796216272.5, "hi"), "replyable": False}
    assert render_body(msg) == UNANSWERABLE_BODY
    assert render_body(msg, False) == UNANSWERABLE_BODY       # a fact, not an instruction
    with_attachment = render_body({**msg, "attachments": [
        {"type": "snippet", "name": "x", "content": "y"}]})
    assert with_attachment.endswith("so a send or reply to it fails.")
    assert "To answer" not in with_attachment


def test_an_ask_from_such_a_sender_keeps_its_hint_and_no_field_means_answerable():
    msg = {**plain("c1", "cli", 1796216272.5, "hi"), "replyable": False, "expectsReply": True}
    assert 'They are waiting for your answer: intercom({action: "reply", replyTo: "id-hi"' \
        in render_body(msg)
    assert "cannot be answered" not in render_body(msg)
    body = render_body({**msg, "expectsReply": False, "replyable": True})
    assert body.endswith('To answer: intercom({action: "send", to: "c1", message: "..."})')


def test_a_msgs_batch_from_such_a_sender_marks_every_message_it_stands_for():
    from client.wire import expand_msgs

    msgs: list[dict] = [{"id": "before"}]
    expand_msgs({"from": "c1", "fromName": "cli", "sentAt": 1.5, "ids": ["1", "2"],
                 "messages": ["a", "b"], "replyable": False}, msgs)
    assert [m.get("replyable") for m in msgs] == [None, False, False]
    assert "cannot be answered" in render_body({**msgs[1], "attachments": []})
    plain_batch: list[dict] = []
    expand_msgs({"from": "s", "fromName": "n", "sentAt": 1.5, "ids": ["1"], "messages": ["a"]},
                plain_batch)
    assert "replyable" not in plain_batch[0]
