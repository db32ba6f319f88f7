"""respond and agent conversations, driven through the engine with a fake clock."""

from __future__ import annotations

import pytest

from broker.core import Publish, Send
from schemas.agent_config import AgentSettings
from schemas.protocol import envelope

from .harness import Bus, uuid_from

OWNER = "discord:999|1"


def agent_bus(**settings: AgentSettings) -> Bus:
    bus = Bus()
    bus.set_agents(lys=AgentSettings(owner_id=OWNER, invoke=True), **settings)
    return bus


def outputs(bus: Bus, identity: bytes) -> list[dict]:
    return [env for env in bus.sends(identity, "event") if env["event"] == "output"]


def published(bus: Bus) -> list[tuple[str, str]]:
    return [(c.topic, c.env["content"]) for c in bus.last
            if isinstance(c, Publish) and c.env.get("event") == "output"]


def respond(bus: Bus, identity: bytes, content: str = "hi", **fields) -> dict:
    return bus.request(identity, "respond", content=content, **fields)


def refusal(result: dict) -> str:
    assert result["ok"] is False, result
    return result["code"]


# -- hello ------------------------------------------------------------------------------

def test_an_agent_session_defaults_to_its_internal_channel_and_persistent():
    bus = agent_bus()
    welcome = bus.hello("a", agent="lys")
    assert welcome["channel"] == f"internal:{uuid_from(0xA0000001)}"
    assert welcome["persistent"] is True


def test_a_session_without_agent_has_no_channel_in_its_welcome():
    assert "channel" not in Bus().hello("plain")


@pytest.mark.parametrize("agent", ["", ".hidden", "a/b", "x" * 129, "sp ace"])
def test_an_unsafe_agent_name_is_refused(agent):
    assert refusal(Bus().hello("a", agent=agent)) == "invalid_agent"


@pytest.mark.parametrize("channel", ["slack:1", "discord:", "nocolon", "internal:" + "x" * 600])
def test_a_channel_id_of_no_known_platform_is_refused(channel):
    assert refusal(agent_bus().hello("a", agent="lys", channel=channel)) in ("invalid_channel",
                                                                              "bad_envelope")


def test_a_second_live_session_on_one_channel_is_refused_and_another_agent_may_use_it():
    bus = agent_bus()
    bus.hello("a", agent="lys", channel="discord:1")
    assert refusal(bus.hello("b", agent="lys", channel="discord:1")) == "channel_in_use"
    assert bus.hello("c", agent="ana", channel="discord:1")["ok"] is True


def test_a_persistent_conversation_is_listed_after_it_leaves_and_resumed_by_a_later_hello():
    bus = agent_bus()
    bus.hello("a", agent="lys", channel="discord:1")
    bus.feed(b"a", envelope("bye"))
    bus.hello("b", agent="lys")
    rows = bus.request(b"b", "sessions")["sessions"]
    assert {r["session"]: r["connected"] for r in rows} == {
        "discord:1": False, f"internal:{uuid_from(0xA0000002)}": True}
    again = bus.hello("a2", agent="lys", channel="discord:1", persistent=False)
    assert again["persistent"] is True


def test_an_ephemeral_conversation_is_forgotten_when_it_leaves():
    bus = agent_bus()
    bus.hello("a", agent="lys", channel="discord:1", persistent=False)
    bus.hello("b", agent="lys")
    bus.feed(b"a", envelope("bye"))
    rows = bus.request(b"b", "sessions")["sessions"]
    assert [r["session"] for r in rows] == [f"internal:{uuid_from(0xA0000002)}"]


def test_sessions_rows_carry_the_contract_fields():
    bus = agent_bus()
    bus.hello("a", agent="lys", channel="remote:r1", persistent=False)
    (row,) = bus.request(b"a", "sessions")["sessions"]
    assert row == {"session": "remote:r1", "persistent": False, "remote": True, "connected": True,
                   "lastActiveAt": None, "queuedInvocations": 0, "current": True}


# -- channel resolution -------------------------------------------------------------------

