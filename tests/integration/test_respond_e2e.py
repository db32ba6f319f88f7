"""respond end to end: a real broker, agent sessions as conversations, the channel's
session and a ``python -m client tail --channel`` watching; drafts and the broker's
response_recovery rows.

Each test names its own channels (and, where ``last`` matters, its own agent), so
tests sharing the module's broker never see each other's outputs.
"""

from __future__ import annotations

import json

import pytest

from client import ConnectError

from .agent_helpers import agent_broker, channel_tail, recovery_rows  # noqa: F401 (fixtures)
from .conftest import drain_events, unique, wait_for_event

OWNER = f"discord:{unique('owner')}"
shared_broker = agent_broker({"lys": {"owner": OWNER, "invoke": True}})


def outputs(session) -> list[dict]:
    return [e for e in drain_events(session) if e["event"] == "output"]


def conversation(bus, agent: str, channel: str | None = None, **kwargs):
    return bus.connect(unique("s"), agent=agent, channel=channel, **kwargs)


def test_respond_to_current_reaches_the_own_session_and_the_channel_tail(bus, channel_tail):
    me = conversation(bus, "lys", f"discord:{unique('c')}")
    tail = channel_tail(me.channel)
    tail.warm_up(me, "current")
    drain_events(me)
    result = me.respond(content="Here's the information\nyou requested.")
    output_id = result.pop("outputId")
    assert result == {"ok": True, "final": True, "sent": True, "channel": me.channel}
    (event,) = outputs(me)
    assert event["outputId"] == output_id
    assert event["content"] == "Here's the information\nyou requested."
    assert event["channel"] == me.channel and event["fromSession"] == me.channel
    assert event["final"] is True and event["attachments"] == []
    line, _ = tail.reader.wait_line(lambda l: "you requested." in l, timeout=10)
    assert me.channel in line and "final=true" in line
    assert "Here's the information\\nyou requested." in line      # one line per output


def test_the_default_channel_is_internal_with_the_session_id_and_an_intermediate_update_is_not_final(bus):
    me = conversation(bus, "lys")
    assert me.channel == f"internal:{me.id}"
    result = me.respond(content="Looking into that for you...", final=False)
    assert result["ok"] and result["final"] is False and result["channel"] == me.channel
    (event,) = outputs(me)
    assert event["final"] is False


def test_respond_to_an_explicit_channel_with_attachments_is_not_final_and_carries_paths(
        bus, channel_tail, tmp_path):
    report, chart = tmp_path / "report.pdf", tmp_path / "chart.png"
    report.write_bytes(b"%PDF")
    chart.write_bytes(b"\x89PNG")
    caller = conversation(bus, "lys", f"internal:{unique('c')}")
    there = conversation(bus, "lys", f"discord:{unique('d')}|{unique('m')}")
    tail = channel_tail(there.channel, "--json")
    tail.warm_up(caller, there.channel)
    drain_events(there)
    attachments = [{"path": str(report)}, {"path": str(chart), "altText": "Revenue by quarter"}]
    result = caller.respond(content="Here's the report", channel=there.channel,
                            attachments=attachments, final=True)
    assert result == {"ok": True, "final": False, "sent": True, "channel": there.channel,
                      "outputId": result["outputId"]}
    (event,) = outputs(there)
    assert event["attachments"] == attachments and event["fromSession"] == caller.channel
    assert event["final"] is False
    assert outputs(caller) == []
    line, _ = tail.reader.wait_line(lambda l: json.loads(l)["content"] == "Here's the report",
                                    timeout=10)
    published = json.loads(line)
    assert published["event"] == "output" and published["attachments"] == attachments
    assert published["channel"] == there.channel and published["final"] is False


def test_tail_channel_prints_attachment_paths_and_only_its_own_channel(bus, channel_tail, tmp_path):
    doc = tmp_path / "data.csv"
    doc.write_text("a,b\n")
    caller = conversation(bus, "lys", f"internal:{unique('c')}")
    watched = conversation(bus, "lys", f"discord:{unique('w')}")
    near = conversation(bus, "lys", watched.channel + "0")   # shares the prefix: SUB alone would let it in
    tail = channel_tail(watched.channel)
    tail.warm_up(caller, watched.channel)
    assert caller.respond(content="not for this tail", channel=near.channel)["ok"]
    assert caller.respond(content="the data", channel=watched.channel,
                          attachments=[{"path": str(doc)}])["ok"]
    line, before = tail.reader.wait_line(lambda l: "the data" in l, timeout=10)
    assert f"from {caller.channel}" in line and "final=false" in line and str(doc) in line
    assert not [l for l in before if "not for this tail" in l]


def test_respond_last_goes_to_the_agents_most_recently_active_conversation(bus):
    agent = unique("a")
    here = conversation(bus, agent, f"internal:{unique('h')}")
    there = conversation(bus, agent, f"discord:{unique('t')}")
    there.begin_turn()
    drain_events(there)          # the turn reached the broker before the respond below
    result = here.respond(content="to the last one", channel="last")
    assert result["ok"] and result["channel"] == there.channel and result["final"] is False
    assert [e["content"] for e in outputs(there)] == ["to the last one"]
    here.begin_turn()
    drain_events(here)
    result = here.respond(content="now me", channel="last")
    assert result["ok"] and result["channel"] == here.channel and result["final"] is True


