"""Sessions, groups and presence, driven through the engine with a fake clock."""

from broker.core import Send
from broker.core.kernel.records import IdentitySaved
from schemas.groups import resolve_home_group
from schemas.protocol import envelope

from .harness import Bus, uuid_from


def test_hello_welcomes_with_id_token_and_default_group():
    bus = Bus()
    welcome = bus.hello("alice")
    assert welcome["ok"] is True
    assert welcome["sessionId"] == uuid_from(0xA0000001)
    assert welcome["groups"] == ["default"] and welcome["homeGroup"] == "default"
    assert welcome["token"]


def test_hello_records_identity_for_restarts_and_claims_the_id_store_wide():
    bus = Bus()
    bus.hello("alice", atomicSessionId="atomic-1")
    claim, record = bus.persisted()
    assert isinstance(record, IdentitySaved)
    assert record.session_id == uuid_from(0xA0000001) and record.atomic_session_id == "atomic-1"
    assert (type(claim).__name__, claim.session_id, claim.gone) == \
        ("SessionClaimed", record.session_id, [])


def test_a_session_leaving_releases_its_claim():
    bus = Bus()
    bus.hello("alice")
    bus.feed(b"alice", {"v": 1, "k": "bye", "id": "b1"})
    (release,) = bus.persisted()
    assert (type(release).__name__, release.session_id, release.broker_id) == \
        ("SessionReleased", uuid_from(0xA0000001), bus.engine.state.broker_id)


def test_connecting_session_is_announced_to_peers_and_on_pub_only():
    bus = Bus()
    bus.hello("alice")
    bus.hello("bob")
    assert bus.events(b"alice") == [("session_joined", "bob")]
    assert bus.events(b"bob") == []
    assert bus.published() == [("default", "session_joined", "bob")]


def test_list_shows_self_and_sessions_sharing_a_membership():
    bus = Bus()
    bus.hello("alice")
    bus.hello("bob")
    bus.hello("carol", group="elsewhere")
    result = bus.call(b"alice", "list")
    assert result["self"]["name"] == "alice"
    assert [row["name"] for row in result["sessions"]] == ["bob"]


def test_list_with_group_is_a_read_only_view_of_that_group():
    bus = Bus()
    bus.hello("alice")
    bus.hello("carol", group="elsewhere")
    result = bus.call(b"alice", "list", group="elsewhere")
    assert [row["name"] for row in result["sessions"]] == ["carol"]
    assert bus.call(b"alice", "status")["groups"] == ["default"]


def test_groups_lists_counts_and_membership_markers():
    bus = Bus()
    bus.hello("alice")
    bus.hello("bob")
    bus.hello("carol", group="ops")
    result = bus.call(b"alice", "groups")
    assert result["groups"] == [
        {"name": "default", "sessions": 2, "member": True},
        {"name": "ops", "sessions": 1, "member": False},
    ]


def test_join_trims_creates_and_reports_all_memberships():
    bus = Bus()
    bus.hello("alice")
    result = bus.call(b"alice", "join", group="  api-review ")
    assert result["ok"] and result["groups"] == ["default", "api-review"]
    assert bus.published() == [("api-review", "session_joined", "alice"),
                               ("default", "presence_update", "alice")]


def test_join_of_reserved_names_is_refused():
    bus = Bus()
    bus.hello("alice")
    for name in ("true", "auto", " AUTO "):
        result = bus.call(b"alice", "join", group=name)
        assert result["code"] == "reserved_group"
    assert bus.call(b"alice", "join", group="  ")["code"] == "invalid_group"
    assert bus.call(b"alice", "join")["code"] == "missing_param"


def test_group_and_session_names_with_control_characters_are_refused():
    bus = Bus()
    bus.hello("alice")
    for group in ("api\nreview", "tab\there", "esc\x1b[31m", "del\x7f"):
        assert bus.call(b"alice", "join", group=group)["code"] == "invalid_group", group
    assert bus.call(b"alice", "status")["groups"] == ["default"]
    assert bus.hello("bob\nsmith", identity=b"bob")["code"] == "invalid_name"
    assert bus.hello("bob smith", identity=b"bob")["ok"] is True


def test_join_makes_both_sides_visible_and_tells_both():
    bus = Bus()
    bus.hello("alice")
    bus.hello("carol", group="ops")
    bus.call(b"alice", "join", group="ops")
    assert bus.events(b"carol") == [("session_joined", "alice")]
    assert bus.events(b"alice") == [("session_joined", "carol")]


