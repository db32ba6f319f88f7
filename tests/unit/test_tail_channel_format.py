"""How ``python -m client tail --channel`` prints one output."""

from __future__ import annotations

from client.__main__ import format_output


def test_one_output_is_one_line_with_channel_sender_final_content_and_paths():
    line = format_output({"event": "output", "channel": "discord:1|2", "fromSession": "internal:x",
                          "final": False, "content": "two\nlines \\n",
                          "attachments": [{"path": "/w/a.pdf"}, {"path": "/w/b.png", "altText": "b"}]})
    assert "\n" not in line
    assert line.split(" ", 1)[1] == ("discord:1|2 from internal:x final=false: two\\nlines \\\\n "
                                     "[attachments: /w/a.pdf, /w/b.png]")


def test_an_output_without_attachments_ends_with_its_content():
    line = format_output({"channel": "internal:s", "fromSession": "internal:s", "final": True,
                          "content": "done", "attachments": []})
    assert line.endswith("internal:s from internal:s final=true: done")
