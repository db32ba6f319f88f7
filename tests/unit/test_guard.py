"""The flood and loop guard (broker.core.messaging.guard), on the fake clock: a guarded
session's sends to one session are bounded per minute and in back-and-forth turns
without other input; replies pass; a session without the guard is never refused."""

from __future__ import annotations

from broker.core.kernel.commands import LinkSend
from broker.core.messaging.guard import MAX_PEERS, GuardSettings
from schemas import envelopes
from schemas.attention import GUARD_EXCHANGES, GUARD_PAUSE_S, GUARD_PER_MINUTE
from schemas.protocol import envelope

from tests.unit.brokers_in_memory import linked_mesh
from tests.unit.harness import Bus, result_for, uuid_from
from tests.unit.test_workflow import queue

ALICE, BOB = uuid_from(0xA0000001), uuid_from(0xA0000002)


def pair(guard=None, bob_guard=None) -> Bus:
    bus = Bus(liveness_s=1e9)
    bus.hello("alice", guard=guard)
    bus.hello("bob", guard=bob_guard)
    return bus


def send(bus: Bus, who: bytes, to: str, text: str = "hi") -> dict:
    return bus.call(who, "send", to=to, message=text)


def pipelined(bus: Bus, who: bytes, to: str, ids: list[str]) -> dict[str, dict]:
    """The answers to a ``sends`` run, by id (an ``acks`` entry reads as ok)."""
    bus.feed(who, envelope("sends", to=to, ids=ids, messages=[f"text {i}" for i in ids]))
    answers = {i: {"ok": True} for env in bus.sends(who, "acks") for i in env["ids"]}
    answers.update({env["re"]: env for env in bus.sends(who, "result")})
    return answers


def delivered(bus: Bus, who: bytes) -> list[str]:
    return [i for env in bus.sends(who, "msgs") for i in env["ids"]] + \
        [env["id"] for env in bus.sends(who, "msg")]


def guards(bus: Bus):
    return bus.engine.state.guards


# -- settings ------------------------------------------------------------------------------

def test_the_hello_field_sets_the_guard_and_its_absence_leaves_it_off():
    bus = Bus()
    bus.hello("a", guard=True)
    bus.hello("b", guard={"perMinute": 5, "pauseS": 30})
    bus.hello("c", guard={"perMinute": 0, "exchanges": 0})
    bus.hello("d")
    bus.hello("e", guard=False)
    by_name = {s.name: s.guard for s in bus.engine.registry.by_id.values()}
    assert by_name == {
        "a": GuardSettings(GUARD_PER_MINUTE, GUARD_EXCHANGES, GUARD_PAUSE_S),
        "b": GuardSettings(5, GUARD_EXCHANGES, 30.0),
        "c": None, "d": None, "e": None,
    }


# -- flood ---------------------------------------------------------------------------------

def test_a_send_past_per_minute_is_refused_with_when_to_retry_and_passes_after_the_window():
    bus = pair(guard={"perMinute": 3, "exchanges": 0})
    for _ in range(3):
        assert send(bus, b"alice", "bob")["ok"]
        bus.advance(10)
    refused = send(bus, b"alice", "bob")
    assert refused["code"] == "flood_guard" and refused["retryAfterS"] == 30.0
    assert "try again in 30.0 s" in refused["error"] and "--guard-per-minute" in refused["error"]
    assert delivered(bus, b"bob") == []
    bus.advance(29.9)
    assert send(bus, b"alice", "bob")["code"] == "flood_guard"
    bus.advance(0.1)
    assert send(bus, b"alice", "bob")["ok"]


def test_the_flood_bound_is_per_receiver():
    bus = pair(guard={"perMinute": 1, "exchanges": 0})
    bus.hello("carol")
    assert send(bus, b"alice", "bob")["ok"]
    assert send(bus, b"alice", "bob")["code"] == "flood_guard"
    assert send(bus, b"alice", "carol")["ok"]