def test_join_tells_peers_who_already_saw_the_session_with_an_update():
    bus = Bus()
    bus.hello("alice")
    bus.hello("bob")
    bus.call(b"alice", "join", group="ops")
    assert bus.events(b"bob") == [("presence_update", "alice")]


def test_leave_with_group_removes_only_that_membership():
    bus = Bus()
    bus.hello("alice")
    bus.hello("carol", group="ops")
    bus.call(b"alice", "join", group="ops")
    bus.call(b"alice", "join", group="docs")
    result = bus.call(b"alice", "leave", group="ops")
    assert result["groups"] == ["default", "docs"]
    assert bus.events(b"carol") == [("session_left", "alice")]
    assert bus.events(b"alice") == [("session_left", "carol")]


def test_bare_leave_resets_to_the_home_group():
    bus = Bus()
    bus.hello("alice", group="home")
    bus.call(b"alice", "join", group="ops")
    bus.call(b"alice", "leave", group="home")
    result = bus.call(b"alice", "leave")
    assert result["groups"] == ["home"]


def test_leave_of_a_group_not_joined_or_of_the_last_group_is_refused():
    bus = Bus()
    bus.hello("alice")
    assert bus.call(b"alice", "leave", group="ops")["code"] == "not_member"
    assert bus.call(b"alice", "leave", group="default")["code"] == "last_group"


def test_status_reports_memberships_visible_count_and_broker_state():
    bus = Bus()
    bus.hello("alice")
    bus.hello("bob")
    bus.hello("carol", group="ops")
    result = bus.call(b"alice", "status")
    assert result["sessionId"] == uuid_from(0xA0000001)
    assert result["groups"] == ["default"] and result["visibleSessions"] == 1
    assert result["broker"] == {"id": "test", "routing": "single-node", "otherBrokersLive": 0}
    assert bus.call(b"alice", "status", group="ops")["visibleSessions"] == 1


def test_status_change_reaches_visible_peers_and_pub():
    bus = Bus()
    bus.hello("alice", statusSuffix="researching")
    bus.hello("bob")
    bus.hello("carol", group="ops")
    bus.feed(b"alice", envelope("status", status="tool:grep"))
    assert bus.events(b"bob") == [("presence_update", "alice")]
    assert bus.events(b"carol") == []
    assert bus.sends(b"bob")[0]["session"]["status"] == "tool:grep · researching"
    assert bus.published() == [("default", "presence_update", "alice")]


def test_invalid_status_is_refused():
    bus = Bus()
    bus.hello("alice")
    out = bus.feed(b"alice", envelope("status", id="s1", status="sleeping"))
    assert out[0].env["code"] == "invalid_status"


def test_bye_removes_the_session_at_once_and_tells_peers():
    bus = Bus()
    bus.hello("alice")
    bus.hello("bob")
    bus.feed(b"alice", envelope("bye"))
    assert bus.events(b"bob") == [("session_left", "alice")]
    assert bus.call(b"bob", "list")["sessions"] == []


def test_silent_session_expires_after_liveness_and_peers_hear_it():
    bus = Bus(liveness_s=3.0)
    bus.hello("alice")
    bus.hello("bob")
    bus.advance(2.0)
    bus.feed(b"bob", envelope("hb"))
    bus.advance(1.5)
    assert bus.events(b"bob") == [("session_left", "alice")]
    assert bus.call(b"bob", "list")["sessions"] == []


def test_heartbeat_is_answered():
    bus = Bus()
    bus.hello("alice")
    out = bus.feed(b"alice", envelope("hb"))
    assert out == [Send(b"alice", envelope("hb"))]


def test_reconnect_with_token_keeps_id_and_memberships():
    bus = Bus()
    welcome = bus.hello("alice")
    bus.call(b"alice", "join", group="ops")
    again = bus.hello("alice", identity=b"alice-2", sessionId=welcome["sessionId"],
                      token=welcome["token"])
    assert again["sessionId"] == welcome["sessionId"]
    assert again["groups"] == ["default", "ops"]
    assert bus.call(b"alice-2", "status")["ok"]
    assert bus.call(b"alice", "status")["code"] == "not_connected"


def test_live_id_is_never_given_to_a_new_registration():
    bus = Bus()
    welcome = bus.hello("alice")
    other = bus.hello("mallory", sessionId=welcome["sessionId"], token="guess")
    assert other["sessionId"] != welcome["sessionId"]


