"""Sessions through the public client API on a real broker: the intercom tool end to end.

One broker serves the whole module; every test works in groups of its own (see
``Bus``), so tests never see each other's sessions.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import time
import uuid

import pytest

from schemas.config import Config
from schemas.errors import ERRORS
from schemas.limits import MAX_MESSAGE_CHARS

from .conftest import unique


def assert_refused(result: dict, code: str | None = None) -> None:
    """The shape every failure has: ok False, a known code, a human text."""
    assert isinstance(result, dict), result
    assert result.get("ok") is False, result
    assert result.get("code") in ERRORS, result
    assert isinstance(result.get("error"), str) and result["error"], result
    if code is not None:
        assert result["code"] == code, result


def ids(rows: list[dict]) -> set[str]:
    return {row["id"] for row in rows}


def listed(session, **params) -> dict:
    result = session.intercom(action="list", **params)
    assert result["ok"] is True, result
    return result


def groups_of(session) -> list[str]:
    result = session.intercom(action="status")
    assert result["ok"] is True, result
    return result["groups"]


def uuid_with_prefix(prefix: str) -> str:
    return prefix + str(uuid.uuid4())[8:]


def identity_with_prefix(broker, prefix: str) -> dict:
    """An identity history entry for an id starting with ``prefix``, as if an earlier
    session had held it: its row is put in the database (an id is never granted on
    request, only with its last holder's secret)."""
    session_id, secret = uuid_with_prefix(prefix), uuid.uuid4().hex
    with sqlite3.connect(broker.db, timeout=10) as db:
        db.execute("INSERT INTO session_identity (session_id, atomic_session_id, token_hash, "
                   "name, updated_at) VALUES (?, NULL, ?, 'earlier', ?)",
                   (session_id, hashlib.sha256(secret.encode()).hexdigest(), time.time()))
    return {"sessionId": session_id, "reclaimSecret": secret}


@pytest.fixture(scope="module")
def pair(shared_broker):
    """alice and bob, alone in a group of their own, shared by tests that only read or
    are refused (each of them checks that nothing changed)."""
    from .conftest import Bus

    handle = Bus(shared_broker)
    yield handle.connect_all(("alice", {"config": Config()}), ("bob", {"config": Config()}))
    handle.close_all()


# -- results are dicts, failures included ---------------------------------------------------

def test_intercom_returns_an_ok_dict(bus):
    alice = bus.connect("alice")
    result = alice.intercom(action="list")
    assert isinstance(result, dict)
    assert result["ok"] is True
    json.dumps(result)  # JSON-ready


@pytest.mark.parametrize("params", [
    pytest.param({"action": "bogus"}, id="unknown-action"),
    pytest.param({}, id="no-action"),
    pytest.param({"action": 5}, id="action-not-a-string"),
    pytest.param({"action": "list", "bogus": 1}, id="unknown-param"),
    pytest.param({"action": "list", "group": 5}, id="group-not-a-string"),
    pytest.param({"action": "send", "to": 5, "message": "hi"}, id="to-not-a-string"),
    pytest.param({"action": "send", "to": "x", "message": ["hi"]}, id="message-not-a-string"),
    pytest.param({"action": "send", "to": "x", "message": "hi", "attachments": "a"}, id="attachments-not-a-list"),
    pytest.param({"action": "send", "to": "x", "message": "hi",
                  "attachments": [{"type": "movie", "name": "a", "content": "b"}]}, id="attachment-bad-type"),
    pytest.param({"action": "send", "to": "x", "message": "hi",
                  "attachments": [{"type": "file", "name": "a"}]}, id="attachment-missing-content"),
    pytest.param({"action": "send", "to": "x", "message": "x" * (MAX_MESSAGE_CHARS + 1)}, id="message-too-long"),
    pytest.param({"action": "send", "message": "hi"}, id="send-without-to"),
    pytest.param({"action": "send", "to": "x"}, id="send-without-message"),
    pytest.param({"action": "join"}, id="join-without-group"),
    pytest.param({"action": "join", "group": "   "}, id="join-blank-group"),
    pytest.param({"action": "list", "timeout": 5}, id="timeout-on-list"),
])
def test_bad_parameters_come_back_as_an_error_dict_not_an_exception(pair, params):
    alice, _bob = pair
    assert_refused(alice.intercom(**params))


def test_broker_refuses_bad_parameters_that_skip_client_checks(pair):
    alice, bob = pair
    result = alice.send_nowait(to=5, message="hi").result(10)
    assert_refused(result, "invalid_params")
    result = alice.send_nowait(to=bob.id, message="hi", attachments=[{"type": "film"}]).result(10)
    assert_refused(result)


def test_bad_status_is_an_error_dict(bus):
    alice = bus.connect("alice")
    assert_refused(alice.set_status("sleeping"), "invalid_status")
    assert_refused(alice.set_status(42), "invalid_status")
    assert alice.set_status("thinking") == {"ok": True, "status": "thinking"}


def test_intercom_after_close_is_an_error_dict(bus):
    alice = bus.connect("alice")
    alice.close()
    assert_refused(alice.intercom(action="list"), "session_closed")


# -- list -------------------------------------------------------------------------------

def test_list_returns_self_and_only_sessions_sharing_a_group(bus):
    other = unique()
    alice, bob, carol = bus.connect_all("alice", "bob", ("carol", {"group": other}))
    result = listed(alice)
    assert result["self"]["id"] == alice.id
    assert result["self"]["name"] == "alice"
    assert ids(result["sessions"]) == {bob.id}
    row = result["sessions"][0]
    assert row["name"] == "bob" and row["status"] == "idle" and row["groups"] == [bus.group]
    assert carol.id not in ids(result["sessions"])


def test_list_with_group_filter_shows_that_group_without_joining_it(bus):
    other = unique()
    alice, carol = bus.connect_all("alice", ("carol", {"group": other}))
    result = listed(alice, group=other)
    assert ids(result["sessions"]) == {carol.id}
    assert groups_of(alice) == [bus.group]
    assert_refused(alice.intercom(action="send", to=carol.id, message="hi"), "different_group")


def test_status_with_group_filter_counts_that_group_without_joining_it(bus):
    other = unique()
    alice, _carol, _dave = bus.connect_all("alice", ("carol", {"group": other}),
                                           ("dave", {"group": other}))
    result = alice.intercom(action="status", group=other)
    assert result["ok"] is True
    assert result["visibleSessions"] == 2
    assert result["groups"] == [bus.group]
    assert groups_of(alice) == [bus.group]


# -- status and groups ----------------------------------------------------------------------

def test_status_reports_session_groups_home_visible_count_and_broker(bus):
    alice, _bob, _carol, _dave = bus.connect_all("alice", "bob", "carol",
                                                 ("dave", {"group": unique()}))
    result = alice.intercom(action="status")
    assert result["ok"] is True
    assert result["connected"] is True
    assert result["sessionId"] == alice.id
    assert result["groups"] == [bus.group]
    assert result["homeGroup"] == bus.group
    assert result["visibleSessions"] == 2
    broker = result["broker"]
    assert isinstance(broker["id"], str) and broker["id"]
    assert broker["routing"] == "single-node"
    assert broker["otherBrokersLive"] == 0


def test_groups_lists_every_group_with_count_and_membership_marker(bus):
    other = unique()
    alice, _bob, _carol = bus.connect_all("alice", "bob", ("carol", {"group": other}))
    result = alice.intercom(action="groups")
    assert result["ok"] is True
    rows = {row["name"]: row for row in result["groups"]}
    assert (rows[bus.group]["sessions"], rows[bus.group]["member"]) == (2, True)
    assert (rows[other]["sessions"], rows[other]["member"]) == (1, False)
    assert result["memberships"] == [bus.group]


# -- join and leave -------------------------------------------------------------------------

def test_join_trims_the_name_and_reports_the_full_membership_set(bus):
    extra = unique()
    alice = bus.connect("alice")
    result = alice.intercom(action="join", group=f"  {extra}\t")
    assert result["ok"] is True, result
    assert result["groups"] == [bus.group, extra]
    assert result["joined"] == extra
    assert groups_of(alice) == [bus.group, extra]


def test_join_creates_the_group_for_everyone_to_see(bus):
    extra = unique()
    alice, bob = bus.connect_all("alice", "bob")
    assert alice.intercom(action="join", group=extra)["ok"]
    rows = {row["name"]: row for row in bob.intercom(action="groups")["groups"]}
    assert (rows[extra]["sessions"], rows[extra]["member"]) == (1, False)


def test_join_makes_that_groups_sessions_reachable(bus):
    other = unique()
    alice, carol = bus.connect_all("alice", ("carol", {"group": other}))
    assert alice.intercom(action="join", group=other)["ok"]
    assert carol.id in ids(listed(alice)["sessions"])
    assert alice.intercom(action="send", to=carol.id, message="hello")["ok"]
    assert carol.receive(5)["message"] == "hello"


@pytest.mark.parametrize("name", ["true", "auto", " TRUE ", "Auto"])
def test_join_of_a_reserved_group_is_refused_and_changes_nothing(pair, name):
    alice, _bob = pair
    before = groups_of(alice)
    assert_refused(alice.intercom(action="join", group=name), "reserved_group")
    assert groups_of(alice) == before


def test_leave_with_group_removes_only_that_membership(bus):
    one, two = unique(), unique()
    alice = bus.connect("alice")
    assert alice.intercom(action="join", group=one)["ok"]
    assert alice.intercom(action="join", group=two)["ok"]
    result = alice.intercom(action="leave", group=one)
    assert result["ok"] is True, result
    assert result["groups"] == [bus.group, two]
    assert groups_of(alice) == [bus.group, two]


def test_leave_with_group_makes_that_groups_sessions_unreachable(bus):
    other = unique()
    alice, carol = bus.connect_all("alice", ("carol", {"group": other}))
    assert alice.intercom(action="join", group=other)["ok"]
    assert alice.intercom(action="leave", group=other)["ok"]
    assert carol.id not in ids(listed(alice)["sessions"])
    assert_refused(alice.intercom(action="send", to=carol.id, message="hi"), "different_group")


def test_leave_without_group_resets_to_the_home_group(bus):
    one, two = unique(), unique()
    alice = bus.connect("alice")
    assert alice.intercom(action="join", group=one)["ok"]
    assert alice.intercom(action="join", group=two)["ok"]
    assert alice.intercom(action="leave", group=bus.group)["ok"]
    result = alice.intercom(action="leave")
    assert result["ok"] is True, result
    assert result["groups"] == [bus.group]
    status = alice.intercom(action="status")
    assert status["groups"] == [bus.group] and status["homeGroup"] == bus.group


def test_leave_of_the_last_group_is_refused_and_changes_nothing(pair):
    alice, _bob = pair
    (only,) = groups_of(alice)
    assert_refused(alice.intercom(action="leave", group=only), "last_group")
    assert groups_of(alice) == [only]


def test_leave_of_a_group_not_joined_is_refused(pair):
    alice, _bob = pair
    before = groups_of(alice)
    assert_refused(alice.intercom(action="leave", group=unique()), "not_member")
    assert groups_of(alice) == before


# -- send: targeting -------------------------------------------------------------------------

def test_send_by_full_id_delivers_a_complete_message(bus):
    alice, bob = bus.connect_all("alice", "bob")
    attachments = [{"type": "snippet", "name": "a.py", "content": "print(1)", "language": "python"},
                   {"type": "file", "name": "a.py", "content": "print(1)"}]
    before = time.time()
    result = alice.intercom(action="send", to=bob.id, message="hello bob", attachments=attachments)
    after = time.time()
    assert result["ok"] is True, result
    assert result["to"] == bob.id
    msg = bob.receive(5)
    assert msg is not None
    assert msg["id"] == result["messageId"]
    assert msg["from"] == alice.id
    assert msg["fromName"] == "alice"
    assert msg["message"] == "hello bob"
    assert msg["attachments"] == attachments
    assert before - 1 <= msg["sentAt"] <= after + 1
    assert msg["expectsReply"] is False


def test_send_by_case_insensitive_exact_name(bus):
    alice, bob = bus.connect_all("alice", "Bob-The-Builder")
    result = alice.intercom(action="send", to="bob-the-BUILDER", message="hi")
    assert result["ok"] is True and result["to"] == bob.id, result
    assert bob.receive(5)["message"] == "hi"


def test_send_by_unique_8_hex_id_prefix(bus):
    alice, bob = bus.connect_all("alice", "bob")
    result = alice.intercom(action="send", to=bob.id[:8], message="hi")
    assert result["ok"] is True and result["to"] == bob.id, result
    assert bob.receive(5)["message"] == "hi"


def test_send_by_atomic_session_id_of_exactly_one_visible_session(bus):
    atomic = f"atomic-{uuid.uuid4()}"
    alice, bob = bus.connect_all("alice", ("bob", {"atomic_session_id": atomic}))
    result = alice.intercom(action="send", to=atomic, message="hi")
    assert result["ok"] is True and result["to"] == bob.id, result
    assert bob.receive(5)["message"] == "hi"


def test_send_by_atomic_session_id_ignores_sessions_the_sender_cannot_see(bus):
    atomic = f"atomic-{uuid.uuid4()}"
    alice, _elsewhere, bob = bus.connect_all(
        "alice", ("elsewhere", {"group": unique(), "atomic_session_id": atomic}),
        ("bob", {"atomic_session_id": atomic}))
    result = alice.intercom(action="send", to=atomic, message="hi")
    assert result["ok"] is True and result["to"] == bob.id, result


def test_send_by_atomic_session_id_held_by_two_visible_sessions_is_refused(bus):
    atomic = f"atomic-{uuid.uuid4()}"
    alice, bob1, bob2 = bus.connect_all("alice", ("bob1", {"atomic_session_id": atomic}),
                                        ("bob2", {"atomic_session_id": atomic}))
    result = alice.intercom(action="send", to=atomic, message="hi")
    assert_refused(result, "ambiguous_target")
    assert bob1.id in result["error"] and bob2.id in result["error"]


def test_exact_name_takes_precedence_over_an_atomic_session_id(bus):
    label = f"label-{uuid.uuid4().hex[:8]}"
    alice, _bob, named = bus.connect_all("alice", ("bob", {"atomic_session_id": label}), label)
    result = alice.intercom(action="send", to=label, message="hi")
    assert result["ok"] is True and result["to"] == named.id, result


@pytest.mark.parametrize("form", ["id", "name", "NAME", "prefix"])
def test_send_to_self_is_refused(pair, form):
    alice, _bob = pair
    to = {"id": alice.id, "name": "alice", "NAME": "ALICE", "prefix": alice.id[:8]}[form]
    assert_refused(alice.intercom(action="send", to=to, message="hi"), "self_target")


@pytest.mark.parametrize("length", [6, 7, 12, 35])
def test_send_to_other_truncations_of_an_id_is_refused(pair, length):
    alice, bob = pair
    result = alice.intercom(action="send", to=bob.id[:length], message="hi")
    assert_refused(result, "invalid_target")


def test_send_to_an_ambiguous_name_lists_only_visible_candidates(bus):
    alice, twin1, twin2, hidden = bus.connect_all("alice", "twin", "Twin",
                                                  ("twin", {"group": unique()}))
    result = alice.intercom(action="send", to="twin", message="hi")
    assert_refused(result, "ambiguous_target")
    assert twin1.id in result["error"] and twin2.id in result["error"]
    assert hidden.id not in result["error"]


def test_send_to_an_ambiguous_prefix_lists_only_visible_candidates(bus):
    prefix = uuid.uuid4().hex[:8]
    alice, one, two, hidden = bus.connect_all(
        "alice", ("one", {"identity": identity_with_prefix(bus.broker, prefix)}),
        ("two", {"identity": identity_with_prefix(bus.broker, prefix)}),
        ("hidden", {"group": unique(), "identity": identity_with_prefix(bus.broker, prefix)}))
    assert {one.id[:8], two.id[:8], hidden.id[:8]} == {prefix}
    result = alice.intercom(action="send", to=prefix, message="hi")
    assert_refused(result, "ambiguous_target")
    assert one.id in result["error"] and two.id in result["error"]
    assert hidden.id not in result["error"]


def test_send_by_full_id_to_a_session_in_another_group_is_refused(bus):
    alice, carol = bus.connect_all("alice", ("carol", {"group": unique()}))
    result = alice.intercom(action="send", to=carol.id, message="hi")
    assert result == {"ok": False, "code": "different_group",
                      "error": "Target session is in a different intercom group"}


def test_send_by_name_to_a_session_in_another_group_finds_nothing(bus):
    alice, _carol = bus.connect_all("alice", ("carol", {"group": unique()}))
    result = alice.intercom(action="send", to="carol", message="hi")
    assert_refused(result, "target_not_found")


def test_send_by_prefix_to_a_session_in_another_group_is_not_delivered(bus):
    alice, carol = bus.connect_all("alice", ("carol", {"group": unique()}))
    result = alice.intercom(action="send", to=carol.id[:8], message="hi")
    assert_refused(result)
    assert carol.id not in result["error"]


def test_an_oversized_message_is_refused_with_its_own_code_on_both_sides(pair):
    alice, bob = pair
    text = "x" * (MAX_MESSAGE_CHARS + 1)
    checked_by_client = alice.intercom(action="send", to=bob.id, message=text)
    checked_by_broker = alice.send_nowait(bob.id, text).result(10)
    for result in (checked_by_client, checked_by_broker):
        assert_refused(result, "message_too_large")
        assert str(MAX_MESSAGE_CHARS) in result["error"]