def test_a_pipelined_run_is_delivered_up_to_the_bound_and_the_rest_refused():
    bus = pair(guard={"perMinute": 3, "exchanges": 0})
    assert send(bus, b"alice", "bob")["ok"]
    answers = pipelined(bus, b"alice", "bob", ["p1", "p2", "p3", "p4"])
    assert delivered(bus, b"bob") == ["p1", "p2"]
    assert [answers[i].get("code") for i in ("p3", "p4")] == ["flood_guard"] * 2
    assert answers["p3"]["retryAfterS"] == 60.0
    # A refused id gets its first answer again; a new id waits for the window too.
    assert pipelined(bus, b"alice", "bob", ["p3"])["p3"]["code"] == "flood_guard"
    bus.advance(60)
    assert pipelined(bus, b"alice", "bob", ["p5", "p6", "p7", "p8"])["p8"]["code"] == "flood_guard"


def test_a_retried_id_gets_its_delivery_again_even_when_the_bound_is_reached():
    bus = pair(guard={"perMinute": 1, "exchanges": 0})
    assert bus.call(b"alice", "send", msg_id="m1", to="bob", message="hi")["ok"]
    again = bus.call(b"alice", "send", msg_id="m1", to="bob", message="hi")
    assert again["ok"] and again["delivered"]


# -- loop ----------------------------------------------------------------------------------

def ping_pong(bus: Bus, turns: int, first: bytes = b"alice") -> None:
    """Messages alternate between alice and bob, starting with ``first``: ``turns``
    changes of direction after the first message; every one must pass."""
    who, other = (first, b"bob" if first == b"alice" else b"alice")
    for _ in range(turns + 1):
        assert send(bus, who, other.decode())["ok"]
        who, other = other, who


def test_a_send_that_would_pass_the_exchanges_bound_is_refused_loop_guard():
    bus = pair(guard={"exchanges": 4, "pauseS": 120})
    ping_pong(bus, 4)                   # a b a b a: four turns
    assert send(bus, b"bob", "alice")["ok"]      # bob is not guarded: the fifth turn
    bus.advance(20)
    refused = send(bus, b"alice", "bob")
    assert refused["code"] == "loop_guard" and refused["retryAfterS"] == 100.0
    assert "prompt" in refused["error"] and "--guard-exchanges" in refused["error"]


def test_more_sends_the_same_way_are_no_new_turn():
    bus = pair(guard={"exchanges": 1, "perMinute": 0})
    ping_pong(bus, 1)                   # a b: one turn
    assert send(bus, b"bob", "alice")["ok"]
    assert send(bus, b"alice", "bob")["code"] == "loop_guard"
    bus = pair(guard={"exchanges": 1, "perMinute": 0})
    for _ in range(5):
        assert send(bus, b"alice", "bob")["ok"]


def test_a_pause_without_messages_between_the_two_starts_the_count_again():
    bus = pair(guard={"exchanges": 2, "pauseS": 60})
    ping_pong(bus, 2, first=b"bob")     # b a b: two turns; alice's next is the third
    bus.advance(30)
    assert send(bus, b"alice", "bob")["code"] == "loop_guard"
    bus.advance(29)                     # a refused send did not put the pause off
    assert send(bus, b"alice", "bob")["code"] == "loop_guard"
    bus.advance(1)
    assert send(bus, b"alice", "bob")["ok"]


def test_without_pause_resets_the_refusal_says_a_prompt_resets_it_and_names_no_time():
    bus = pair(guard={"exchanges": 1, "pauseS": 0})
    ping_pong(bus, 1)
    bus.advance(3600)
    refused = send(bus, b"alice", "bob")
    assert refused["code"] == "loop_guard" and "retryAfterS" not in refused
    assert "prompt" in refused["error"]


def test_a_persons_input_to_the_sender_starts_the_count_again():
    bus = pair(guard={"exchanges": 1})
    ping_pong(bus, 1)
    bus.feed(b"alice", envelope("status", humanInput=True))
    assert send(bus, b"alice", "bob")["ok"]