def test_current_goes_to_the_callers_own_session_and_on_pub_as_final():
    bus = agent_bus()
    bus.hello("a", agent="lys", channel="discord:1")
    result = respond(bus, b"a", "done", final=True)
    output_id = result.pop("outputId")
    assert result == {"ok": True, "final": True, "sent": True, "channel": "discord:1"}
    assert published(bus) == [("channel:discord:1", "done")]
    (event,) = outputs(bus, b"a")
    assert event["fromSession"] == "discord:1" and event["final"] is True
    assert event["outputId"] == output_id


def test_a_respond_to_another_session_of_the_agent_is_delivered_there_and_not_final():
    bus = agent_bus()
    bus.hello("a", agent="lys", channel="discord:1")
    bus.hello("b", agent="lys", channel="discord:2")
    result = respond(bus, b"a", "over there", channel="discord:2", final=True)
    assert result["final"] is False and result["channel"] == "discord:2"
    (event,) = outputs(bus, b"b")
    assert event["content"] == "over there" and event["fromSession"] == "discord:1"
    assert outputs(bus, b"a") == []


def test_an_explicit_channel_the_agent_has_no_session_on_is_not_found():
    bus = agent_bus()
    bus.hello("a", agent="lys", channel="discord:1")
    bus.hello("other", agent="ana", channel="discord:2")
    assert refusal(respond(bus, b"a", channel="discord:2")) == "channel_not_found"
    assert refusal(respond(bus, b"a", channel="bogus")) == "invalid_channel"


def test_last_is_the_session_that_most_recently_started_a_turn():
    bus = agent_bus()
    bus.hello("a", agent="lys", channel="discord:1")
    bus.hello("b", agent="lys", channel="discord:2")
    bus.feed(b"b", envelope("turn"))
    bus.now += 1
    bus.feed(b"a", envelope("turn"))
    assert respond(bus, b"b", channel="last")["channel"] == "discord:1"


def test_receiving_a_message_makes_a_session_the_last_active():
    bus = agent_bus()
    bus.hello("a", agent="lys", channel="discord:1")
    bus.hello("b", agent="lys", channel="discord:2")
    bus.hello("human")
    bus.feed(b"a", envelope("turn"))
    bus.now += 1
    assert bus.call(b"human", "send", to="b", message="hello")["ok"] is True
    assert respond(bus, b"a", channel="last")["channel"] == "discord:2"


def test_last_without_any_activity_is_the_caller_itself():
    bus = agent_bus()
    bus.hello("a", agent="lys", channel="discord:1")
    result = respond(bus, b"a", channel="last")
    assert result == {"ok": True, "final": True, "sent": True, "channel": "discord:1",
                      "outputId": result["outputId"]}


def test_owner_goes_to_the_configured_channel_and_is_not_final():
    bus = agent_bus()
    bus.hello("a", agent="lys", channel="discord:1")
    result = respond(bus, b"a", "alert", channel="owner")
    assert (result["channel"], result["final"]) == (OWNER, False)
    assert published(bus) == [(f"channel:{OWNER}", "alert")]


def test_owner_without_an_owner_configured_is_refused():
    bus = agent_bus(ana=AgentSettings())
    bus.hello("a", agent="ana")
    assert refusal(respond(bus, b"a", channel="owner")) == "owner_not_configured"


def test_a_session_without_agent_cannot_respond():
    bus = Bus()
    bus.hello("plain")
    assert refusal(respond(bus, b"plain")) == "no_agent"


# -- remote rules ---------------------------------------------------------------------------

@pytest.mark.parametrize("channel", ["last", "owner", "discord:1", "internal:x"])
def test_a_remote_session_may_not_use_aliases_or_other_platforms(channel):
    bus = agent_bus()
    bus.hello("d", agent="lys", channel="discord:1")
    bus.hello("r", agent="lys", channel="remote:1")
    assert refusal(respond(bus, b"r", channel=channel)) == "remote_channel_refused"