def test_a_remembered_id_goes_back_only_with_its_reclaim_secret():
    bus = Bus()
    welcome = bus.hello("alice", atomicSessionId="atomic-1")
    bus.feed(b"alice", envelope("bye"))
    # Knowing the id and the Atomic session id (list shows both) is not enough.
    stranger = bus.hello("mallory", sessionId=welcome["sessionId"], atomicSessionId="atomic-1")
    assert stranger["sessionId"] != welcome["sessionId"]
    assert stranger["reclaimed"] is False and "reclaim secret" in stranger["reason"]
    bus.feed(b"mallory", envelope("bye"))
    back = bus.hello("alice", identity=b"alice-3", sessionId=welcome["sessionId"],
                     token=welcome["token"])
    assert back["sessionId"] == welcome["sessionId"] and back["reclaimed"] is True


def test_a_refused_reclaim_of_a_live_id_says_why():
    bus = Bus()
    welcome = bus.hello("alice")
    other = bus.hello("bob", sessionId=welcome["sessionId"])
    assert other["reclaimed"] is False and other["reason"] == "a live session holds that id"


# -- one identity entry, two processes: the client's instance nonce tells them apart -----------

def test_a_second_process_presenting_a_live_identity_gets_a_fresh_id_and_the_first_keeps_it():
    bus = Bus()
    first = bus.hello("alice", instance="process-1")
    bus.hello("bob")

    second = bus.hello("alice", identity=b"alice-copy", instance="process-2",
                       sessionId=first["sessionId"], token=first["token"])

    assert second["sessionId"] != first["sessionId"] and second["token"] != first["token"]
    assert second["reclaimed"] is False and second["reason"] == "a live session holds that id"
    assert bus.call(b"bob", "send", to=first["sessionId"], message="still you?")["delivered"]
    assert [m["message"] for m in bus.sends(b"alice", "msg")] == ["still you?"]
    assert bus.sends(b"alice-copy", "msg") == []
    assert bus.call(b"alice", "status")["ok"]


def test_the_same_client_on_a_new_connection_keeps_its_id():
    bus = Bus()
    first = bus.hello("alice", instance="process-1")
    again = bus.hello("alice", identity=b"alice-2", instance="process-1",
                      sessionId=first["sessionId"], token=first["token"])
    assert again["sessionId"] == first["sessionId"] and "reclaimed" not in again
    assert bus.call(b"alice", "status")["code"] == "not_connected"


def test_a_client_whose_reclaiming_welcome_was_lost_keeps_its_id_on_its_next_hello():
    """A restarted broker reads a hello the client had already given up on (left in its
    old connection's queue): the session opens, and its welcome, with the new reclaim
    secret, goes nowhere. The client's next hello still holds the secret before."""
    bus = Bus()
    first = bus.hello("alice", instance="process-1")
    bus.commit()
    bus.restart()
    bus.commit()
    stale = bus.hello("alice", identity=b"alice-old", instance="process-1",
                      sessionId=first["sessionId"], token=first["token"])
    assert stale["reclaimed"] is True and stale["token"] != first["token"]
    again = bus.hello("alice", identity=b"alice-new", instance="process-1",
                      sessionId=first["sessionId"], token=first["token"])
    assert (again["sessionId"], again.get("reason")) == (first["sessionId"], None), again
    assert bus.call(b"alice-old", "status")["code"] == "not_connected"
    copy = bus.hello("alice", identity=b"alice-copy", instance="process-2",
                     sessionId=first["sessionId"], token=first["token"])
    assert copy["sessionId"] != first["sessionId"]     # another process: a fresh id


def test_another_process_takes_over_a_holder_gone_silent():
    bus = Bus(liveness_s=3.0)
    first = bus.hello("alice", instance="process-1")
    bus.now += 3.5          # silent past liveness; the next sweep has not run yet
    back = bus.hello("alice", identity=b"alice-2", instance="process-2",
                     sessionId=first["sessionId"], token=first["token"])
    assert back["sessionId"] == first["sessionId"]
    # It is the holder now: its own reconnects keep the id, the old process's do not.
    old = bus.hello("alice", identity=b"alice-3", instance="process-1",
                    sessionId=first["sessionId"], token=first["token"])
    assert old["sessionId"] != first["sessionId"] and old["reclaimed"] is False


def test_reconnect_after_restart_restores_listed_memberships():
    bus = Bus()
    first = bus.hello("alice", homeGroup="home")
    bus.commit()
    bus.restart()
    restored = bus.hello("alice", sessionId=first["sessionId"], token=first["token"],
                         homeGroup="home", groups=["ops", "docs"])
    assert restored["sessionId"] == first["sessionId"]
    assert restored["groups"] == ["ops", "docs"] and restored["homeGroup"] == "home"