def test_a_persons_input_to_the_receiver_starts_the_count_again():
    bus = pair(guard={"exchanges": 1})
    ping_pong(bus, 1)
    bus.feed(b"bob", envelope("status", humanInput=True))   # bob has no guard himself
    assert send(bus, b"alice", "bob")["ok"]


def test_two_guarded_agents_each_refuse_their_own_next_turn():
    bus = pair(guard={"exchanges": 2}, bob_guard={"exchanges": 2})
    ping_pong(bus, 2)                   # a b a
    refused = send(bus, b"bob", "alice")
    assert refused["code"] == "loop_guard"
    assert send(bus, b"alice", "bob")["ok"]     # no new turn for alice


# -- asks and replies ----------------------------------------------------------------------

def test_an_ask_is_refused_like_a_send_and_its_reply_is_never_refused():
    bus = pair(guard={"exchanges": 2, "perMinute": 2}, bob_guard={"perMinute": 1})
    assert send(bus, b"bob", "alice")["ok"]        # bob's one message this minute
    bus.feed(b"alice", envelope("call", id="q1", action="ask", to="bob", message="why?"))
    (question,) = bus.sends(b"bob", "msg")
    reply = bus.call(b"bob", "reply", message="because", currentTurn=question["id"])
    assert reply["ok"]                             # past bob's bound: a reply still passes
    assert result_for(bus.last, b"alice", "q1")["message"] == "because"
    # b a b: two turns; alice's next ask would be the third.
    refused = bus.call(b"alice", "ask", to="bob", message="and then?")
    assert refused["code"] == "loop_guard"


def test_a_guarded_sessions_reply_counts_toward_its_flood_bound():
    bus = pair(guard={"perMinute": 1, "exchanges": 0})
    assert send(bus, b"bob", "alice")["ok"]
    (message,) = bus.sends(b"alice", "msg")
    assert bus.call(b"alice", "reply", message="ok", currentTurn=message["id"])["ok"]
    assert send(bus, b"alice", "bob")["code"] == "flood_guard"


# -- who is not guarded ----------------------------------------------------------------------

def test_a_session_without_the_guard_is_never_refused_and_costs_no_memory():
    bus = pair()
    for n in range(5):
        ids = [f"r{n}-{i}" for i in range(1000)]
        answers = pipelined(bus, b"alice", "bob", ids)
        assert all(a["ok"] for a in answers.values()) and len(answers) == 1000
        bus.feed(b"bob", envelope("hb", read=10**9))      # bob reads: no backlog
        assert send(bus, b"bob", "alice")["ok"]
    assert guards(bus).views == {} and guards(bus).watchers == {}


def test_sends_to_a_workflow_path_are_not_counted():
    bus = Bus(liveness_s=1e9)
    bus.hello("host", guard={"perMinute": 1, "exchanges": 1})
    assert bus.workflow(b"host", "register_run", runId="r1", stages=[{"name": "plan"}])["ok"]
    for n in range(3):
        assert queue(bus, b"host", "workflow:r1/plan", f"m{n}")["queued"]
    assert guards(bus).views == {}


# -- memory ----------------------------------------------------------------------------------

def test_a_session_leaving_is_forgotten_by_every_guard():
    bus = pair(guard=True, bob_guard=True)
    ping_pong(bus, 2)
    assert guards(bus).views[ALICE].keys() == {BOB} and guards(bus).watchers[ALICE] == {BOB}
    bus.feed(b"bob", envelope("bye"))
    assert guards(bus).views == {} and guards(bus).watchers == {}


def test_views_per_session_are_bounded():
    bus = Bus()
    bus.hello("alice", guard=True)
    for n in range(MAX_PEERS + 5):
        bus.hello(f"peer{n}")
        assert send(bus, b"alice", f"peer{n}")["ok"]
    assert len(guards(bus).views[ALICE]) == MAX_PEERS
    assert sum(len(w) for w in guards(bus).watchers.values()) == MAX_PEERS


# -- across brokers ----------------------------------------------------------------------------

def sent(mesh, node, who: bytes, msg_id: str, **params) -> dict:
    """``who`` on ``node`` sends; its answer once everything the send caused settled."""
    mesh.call(node, who, "send", msg_id, **params)
    mesh.settle()
    return result_for(mesh.seen[node], who, msg_id)


