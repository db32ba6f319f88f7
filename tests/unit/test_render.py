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
