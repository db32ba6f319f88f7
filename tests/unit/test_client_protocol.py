"""ClientProtocol with no socket: frames in, frames and events out, a fake clock."""

from __future__ import annotations

import ast
import gc
import itertools
from pathlib import Path
from typing import Any

import client.protocol
from client.protocol import ASK_RESEND_DELAY_S, ClientProtocol, Inbound, State, Welcome
from schemas.limits import HEARTBEAT_S, LIVENESS_S, MAX_FRAME_BYTES
from schemas.protocol import envelope, pack, unpack_frame


class Owed:
    """Stands in for the driver's reply: the request it was made for."""

    def __init__(self, request: dict | tuple) -> None:
        self.request = request


class Peer:
    """Drives one protocol as a broker would see it, on a clock that only jumps."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.session_id: str | None = None
        self._hellos = itertools.count(1)
        self.protocol = ClientProtocol(self._hello)

    def _hello(self) -> dict:
        fields: dict[str, Any] = {"name": "tester"}
        if self.session_id is not None:
            fields["sessionId"] = self.session_id
        return envelope("hello", id=f"hello-{next(self._hellos)}", **fields)

    def jump(self, seconds: float) -> None:
        self.now += seconds
        self.protocol.timers(self.now)

    def sent_hello_after(self, seconds: float) -> dict | None:
        """The clock moves on by ``seconds``: the hello sent then, if one was."""
        self.jump(seconds)
        hellos = [env for env in self.sent() if env["k"] == "hello"]
        return hellos[-1] if hellos else None

    def sent(self) -> list[dict]:
        """Every envelope the protocol sends now, in order."""
        frames = self.protocol.frames_to_send(self.now)
        return [env for frame in frames for env in unpack_frame(frame, 4 * MAX_FRAME_BYTES)]

    def feed(self, *envs: dict) -> None:
        """One frame from the broker: a single envelope, or a batch."""
        self.protocol.receive_frame(pack(envs[0] if len(envs) == 1 else list(envs)), self.now)

    def events(self) -> list:
        return self.protocol.next_events()

    def answers(self) -> list[tuple[Any, dict]]:
        return [pair for e in self.events() if isinstance(e, Inbound) for pair in e.answers]

    def welcome(self, hello: dict, **fields: Any) -> None:
        self.feed(envelope("result", re=hello["id"], ok=True, sessionId="s1", **fields))

    def call(self, msg_id: str, **fields: Any) -> Owed:
        owed = Owed(envelope("call", id=msg_id, action="list", **fields))
        assert self.protocol.request(msg_id, owed) is None
        return owed

    def send(self, to: str, msg_id: str, text: str) -> Owed:
        owed = Owed((to, msg_id, text))
        assert self.protocol.request(msg_id, owed) is None
        return owed


def connected_peer() -> Peer:
    peer = Peer()
    (hello,) = peer.sent()
    peer.welcome(hello)
    peer.session_id = "s1"
    peer.events()
    return peer


def result(re: str, **fields: Any) -> dict:
    return envelope("result", re=re, **fields)


def test_the_first_frame_says_hello():
    peer = Peer()
    assert peer.sent() == [envelope("hello", id="hello-1", name="tester")]
    assert peer.protocol.state is State.GREETING


def test_the_welcome_is_reported_without_its_envelope_keys_and_connects():
    peer = Peer()
    (hello,) = peer.sent()
    peer.welcome(hello, token="t")
    assert peer.events() == [Welcome({"ok": True, "sessionId": "s1", "token": "t"})]
    assert peer.protocol.connected


def test_a_refused_hello_is_reported_and_leaves_the_session_refused():
    peer = Peer()
    (hello,) = peer.sent()
    peer.feed(result(hello["id"], ok=False, code="name_taken", error="taken"))
    assert peer.events() == [Welcome({"ok": False, "code": "name_taken", "error": "taken"})]
    assert peer.protocol.state is State.REFUSED
    assert peer.sent() == []


def test_a_request_gets_its_answer():
    peer = connected_peer()
    owed = peer.call("c1")
    assert peer.sent() == [owed.request]
    peer.feed(result("c1", ok=True, sessions=[]))
    assert peer.answers() == [(owed, {"ok": True, "sessions": []})]


def test_a_bare_ack_resolves_as_delivered():
    peer = connected_peer()
    owed = peer.send("bob", "m1", "hi")
    peer.sent()
    peer.feed(envelope("acks", ids=["m1"]))
    assert peer.answers() == [(owed, {"ok": True, "delivered": True, "messageId": "m1"})]


def test_an_answer_for_an_id_not_owed_is_dropped():
    peer = connected_peer()
    peer.call("c1")
    peer.protocol.forget("c1")
    peer.feed(result("c1", ok=True), envelope("acks", ids=["c1", "m9", 7]))
    assert peer.events() == []


def test_a_rewelcome_resends_every_owed_request_under_the_same_id_in_order_after_the_hello():
    peer = connected_peer()
    first, _, third = peer.call("c1"), peer.send("bob", "m2", "hi"), peer.call("c3")
    peer.sent()
    peer.feed(result("c1", code="not_connected", ok=False))
    (hello,) = peer.sent()
    peer.welcome(hello)
    assert peer.sent() == [first.request,
                           envelope("sends", to="bob", ids=["m2"], messages=["hi"]),
                           third.request]


def test_a_second_hello_carries_what_the_last_welcome_said():
    peer = connected_peer()
    peer.jump(LIVENESS_S + 0.1)
    assert [env for env in peer.sent() if env["k"] == "hello"] == [
        envelope("hello", id="hello-2", name="tester", sessionId="s1")]


def test_broker_silent_past_liveness_says_hello_again():
    peer = connected_peer()
    peer.jump(LIVENESS_S + 0.1)
    assert peer.protocol.state is State.GREETING
    assert [env["k"] for env in peer.sent()] == ["hello", "hb"]


def test_broker_heard_within_liveness_says_no_hello():
    peer = connected_peer()
    peer.now += LIVENESS_S - 0.1
    peer.feed(envelope("hb"))
    peer.jump(0.2)
    assert peer.protocol.connected
    assert [env["k"] for env in peer.sent()] == ["hb"]


def test_not_connected_triggers_one_hello_and_the_request_is_resent_after_the_welcome():
    peer = connected_peer()
    first, second = peer.call("c1"), peer.call("c2")
    peer.sent()
    peer.feed(result("c1", ok=False, code="not_connected"),
              result("c2", ok=False, code="not_connected"))
    (hello,) = peer.sent()
    assert hello["k"] == "hello"
    assert peer.answers() == []
    peer.welcome(hello)
    assert peer.sent() == [first.request, second.request]


def test_a_request_made_while_disconnected_waits_for_the_welcome():
    peer = connected_peer()
    peer.jump(LIVENESS_S + 0.1)
    peer.sent()                                   # the hello, and a heartbeat
    peer.call("j1")
    peer.protocol.post(envelope("received", ids=["m0"]))
    assert peer.sent() == []
    peer.jump(HEARTBEAT_S)
    assert [env["k"] for env in peer.sent()] == ["hb"]


def test_a_request_given_up_on_while_disconnected_is_never_sent():
    peer = connected_peer()
    before = peer.call("c0")
    peer.sent()
    peer.jump(LIVENESS_S + 0.1)
    (hello, _) = peer.sent()
    peer.call("j1")
    peer.protocol.forget("j1")                    # its caller was told broker_unavailable
    kept = peer.call("c2")
    peer.protocol.post(envelope("received", ids=["m0"]))
    peer.welcome(hello)
    assert peer.sent() == [before.request, kept.request, envelope("received", ids=["m0"])]


def test_silence_while_reading_is_paused_is_not_a_lost_broker():
    peer = connected_peer()
    peer.protocol.reading_paused = True
    peer.jump(LIVENESS_S * 3)
    assert peer.protocol.connected
    peer.protocol.resume_reading(peer.now)
    peer.jump(LIVENESS_S - 0.1)
    assert peer.protocol.connected
    peer.jump(0.2)
    assert peer.protocol.state is State.GREETING


def test_an_ask_is_resent_after_a_delay_with_what_is_left_of_its_timeout():
    peer = connected_peer()
    ask = Owed(envelope("call", id="a1", action="ask", to="bob", message="q", timeout=40.0))
    ask.made_at = peer.now
    assert peer.protocol.request("a1", ask) is None
    listing = peer.call("c2")
    peer.sent()
    peer.jump(LIVENESS_S + 0.1)
    (hello, _) = peer.sent()
    peer.now += 6.0
    peer.welcome(hello)
    assert peer.sent() == [listing.request]
    peer.jump(ASK_RESEND_DELAY_S)
    (again,) = [env for env in peer.sent() if env["k"] != "hb"]
    left = 40.0 - (LIVENESS_S + 0.1 + 6.0 + ASK_RESEND_DELAY_S)
    assert again == {**ask.request, "timeout": again["timeout"]}
    assert abs(again["timeout"] - left) < 1e-9


def test_a_resync_says_hello_again_and_holds_requests_until_its_welcome():
    peer = connected_peer()
    peer.protocol.resync()
    owed = peer.call("c1")
    (hello,) = peer.sent()
    assert hello["k"] == "hello"
    peer.welcome(hello)
    assert peer.sent() == [owed.request]


def test_heartbeat_is_sent_when_nothing_was_sent_for_heartbeat_s():
    peer = connected_peer()
    peer.jump(HEARTBEAT_S - 0.1)
    assert peer.sent() == []
    peer.jump(0.1)
    (hb,) = peer.sent()
    assert hb["k"] == "hb" and hb["read"] > 0     # it carries what was read (the welcome)


def short_window_peer(liveness_s: Any) -> Peer:
    peer = Peer()
    (hello,) = peer.sent()
    peer.welcome(hello, livenessS=liveness_s)
    peer.events()
    return peer


def test_a_welcome_with_a_short_liveness_window_sets_the_heartbeat_and_the_silence_by_it():
    peer = short_window_peer(1.5)
    assert peer.protocol.timer_interval_s == 0.25
    peer.jump(0.4)
    assert peer.sent() == []
    peer.jump(0.1)
    assert [env["k"] for env in peer.sent()] == ["hb"]      # a third of the window
    peer.now += 1.4 - 0.5
    peer.feed(envelope("hb"))
    peer.jump(1.4)
    assert peer.protocol.connected                         # heard within the window
    peer.jump(0.2)
    assert peer.protocol.state is State.GREETING           # silent past it


def test_a_welcome_liveness_window_that_is_no_number_or_too_short_is_not_taken_as_said():
    for said, kept in (("3", LIVENESS_S), (True, LIVENESS_S), (float("nan"), LIVENESS_S),
                       (float("inf"), LIVENESS_S), (0.001, 0.5), (-1, 0.5), (30, 30.0)):
        peer = short_window_peer(said)
        assert peer.protocol.liveness_s == kept, said
        assert peer.protocol.timer_interval_s == min(HEARTBEAT_S, kept / 3) / 2, said


def test_sending_anything_puts_the_heartbeat_off():
    peer = connected_peer()
    peer.jump(HEARTBEAT_S / 2)
    peer.call("c1")
    peer.sent()
    peer.jump(HEARTBEAT_S / 2 + 0.1)
    assert peer.sent() == []


def test_an_oversize_request_is_refused_locally_with_request_too_large():
    peer = connected_peer()
    small = peer.call("c1")
    big = peer.call("c2", message="x" * MAX_FRAME_BYTES)
    assert peer.sent() == [small.request]
    ((owed, answer),) = peer.answers()
    assert owed is big and answer["code"] == "request_too_large"
    assert answer["ok"] is False and str(MAX_FRAME_BYTES) in answer["error"]


def test_an_oversize_plain_send_is_refused_locally_with_request_too_large():
    peer = connected_peer()
    big = peer.send("bob", "m1", "x" * MAX_FRAME_BYTES)
    assert peer.sent() == []
    assert [(owed, answer["code"]) for owed, answer in peer.answers()] == [
        (big, "request_too_large")]


def test_messages_that_arrived_before_the_welcome_are_reported_before_it():
    peer = Peer()
    (hello,) = peer.sent()
    early = envelope("msg", id="m1", message="early")
    joined = envelope("event", event="session_joined")
    late = envelope("msg", id="m2", message="late")
    peer.feed(early, joined, result(hello["id"], ok=True), late)
    assert peer.events() == [Inbound([early], [joined], []), Welcome({"ok": True}),
                             Inbound([late], [], [])]


def test_a_msgs_envelope_expands_into_one_untracked_msg_per_message():
    peer = connected_peer()
    peer.feed(envelope("msgs", ids=["m1", "m2"], messages=["a", "b"], sentAt=5.0,
                       fromName="bob", **{"from": "s2"}))
    (inbound,) = peer.events()
    assert inbound.msgs == [
        {"id": "m1", "message": "a", "sentAt": 5.0, "expectsReply": False,
         "fromName": "bob", "from": "s2"},
        {"id": "m2", "message": "b", "sentAt": 5.0, "expectsReply": False,
         "fromName": "bob", "from": "s2"}]
    assert not any(gc.is_tracked(msg) for msg in inbound.msgs)


def test_close_fails_owed_requests_with_session_closed():
    peer = connected_peer()
    first, second = peer.call("c1"), peer.send("bob", "m2", "hi")
    failed = peer.protocol.close()
    assert {owed: answer["code"] for owed, answer in failed} == {
        first: "session_closed", second: "session_closed"}
    assert len(failed) == 2


def test_a_request_made_after_close_is_refused_at_once_and_not_sent():
    peer = connected_peer()
    peer.protocol.close()
    answer = peer.protocol.request("c1", Owed(envelope("call", id="c1")))
    assert answer["code"] == "session_closed"
    assert peer.sent() == []


def test_pipelined_sends_to_one_target_coalesce_into_one_sends_envelope():
    peer = connected_peer()
    for n in range(3):
        peer.send("bob", f"m{n}", f"text {n}")
    peer.send("carol", "m3", "other")
    assert peer.sent() == [
        envelope("sends", to="bob", ids=["m0", "m1", "m2"], messages=["text 0", "text 1", "text 2"]),
        envelope("sends", to="carol", ids=["m3"], messages=["other"])]


def test_an_undecodable_frame_is_dropped_but_shows_the_broker_alive():
    peer = connected_peer()
    peer.now += LIVENESS_S
    peer.protocol.receive_frame(b"\xc1 not msgpack", peer.now)
    peer.jump(0.5)
    assert peer.events() == [] and peer.protocol.connected


def test_the_protocol_module_imports_nothing_that_does_io():
    tree = ast.parse(Path(client.protocol.__file__).read_text())
    imported = {alias.name.split(".")[0] for node in ast.walk(tree)
                if isinstance(node, ast.Import) for alias in node.names}
    imported |= {(node.module or "").split(".")[0] for node in ast.walk(tree)
                 if isinstance(node, ast.ImportFrom) and node.level == 0}
    assert not imported & {"zmq", "threading", "select", "time", "socket", "asyncio"}


def test_reads_are_reported_in_heartbeats_as_they_grow():
    from client.protocol import ClientProtocol
    from schemas.protocol import unpack_frame
    proto = ClientProtocol(lambda: {"v": 1, "k": "hello", "id": "h1", "name": "n"})
    proto.frames_to_send(0.0)                      # the hello: counting starts here
    proto.receive_frame(pack({"v": 1, "k": "result", "re": "h1", "ok": True,
                              "backlogBytes": 800}), 0.0)
    big = pack({"v": 1, "k": "msgs", "from": "x", "fromName": "x", "sentAt": 0.0,
                "ids": ["m1"], "messages": ["y" * 200]})
    proto.receive_frame(big, 0.1)
    assert proto.wants_to_send()                   # 100 bytes (an eighth) passed
    (frame,) = proto.frames_to_send(0.1)
    (hb,) = unpack_frame(frame)
    assert hb["k"] == "hb" and hb["read"] == proto.read_bytes > 200


def test_a_stage_told_run_moving_keeps_asking_with_growing_pauses_for_a_minute():
    """A take-over waits for the old host's lease to end: the hello is said again,
    the pause doubling to REDIRECT_DELAY_MAX_S, until REDIRECT_PATIENCE_S have passed."""
    peer = Peer()
    moving = {"ok": False, "code": "run_moving", "error": "moving", "endpoint": "tcp://b1"}
    pauses = []
    started = peer.now
    (hello,) = peer.sent()
    while True:
        peer.feed(result(hello["id"], **moving))
        if peer.events():                       # the refusal was reported: it stands
            break
        assert peer.protocol.redirect == "tcp://b1"
        peer.protocol.redirect = None           # the driver stays (same endpoint)
        waited = 0
        hello = None
        while hello is None:
            waited += 1
            hello = peer.sent_hello_after(0.1)
        pauses.append(round(waited * 0.1, 1))
    assert pauses[:5] == [0.2, 0.4, 0.8, 1.6, 2.0]
    assert all(abs(p - 2.0) < 0.15 for p in pauses[5:]), str(pauses)   # 0.1 s steps
    assert client.protocol.REDIRECT_PATIENCE_S <= peer.now - started < \
        client.protocol.REDIRECT_PATIENCE_S + 2.5
    assert peer.protocol.state is State.REFUSED
    assert peer.protocol.redirects == len(pauses)


def test_a_welcome_ends_a_run_of_redirects():
    peer = Peer()
    (hello,) = peer.sent()
    peer.feed(result(hello["id"], ok=False, code="run_moving", error="m", endpoint="tcp://b1"))
    assert peer.protocol.redirects == 1
    peer.protocol.redirect = None
    peer.jump(0.2)
    (hello,) = peer.sent()
    peer.welcome(hello)
    assert peer.protocol.connected and peer.protocol.redirects == 0


# -- receipts: read and seen reported in batched heartbeats (client.reports) -------------

def heartbeats(peer: Peer) -> list[dict]:
    return [env for env in peer.sent() if env["k"] == "hb"]


def test_messages_read_are_reported_in_one_heartbeat_a_moment_later_not_per_frame():
    from schemas.limits import ACK_DELAY_S
    peer = connected_peer()
    peer.sent()
    for n in range(50):
        peer.feed(envelope("msg", id=f"m{n}", **{"from": "x"}, fromName="x", message="hi",
                           attachments=[], sentAt=1.0, expectsReply=False))
    peer.jump(ACK_DELAY_S / 2)
    assert heartbeats(peer) == []
    peer.jump(ACK_DELAY_S / 2)
    (hb,) = heartbeats(peer)
    assert hb["read"] == peer.protocol.read_bytes > 0 and "seenThrough" not in hb
    peer.jump(ACK_DELAY_S)
    assert heartbeats(peer) == []                 # nothing new: no report until due


def test_the_newest_message_taken_is_told_once_and_again_after_a_new_hello():
    from schemas.limits import ACK_DELAY_S
    peer = connected_peer()
    peer.sent()
    peer.protocol.reports.seen_through = "m1"
    peer.protocol.reports.seen_through = "m2"      # taken in a row: one report
    peer.jump(0.01)
    peer.jump(ACK_DELAY_S)
    (hb,) = heartbeats(peer)
    assert hb["seenThrough"] == "m2"
    peer.jump(HEARTBEAT_S)                        # an idle heartbeat: not told again
    assert [h.get("seenThrough") for h in heartbeats(peer)] == [None]
    peer.feed(result("x", ok=False, code="not_connected", error="gone"))
    (hello,) = [e for e in peer.sent() if e["k"] == "hello"]
    peer.welcome(hello)
    peer.jump(0.01)
    peer.jump(ACK_DELAY_S)
    assert [h.get("seenThrough") for h in heartbeats(peer)] == ["m2"]