def test_child_inherits_the_launching_sessions_group():
    bus = Bus()
    parent = bus.hello("parent", group="team")
    child = bus.hello("child", parent=parent["sessionId"], fallbackGroup="from-env")
    assert child["homeGroup"] == "team" and child["parent"] == parent["sessionId"]


def test_explicit_group_beats_inherited_and_fallback():
    bus = Bus()
    parent = bus.hello("parent", group="team")
    child = bus.hello("child", parent=parent["sessionId"], group="solo", fallbackGroup="env")
    assert child["homeGroup"] == "solo"


def test_home_group_precedence_order():
    assert resolve_home_group("x", "inherited", "env", "cfg") == "x"
    assert resolve_home_group(None, "inherited", "env", "cfg") == "inherited"
    assert resolve_home_group(None, None, "env", "cfg") == "env"
    assert resolve_home_group(None, None, None, "cfg") == "cfg"
    assert resolve_home_group(None, None, None, None) == "default"
    assert resolve_home_group("  ", None, " env ", None) == "env"


def test_session_name_must_be_non_empty():
    bus = Bus()
    assert bus.hello("  ")["code"] == "invalid_name"


def test_mass_expiry_is_spread_over_sweeps():
    bus = Bus(liveness_s=3.0)
    for n in range(100):
        bus.hello(f"s{n}")
    bus.advance(3.5)
    assert bus.engine.stats["sessions.expired"] == 64
    bus.advance(0.0)
    assert bus.engine.stats["sessions.expired"] == 100


def test_one_presence_event_is_shared_by_every_peer():
    bus = Bus()
    for n in range(3):
        bus.hello(f"peer{n}")
    bus.hello("newcomer")
    envs = [c.env for c in bus.last if isinstance(c, Send) and c.env["k"] == "event"]
    assert len(envs) == 3 and all(env is envs[0] for env in envs)


def test_identity_memory_is_bounded():
    bus = Bus(max_identities=3)
    for n in range(5):
        bus.hello(f"s{n}")
        bus.feed(f"s{n}".encode(), envelope("bye"))
    assert list(bus.engine.state.identities) == [uuid_from(0xA0000003), uuid_from(0xA0000004), uuid_from(0xA0000005)]


def test_a_reconnect_adopts_the_memberships_the_client_states():
    # The join was applied, but its answer never reached the client (it gave up):
    # the client's hello states the groups it knows, and the broker takes them.
    bus = Bus()
    welcome = bus.hello("alice")
    bus.call(b"alice", "join", group="ops")
    again = bus.hello("alice", identity=b"alice-2", sessionId=welcome["sessionId"],
                      token=welcome["token"], homeGroup="default", groups=["default"])
    assert again["groups"] == ["default"]
    assert bus.call(b"alice-2", "groups")["memberships"] == ["default"]


def test_a_hello_again_on_the_same_connection_adopts_the_stated_memberships():
    bus = Bus()
    welcome = bus.hello("alice")
    bus.call(b"alice", "join", group="ops")
    again = bus.hello("alice", sessionId=welcome["sessionId"], token=welcome["token"],
                      homeGroup="default", groups=["default"])
    assert again["groups"] == ["default"]


def test_a_reconnect_claiming_memberships_it_may_not_hold_keeps_the_brokers():
    bus = Bus()
    welcome = bus.hello("alice")
    bus.call(b"alice", "join", group="ops")
    again = bus.hello("alice", identity=b"alice-2", sessionId=welcome["sessionId"],
                      token=welcome["token"], homeGroup="default",
                      groups=["default", "workflow:r1/plan"])
    assert again["ok"] and again["groups"] == ["default", "ops"]


def test_list_rows_carry_the_working_directory_sent_at_hello_with_the_id_first():
    bus = Bus()
    bus.hello("alice", cwd="/home/alice/project")
    bus.hello("bob")
    result = bus.call(b"bob", "list")
    (alice,) = result["sessions"]
    assert list(alice)[0] == "id" and list(result["self"])[0] == "id"
    assert alice["cwd"] == "/home/alice/project"
    assert result["self"]["cwd"] is None            # bob said nothing: not guessed


def test_a_working_directory_past_its_bound_is_refused_as_a_bad_envelope():
    from schemas.limits import MAX_CWD_CHARS

    bus = Bus()
    refused = bus.hello("alice", cwd="/" + "x" * MAX_CWD_CHARS)
    assert (refused["ok"], refused["code"]) == (False, "bad_envelope")
    assert bus.hello("alice", identity=b"alice2", cwd="/" + "x" * (MAX_CWD_CHARS - 1))["ok"]
