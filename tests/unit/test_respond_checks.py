"""respond / invoke parameters checked by the client before anything is sent
(client.respond, schemas.output_attachments)."""

from __future__ import annotations

import pytest

from client.respond import finish_problem, invoke_problem, respond_params, respond_problem
from schemas.limits import ALT_TEXT_CHARS, MAX_ATTACHMENTS, MAX_MESSAGE_CHARS, MAX_REASON_CHARS
from schemas.output_attachments import is_image


def check(content=None, draft=None, channel="current", attachments=None, final=True):
    return respond_problem(respond_params(content, draft, channel, attachments, final))


@pytest.fixture
def files(tmp_path):
    paths = {}
    for name in ("chart.PNG", "photo.jpeg", "report.pdf", "bundle.tar.gz"):
        (tmp_path / name).write_bytes(b"x")
        paths[name] = str(tmp_path / name)
    return paths


def test_plain_content_and_a_draft_reference_pass():
    assert check(content="hello") is None
    assert check(draft="draft-1") is None
    assert check(content="", channel="discord:1|2", final=False) is None


@pytest.mark.parametrize("channel", ["last", "owner", "discord:1|2", "internal:me"])
def test_a_draft_goes_only_with_channel_current(channel):
    assert check(draft="draft-1", channel=channel)["code"] == "draft_not_current"
    assert check(content="text", channel=channel) is None


@pytest.mark.parametrize("content, draft", [(None, None), ("text", "draft-1")])
def test_exactly_one_of_content_or_draft(content, draft):
    problem = check(content=content, draft=draft)
    assert problem["code"] == "invalid_params"
    assert "exactly one of 'content' or 'draft'" in problem["error"]


def test_oversized_content_is_message_too_large():
    assert check(content="x" * (MAX_MESSAGE_CHARS + 1))["code"] == "message_too_large"


@pytest.mark.parametrize("kwargs, where", [
    ({"content": 5}, "content"), ({"draft": ""}, "draft"), ({"content": "x", "channel": ""}, "channel"),
    ({"content": "x", "channel": None}, "channel"), ({"content": "x", "final": "yes"}, "final"),
    ({"content": "x", "attachments": {"path": "/x"}}, "attachments"),
])
def test_wrong_types_are_invalid_params_naming_the_parameter(kwargs, where):
    problem = check(**kwargs)
    assert problem["code"] == "invalid_params" and where in problem["error"], problem


def test_existing_attachments_with_alt_text_on_images_pass(files):
    assert check(content="see", channel="discord:1", attachments=[
        {"path": files["chart.PNG"], "altText": "Bar chart"}, {"path": files["report.pdf"]},
        {"path": files["photo.jpeg"], "altText": "a" * ALT_TEXT_CHARS}]) is None


def test_a_missing_path_is_refused_at_the_client_with_its_index(files, tmp_path):
    missing = str(tmp_path / "gone.pdf")
    problem = check(content="see", attachments=[{"path": files["report.pdf"]}, {"path": missing}])
    assert problem["code"] == "invalid_attachment"
    assert problem["error"].startswith("Attachment 1:") and "no such file" in problem["error"]
    assert missing in problem["error"]


@pytest.mark.parametrize("name", ["report.pdf", "bundle.tar.gz"])
def test_alt_text_on_a_document_or_archive_is_refused_saying_it_is_only_for_images(files, name):
    problem = check(content="see", attachments=[{"path": files[name], "altText": "text"}])
    assert problem["code"] == "invalid_attachment"
    assert "altText is only for images" in problem["error"]


def test_alt_text_past_its_limit_is_refused(files):
    problem = check(content="see", attachments=[
        {"path": files["chart.PNG"], "altText": "a" * (ALT_TEXT_CHARS + 1)}])
    assert problem["code"] == "invalid_attachment" and str(ALT_TEXT_CHARS) in problem["error"]


@pytest.mark.parametrize("item, words", [
    ({"name": "x"}, "unknown field 'name'"), ({}, "path"), ({"path": ""}, "path"),
    ("just/a/path", "object"), ({"path": "/x.png", "altText": 3}, "altText must be a string"),
])
def test_malformed_attachments_are_invalid_attachment(item, words):
    problem = check(content="see", attachments=[item])
    assert problem["code"] == "invalid_attachment" and words in problem["error"], problem


def test_too_many_attachments_is_refused(files):
    problem = check(content="see", attachments=[{"path": files["report.pdf"]}] * (MAX_ATTACHMENTS + 1))
    assert problem["code"] == "invalid_params" and str(MAX_ATTACHMENTS) in problem["error"]


def test_image_suffixes_are_matched_case_insensitively_on_the_suffix_only():
    assert is_image("/a/B.JPG") and is_image("x.avif") and is_image("y.TiFf")
    assert not is_image("/a/png") and not is_image("chart.png.pdf") and not is_image("notes.txt")


def test_invoke_needs_a_session_and_a_reason_of_bounded_length():
    assert invoke_problem("discord:1", "check in") is None
    assert invoke_problem("", "check in")["code"] == "invalid_params"
    assert invoke_problem("discord:1", "")["code"] == "invalid_params"
    assert invoke_problem(None, "x")["code"] == "invalid_params"
    assert "reason" in invoke_problem("discord:1", "r" * (MAX_REASON_CHARS + 1))["error"]


def test_finish_invocation_parameters():
    assert finish_problem("job-1", True, None) is None
    assert finish_problem("job-1", False, "it crashed") is None
    assert finish_problem("", True, None)["code"] == "invalid_params"
    assert finish_problem("job-1", "yes", None)["code"] == "invalid_params"
    assert finish_problem("job-1", False, 7)["code"] == "invalid_params"