def test_receiving_an_output_makes_a_conversation_the_last_active(bus):
    agent = unique("a")
    first = conversation(bus, agent, f"internal:{unique('f')}")
    second = conversation(bus, agent, f"discord:{unique('s')}")
    third = conversation(bus, agent, f"discord:{unique('t')}")
    third.begin_turn()
    drain_events(third)
    assert first.respond(content="hello", channel=second.channel)["ok"]
    assert first.respond(content="who?", channel="last")["channel"] == second.channel


def test_respond_owner_reaches_the_configured_owner_channel(bus):
    caller = conversation(bus, "lys", f"internal:{unique('c')}")
    owner = conversation(bus, "lys", OWNER)
    result = caller.respond(content="Alert: something needs attention", channel="owner")
    assert result["ok"] and result["channel"] == OWNER and result["final"] is False
    assert [e["content"] for e in outputs(owner)] == ["Alert: something needs attention"]


def test_respond_owner_without_an_owner_configured_is_refused(bus):
    caller = conversation(bus, unique("a"))
    result = caller.respond(content="hi", channel="owner")
    assert result["code"] == "owner_not_configured", result


def test_refusals_of_respond(bus, tmp_path):
    chart = tmp_path / "chart.png"
    chart.write_bytes(b"\x89PNG")
    me = conversation(bus, "lys", f"internal:{unique('c')}")
    assert me.respond(content="x", attachments=[{"path": str(chart)}])["code"] == "attachments_unsupported"
    assert me.respond(content="x", channel=f"discord:{unique('nobody')}")["code"] == "channel_not_found"
    assert me.respond(content="x", channel="smoke-signal:1")["code"] == "invalid_channel"
    assert me.respond(content="x", attachments=[{"path": str(tmp_path / "gone.png")}])["code"] == \
        "invalid_attachment"
    refused = me.respond(content="x", attachments=[{"path": str(chart) + ".pdf", "altText": "x"}])
    assert refused["code"] == "invalid_attachment"
    assert me.respond(content="x", draft="draft-1")["code"] == "invalid_params"
    assert outputs(me) == []
    plain = bus.connect("no-agent")
    assert plain.respond(content="x")["code"] == "no_agent"


def test_another_agents_channel_is_not_found(bus):
    mine = conversation(bus, unique("a"), f"discord:{unique('m')}")
    theirs = conversation(bus, unique("b"), f"discord:{unique('t')}")
    assert mine.respond(content="x", channel=theirs.channel)["code"] == "channel_not_found"
    assert outputs(theirs) == []


def test_a_remote_session_may_respond_to_current_and_its_agents_remote_ids_only(bus):
    agent = unique("a")
    remote = conversation(bus, agent, f"remote:{unique('r')}")
    other_remote = conversation(bus, agent, f"remote:{unique('o')}")
    local = conversation(bus, agent, f"discord:{unique('d')}")
    assert remote.respond(content="here")["ok"]
    assert remote.respond(content="there", channel=other_remote.channel)["ok"]
    assert [e["content"] for e in outputs(other_remote)] == ["there"]
    for channel in ("last", "owner", local.channel):
        assert remote.respond(content="no", channel=channel)["code"] == "remote_channel_refused", channel
    assert outputs(local) == []


def test_one_channel_has_at_most_one_live_session_and_an_agent_name_must_be_safe(bus):
    channel = f"discord:{unique('c')}"
    conversation(bus, "lys", channel)
    with pytest.raises(ConnectError) as refused:
        conversation(bus, "lys", channel)
    assert refused.value.code == "channel_in_use"
    with pytest.raises(ConnectError) as refused:
        conversation(bus, "../etc")
    assert refused.value.code == "invalid_agent"


# -- drafts -------------------------------------------------------------------------------

def test_a_draft_sent_by_reference_delivers_its_exact_text_and_history_keeps_it(bus):
    entries: list[dict] = []
    me = conversation(bus, "lys", f"discord:{unique('c')}", history=entries.append)
    me.begin_turn()
    text = "The full answer, *exactly* as the model wrote it.\n"
    draft = me.record_draft(text, complete=True)
    drain_events(me)
    result = me.respond(draft=draft)
    assert result == {"ok": True, "final": True, "sent": True, "channel": me.channel,
                      "draft": draft, "outputId": result["outputId"]}
    assert [e["content"] for e in outputs(me)] == [text]
    (entry,) = [e for e in entries if e["type"] == "respond"]
    assert entry["content"] == text and entry["draft"] == draft