def test_a_remote_session_may_use_current_and_an_owned_remote_id():
    bus = agent_bus()
    bus.hello("r", agent="lys", channel="remote:1")
    bus.hello("r2", agent="lys", channel="remote:2")
    assert respond(bus, b"r")["channel"] == "remote:1"
    assert respond(bus, b"r", channel="remote:2")["channel"] == "remote:2"
    assert refusal(respond(bus, b"r", channel="remote:3")) == "channel_not_found"


# -- attachments and drafts -------------------------------------------------------------------

def test_attachments_on_an_internal_channel_are_refused():
    bus = agent_bus()
    bus.hello("a", agent="lys")
    result = respond(bus, b"a", attachments=[{"path": "/w/report.pdf"}])
    assert refusal(result) == "attachments_unsupported"


def test_attachments_to_discord_are_carried_as_paths_with_image_alt_text():
    bus = agent_bus()
    bus.hello("a", agent="lys", channel="discord:1")
    items = [{"path": "/w/chart.PNG", "altText": "revenue"}, {"path": "/w/data.csv"}]
    assert respond(bus, b"a", attachments=items)["ok"] is True
    (event,) = outputs(bus, b"a")
    assert event["attachments"] == items


@pytest.mark.parametrize("item", [{"path": "/w/report.pdf", "altText": "a report"},
                                  {"path": "/w/a.zip", "altText": "x"},
                                  {"path": "/w/chart.png", "altText": "x" * 1025},
                                  {"path": "/w/chart.png", "bytes": "..."}])
def test_a_bad_attachment_is_refused_with_its_reason(item):
    bus = agent_bus()
    bus.hello("a", agent="lys", channel="discord:1")
    result = respond(bus, b"a", attachments=[item])
    assert refusal(result) == "invalid_attachment"
    if "altText" in item and len(item["altText"]) < 10:
        assert "only for image" in result["error"]


def test_a_draft_may_go_only_to_the_current_channel_and_its_id_is_in_the_answer():
    bus = agent_bus()
    bus.hello("a", agent="lys", channel="discord:1")
    bus.hello("b", agent="lys", channel="discord:2")
    assert refusal(respond(bus, b"a", "text", draft="d1", channel="discord:2")) == "draft_not_current"
    assert respond(bus, b"a", "text", draft="d1")["draft"] == "d1"


@pytest.mark.parametrize("channel", ["discord:1", "last"])
def test_a_draft_is_refused_on_any_channel_but_current_even_one_naming_the_callers_own(channel):
    bus = agent_bus()
    bus.hello("a", agent="lys", channel="discord:1")
    assert respond(bus, b"a", channel=channel)["channel"] == "discord:1"   # it does name it
    assert refusal(respond(bus, b"a", "text", draft="d1", channel=channel)) == "draft_not_current"
    assert outputs(bus, b"a") == [] and published(bus) == []


def test_a_channel_the_send_filter_names_gets_nothing_and_the_answer_says_so():
    bus = agent_bus(quiet=AgentSettings(owner_id=OWNER, no_delivery=frozenset({OWNER})))
    bus.hello("owner-side", agent="quiet", channel=OWNER)
    bus.hello("job", agent="quiet", channel="discord:2")
    result = respond(bus, b"job", "nightly report", channel="owner")
    assert (result["ok"], result["sent"], result["delivery"]) == (True, True, "none")
    assert published(bus) == [] and outputs(bus, b"owner-side") == []
    plain = respond(bus, b"job", "to myself")             # not filtered: delivered
    assert "delivery" not in plain and published(bus) == [("channel:discord:2", "to myself")]


def test_only_the_channels_own_session_acknowledges_its_output():
    bus = agent_bus()
    bus.hello("sender", agent="lys", channel="discord:1")
    bus.hello("reader", agent="lys", channel="discord:2")
    bus.hello("onlooker", agent="lys", channel="discord:3")
    bus.hello("plain")
    output_id = respond(bus, b"sender", "for discord 2", channel="discord:2")["outputId"]
    for stranger in (b"plain", b"onlooker", b"sender"):
        refused = bus.request(stranger, "ack_output", outputId=output_id)
        assert (refused["code"], "discord:2" in refused["error"]) == ("not_output_channel", True)
    assert bus.request(b"reader", "ack_output", outputId=output_id)["acked"] is True