def test_the_senders_broker_refuses_what_its_guard_refuses_before_it_is_handed_over():
    mesh = linked_mesh(2)
    a, b = mesh.nodes
    mesh.hello(a, "alice", group="team", guard={"perMinute": 3, "exchanges": 1})
    mesh.hello(b, "bob", group="team")

    assert sent(mesh, a, b"alice", "m1", to="bob", message="one")["ok"]
    assert sent(mesh, b, b"bob", "m2", to="alice", message="two")["ok"]   # one turn, seen on a
    refused = sent(mesh, a, b"alice", "m3", to="bob", message="three")
    assert refused["code"] == "loop_guard"
    assert [m["message"] for m in mesh.sent(b, b"bob", "msg")] == []
    mesh.feed(a, b"alice", envelope("status", humanInput=True))
    assert sent(mesh, a, b"alice", "m4", to="bob", message="four")["ok"]
    mesh.feed(a, b"alice", envelope("sends", to="bob", ids=["p1", "p2"], messages=["x", "y"]))
    mesh.settle()
    (refusal,) = [r for r in mesh.sent(a, b"alice", "result") if r["re"] == "p2"]
    assert refusal["code"] == "flood_guard"
    assert [m for env in mesh.sent(b, b"bob", "msgs") for m in env["messages"]] == ["x"]


def test_a_persons_input_on_the_peers_broker_restarts_the_guarded_pair_there_too():
    """bob's person speaks on bob's broker: alice's guard on the other broker counts her
    turns with bob from zero, as it does when her own person speaks."""
    mesh = linked_mesh(2)
    a, b = mesh.nodes
    mesh.hello(a, "alice", group="team", guard={"exchanges": 1})
    mesh.hello(b, "bob", group="team")

    assert sent(mesh, a, b"alice", "m1", to="bob", message="one")["ok"]
    assert sent(mesh, b, b"bob", "m2", to="alice", message="two")["ok"]
    assert sent(mesh, a, b"alice", "m3", to="bob", message="three")["code"] == "loop_guard"
    mesh.feed(b, b"bob", envelope("status", humanInput=True))
    mesh.settle()
    assert a.engine.stats["guard.human_input_remote"] == 1
    assert sent(mesh, a, b"alice", "m4", to="bob", message="four")["ok"]


def test_a_human_input_notice_about_a_session_the_sender_does_not_hold_is_ignored():
    mesh = linked_mesh(3)
    a, b, c = mesh.nodes
    mesh.hello(a, "alice", group="team", guard={"exchanges": 1})
    bob = mesh.hello(b, "bob", group="team")
    mesh.hello(c, "carol", group="team")
    mesh.call(a, b"alice", "send", "m1", to="bob", message="one")
    mesh.settle()
    mesh.call(b, b"bob", "send", "m2", to="alice", message="two")
    mesh.settle()
    # Broker c says a person spoke to bob, whom broker b holds: a keeps counting.
    mesh.pump(c, [LinkSend(a.broker_id, [envelopes.link_human_input(bob["sessionId"])])])
    assert a.engine.stats["guard.human_input_remote"] == 0
    mesh.call(a, b"alice", "send", "m3", to="bob", message="three")
    mesh.settle()
    assert result_for(mesh.seen[a], b"alice", "m3")["code"] == "loop_guard"


# -- the MCP server's flags ----------------------------------------------------------------------

def test_the_mcp_server_asks_for_the_guard_unless_told_not_to():
    from client.cli.main import build_parser
    from client.mcp_server import guard

    def asked(*flags: str):
        return guard(build_parser().parse_args(["mcp", "--name", "m", *flags]))

    assert asked() is True
    assert asked("--guard-per-minute", "5", "--guard-pause-s", "0") == {"perMinute": 5, "pauseS": 0.0}
    assert asked("--guard-exchanges", "0") == {"exchanges": 0}
    assert asked("--no-guard", "--guard-per-minute", "5") is False