def test_draft_references_only_in_their_turn_only_to_current_only_when_complete(bus):
    me = conversation(bus, "lys", f"internal:{unique('c')}")
    other = conversation(bus, "lys", f"discord:{unique('o')}")
    me.begin_turn()
    old = me.record_draft("from the first turn", complete=True)
    me.begin_turn()
    cut = me.record_draft("half", complete=False)
    unsure = me.record_draft("whole?", complete=None)
    fine = me.record_draft("whole", complete=True)
    assert me.respond(draft=old)["code"] == "draft_expired"
    assert me.respond(draft="draft-never")["code"] == "unknown_draft"
    assert me.respond(draft=cut)["code"] == "draft_incomplete"
    assert me.respond(draft=unsure)["code"] == "draft_incomplete"
    assert me.respond(draft=fine, channel=other.channel)["code"] == "draft_not_current"
    assert outputs(other) == [] and outputs(me) == []


def test_a_draft_goes_once_and_only_with_channel_current(bus):
    me = conversation(bus, "lys", f"discord:{unique('c')}")
    me.begin_turn()
    draft = me.record_draft("said once", complete=True)
    drain_events(me)
    for channel in (me.channel, "last"):     # both name this very conversation
        assert me.respond(draft=draft, channel=channel)["code"] == "draft_not_current"
    assert me.respond(draft=draft)["ok"]

    again = me.respond(draft=draft)

    assert again["ok"] is False and again["code"] == "draft_already_sent", again
    assert [e["content"] for e in outputs(me)] == ["said once"]
    assert me.end_turn()["recovery"] == "recovered"


def test_a_turn_with_an_undelivered_draft_is_kept_pending_then_recovered(bus):
    me = conversation(bus, "lys", f"discord:{unique('c')}")
    me.begin_turn()
    draft = me.record_draft("the plain text answer", complete=True)
    (row,) = recovery_rows(bus.broker.db, "lys", me.channel)
    assert row["outcome"] == "pending"
    assert row["drafts"] == [{"id": draft, "text": "the plain text answer",
                              "completion": "complete", "outcome": "pending"}]
    assert me.respond(draft=draft)["ok"]
    ended = me.end_turn()
    assert ended["ok"] and ended["recovery"] == "recovered"
    (row,) = recovery_rows(bus.broker.db, "lys", me.channel)
    assert row["outcome"] == "recovered"
    assert [d["outcome"] for d in row["drafts"]] == ["delivered"]


def test_a_later_rejected_turn_replaces_the_row_and_reset_deletes_it(bus):
    me = conversation(bus, "lys", f"discord:{unique('c')}")
    me.begin_turn()
    me.record_draft("first turn's draft", complete=True)
    me.begin_turn()                   # ends the first turn: nothing delivered
    (row,) = recovery_rows(bus.broker.db, "lys", me.channel)
    assert row["outcome"] == "failed"
    assert [(d["text"], d["outcome"]) for d in row["drafts"]] == [("first turn's draft", "declined")]
    me.record_draft("second turn's draft", complete=False)
    (row,) = recovery_rows(bus.broker.db, "lys", me.channel)
    assert row["outcome"] == "pending"
    assert [(d["text"], d["completion"]) for d in row["drafts"]] == [("second turn's draft", "incomplete")]
    assert me.reset() == {"ok": True}
    assert recovery_rows(bus.broker.db, "lys", me.channel) == []


def test_an_ephemeral_conversation_keeps_no_recovery_row_and_cannot_be_reset(bus):
    me = conversation(bus, "lys", f"discord:{unique('c')}", persistent=False)
    me.begin_turn()
    draft = me.record_draft("never kept", complete=True)
    ended = me.end_turn()
    assert ended["ok"] and ended["recovery"] == "failed"
    # No row keeps them: the failed turn itself carries its drafts.
    assert ended["drafts"] == [{"id": draft, "text": "never kept", "completion": "complete",
                                "outcome": "declined"}]
    assert recovery_rows(bus.broker.db, "lys", me.channel) == []
    assert me.reset()["code"] == "not_persistent"
    assert me.delete()["code"] == "not_persistent"


def test_the_channels_session_acknowledges_an_output_and_its_sender_hears_output_acked(bus):
    agent = unique("ack")
    sender = conversation(bus, agent, f"discord:{unique('a')}")
    reader = conversation(bus, agent, f"discord:{unique('b')}")
    drain_events(sender)
    sent = sender.respond(content="the report is ready", channel=reader.channel)
    assert sent["ok"] and sent["sent"] is True
    (event,) = outputs(reader)
    assert event["outputId"] == sent["outputId"] and event["fromId"] == sender.id
    assert reader.ack_output(event["outputId"]) == {
        "ok": True, "acked": True, "outputId": sent["outputId"], "told": True}
    acked, _ = wait_for_event(sender, lambda e: e["event"] == "output_acked", timeout=10)
    assert acked["outputId"] == sent["outputId"] and acked["channel"] == reader.channel
    # Acknowledged once: a second ack is answered, and tells nobody again.
    assert reader.ack_output(event["outputId"])["acked"] is True
    assert [e for e in drain_events(sender) if e["event"] == "output_acked"] == []


def test_an_unknown_output_id_cannot_be_acknowledged(bus):
    me = conversation(bus, "lys")
    answer = me.ack_output("5f0c1a2b-0000-4000-8000-000000000000")
    assert answer["ok"] is False and answer["code"] == "unknown_output"
