"""Hostile input on the ROUTER socket: raw DEALER peers send whatever they like.

Every bad frame gets an error result (``ok`` False and a code from the table) or is
dropped; none stops the broker, and a well-behaved session keeps being served.

A reply is matched to the frame that caused it with a probe: after the frame under
test the peer sends an envelope of unknown kind with a fresh id. The broker handles
one connection's frames in order and answers in order, so everything that arrives
before the probe's answer belongs to the frame under test, and nothing after it can.
"""

from __future__ import annotations

import json
import time
import uuid

import msgpack
import pytest
import zmq
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from schemas.config import Config
from schemas.errors import ERRORS
from schemas.limits import MAX_BATCH, MAX_FRAME_BYTES, PROTOCOL_VERSION
from schemas.kinds import BROKER_KIND_NAMES as BROKER_KINDS, CLIENT_KIND_NAMES as CLIENT_KINDS, KINDS

HELLO_FIELDS = {f.name for kind in KINDS.values() if kind.name == "hello" for f in kind.fields}
STATUS_FIELDS = {f.name for kind in KINDS.values() if kind.name == "status" for f in kind.fields}
from schemas.tools import INTERCOM_ACTIONS, INTERCOM_SCHEMA

from .conftest import Bus, unique


def pack(value) -> bytes:
    return msgpack.packb(value, use_bin_type=True)


def env(kind, **fields) -> dict:
    return {"v": PROTOCOL_VERSION, "k": kind, **fields}


class Peer:
    """A raw DEALER on the broker's ROUTER socket."""

    def __init__(self, endpoint: str) -> None:
        self.sock = zmq.Context.instance().socket(zmq.DEALER)
        self.sock.linger = 0
        self.sock.connect(endpoint)

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> Peer:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def recv_envelopes(self, timeout: float) -> list[dict]:
        if not self.sock.poll(timeout * 1000):
            raise AssertionError(f"no frame from the broker within {timeout:g} s")
        value = msgpack.unpackb(self.sock.recv(), raw=False)
        return value if isinstance(value, list) else [value]

    def exchange(self, frames: list[bytes], timeout: float = 10.0) -> list[dict]:
        """Send one message of ``frames``; return every envelope it was answered with."""
        probe = f"probe-{uuid.uuid4()}"
        self.sock.send_multipart(frames)
        self.sock.send(pack(env("probe", id=probe)))
        answered: list[dict] = []
        while True:
            for reply in self.recv_envelopes(timeout):
                if isinstance(reply, dict) and reply.get("re") == probe:
                    assert reply.get("code") == "unknown_kind", reply
                    return answered
                answered.append(reply)

    def answer_to(self, frames: list[bytes], msg_id: str, timeout: float = 10.0) -> dict:
        """Send ``frames`` and wait for the answer to request ``msg_id``, however late
        (a durable request is answered after its commit)."""
        self.sock.send_multipart(frames)
        deadline = time.monotonic() + timeout
        while True:
            for reply in self.recv_envelopes(max(0.01, deadline - time.monotonic())):
                if isinstance(reply, dict) and reply.get("re") == msg_id:
                    return reply

    def hello(self, name: str, group: str) -> dict:
        (welcome,) = self.exchange([pack(env("hello", id=str(uuid.uuid4()), name=name, group=group))])
        assert welcome["ok"] is True, welcome
        return welcome


def assert_well_formed(reply: object) -> None:
    """What every broker envelope looks like; an error result carries a known code."""
    assert isinstance(reply, dict), reply
    assert reply.get("v") == PROTOCOL_VERSION, reply
    assert reply.get("k") in BROKER_KINDS, reply
    if reply["k"] == "result":
        assert isinstance(reply.get("ok"), bool), reply
        if not reply["ok"]:
            assert reply.get("code") in ERRORS, reply
            assert isinstance(reply.get("error"), str) and reply["error"], reply
            assert reply["code"] != "internal_error", f"the broker hit a bug: {reply}"


def assert_refused(replies: list[dict], *codes: str) -> None:
    assert replies, "the frame got no answer"
    for reply in replies:
        assert_well_formed(reply)
        assert reply["k"] == "result" and reply["ok"] is False, reply
        assert reply["code"] in codes, reply


@pytest.fixture(scope="module")
def watcher(shared_broker):
    """A well-behaved session connected for the whole module."""
    handle = Bus(shared_broker)
    session = handle.connect("watcher", config=Config())
    yield session
    handle.close_all()


def assert_still_serving(shared_broker, watcher) -> None:
    assert shared_broker.proc.poll() is None, "the broker died"
    result = watcher.intercom(action="list")
    assert result["ok"] is True, result
    assert result["self"]["id"] == watcher.id


@pytest.fixture
def peer(shared_broker):
    with Peer(shared_broker.endpoint) as handle:
        yield handle


# -- one bad frame at a time -----------------------------------------------------------------------

BAD_FRAMES = [
    pytest.param([b"\xc1"], ["malformed_frame"], id="not-msgpack"),
    pytest.param([b""], ["malformed_frame"], id="empty-frame"),
    pytest.param([pack(env("hello", id="h", name="x"))[:-3]], ["malformed_frame"], id="truncated-msgpack"),
    pytest.param([pack(42)], ["bad_envelope"], id="msgpack-int"),
    pytest.param([pack("hello")], ["bad_envelope"], id="msgpack-string"),
    pytest.param([pack(None)], ["bad_envelope"], id="msgpack-nil"),
    pytest.param([pack([])], ["bad_envelope"], id="empty-batch"),
    pytest.param([pack([env("hb"), 7])], ["bad_envelope"], id="batch-with-a-non-map"),
    pytest.param([pack({1: "v", 2: "k"})], ["malformed_frame", "bad_envelope", "unsupported_version"],
                 id="integer-keys"),
    pytest.param([pack(env("hello", id="h", name=5))], ["bad_envelope"], id="hello-name-not-a-string"),
    pytest.param([pack(env("hello", id="h", name="x", group=["a"]))], ["bad_envelope"], id="hello-group-a-list"),
    pytest.param([pack(env("hello", id="h", name="x", sessionKind="robot"))], ["bad_envelope"],
                 id="hello-bad-session-kind"),
    pytest.param([pack(env("hello", id="h", name="x", groups=[5]))], ["invalid_group"], id="hello-groups-of-ints"),
    pytest.param([pack(env("hello", id="h", name="x" * 5000))], ["bad_envelope"], id="hello-name-too-long"),
    pytest.param([pack(env("hello", id="h", name="   "))], ["invalid_name"], id="hello-blank-name"),
    pytest.param([pack(env("hello", id="h"))], ["bad_envelope"], id="hello-missing-name"),
    pytest.param([pack(env("hello", name="x"))], ["bad_envelope"], id="hello-missing-id"),
    pytest.param([pack({})], ["unsupported_version"], id="empty-map"),
    pytest.param([pack({"k": "hello", "id": "h", "name": "x"})], ["unsupported_version"], id="no-version"),
    pytest.param([pack({"v": 2, "k": "hello", "id": "h", "name": "x"})], ["unsupported_version"], id="version-2"),
    pytest.param([pack({"v": "1", "k": "hello", "id": "h", "name": "x"})], ["unsupported_version"],
                 id="version-a-string"),
    pytest.param([pack(env("teleport", id="t"))], ["unknown_kind"], id="unknown-kind"),
    pytest.param([pack(env(5, id="t"))], ["unknown_kind"], id="kind-not-a-string"),
    pytest.param([pack(env("call", id="c", action="list"))], ["not_connected"], id="call-before-hello"),
    pytest.param([pack(env("status", id="s", status="idle"))], ["not_connected"], id="status-before-hello"),
    pytest.param([b"\x00" * (MAX_FRAME_BYTES + 1)], ["frame_too_large"], id="frame-over-1-MiB"),
    pytest.param([pack(env("hello", id="h", name="x")), pack(env("hb"))], ["bad_envelope"], id="two-frames"),
    pytest.param([b"", b"", b""], ["bad_envelope"], id="three-empty-frames"),
    pytest.param([pack([env("hb")] * (MAX_BATCH + 1))], ["batch_too_large"], id="batch-over-the-limit"),
]


@pytest.mark.parametrize("frames, codes", BAD_FRAMES)
def test_bad_frame_gets_an_error_result_and_the_broker_keeps_serving(shared_broker, watcher, peer,
                                                                      frames, codes):
    assert_refused(peer.exchange(frames), *codes)
    assert_still_serving(shared_broker, watcher)


@pytest.mark.parametrize("frames, codes", [
    pytest.param([pack(env("call", id="c", action="teleport"))], ["unknown_action"], id="unknown-action"),
    pytest.param([pack(env("call", id="c", action="list", bogus=1))], ["invalid_params"], id="unknown-param"),
    pytest.param([pack(env("call", id="c", action="send", to=5, message="x"))], ["invalid_params"],
                 id="param-wrong-type"),
    pytest.param([pack(env("call", action="list"))], ["bad_envelope"], id="call-without-id"),
    pytest.param([pack(env("call", id=["c"], action="list"))], ["bad_envelope"], id="call-id-not-a-string"),
    pytest.param([pack(env("status", id="s", status="dancing"))], ["invalid_status"], id="bad-status"),
    pytest.param([pack(env("status", id="s", status=7))], ["bad_envelope"], id="status-not-a-string"),
    pytest.param([pack(env("status", id="s", replyCapability="maybe"))], ["bad_envelope"], id="bad-capability"),
    pytest.param([pack(env("hello", id="h2", name="again"))], ["already_connected"], id="second-hello"),
    pytest.param([pack(env("workflow", id="w", op=["register_run"]))], ["bad_envelope"], id="workflow-op-a-list"),
    pytest.param([pack(env("workflow", id="w", op={"register_run": 1}))], ["bad_envelope"], id="workflow-op-a-map"),
    pytest.param([pack(env("sends", to=["watcher"], ids=["s1"], messages=["x"]))], ["bad_envelope"],
                 id="sends-to-a-list"),
    pytest.param([pack(env("sends", to={"watcher": 1}, ids=["s1"], messages=["x"]))], ["bad_envelope"],
                 id="sends-to-a-map"),
    pytest.param([pack(env("sends", to="watcher", ids=["s1"], messages=[["x"]]))], ["bad_envelope"],
                 id="sends-message-a-list"),
])
def test_bad_request_from_a_connected_peer_gets_an_error_result(shared_broker, watcher, peer, frames, codes):
    peer.hello("raw", unique())
    assert_refused(peer.exchange(frames), *codes)
    assert peer.exchange([pack(env("bye", id="bye"))])[0]["ok"] is True
    assert_still_serving(shared_broker, watcher)


@pytest.mark.parametrize("kind", [["link_hb"], {"link_hb": 1}], ids=["list", "map"])
def test_a_link_hello_then_an_envelope_whose_kind_is_not_a_string_is_refused_quietly(
        shared_broker, watcher, peer, kind):
    """Link envelopes are counted, not answered: the frame gets no answer, and the log
    shows no internal error."""
    since = log_size(shared_broker)
    hello = env("link", broker="evil", proof="l1.0000", endpoint="ipc:///x", until=1e12, sessions=[])
    assert peer.exchange([pack([hello, env(kind, until=1e12)])]) == []
    assert_still_serving(shared_broker, watcher)
    assert_log_clean(shared_broker, since)


def test_workflow_stage_state_that_is_not_a_string_is_refused_as_invalid_params(shared_broker, watcher, peer):
    peer.hello("host", unique())
    run_id = unique("run")
    registered = peer.answer_to([pack(env("workflow", id="w1", op="register_run", runId=run_id,
                                          stages=[{"name": "build"}]))], "w1")
    assert registered["ok"] is True, registered
    replies = peer.exchange([pack(env("workflow", id="w2", op="stage_state", runId=run_id,
                                      stage="build", state=["RUNNING"]))])
    assert_refused(replies, "invalid_params")
    assert_still_serving(shared_broker, watcher)


def test_full_batch_of_calls_gets_one_answer_per_call(shared_broker, watcher, peer):
    peer.hello("batcher", unique())
    ids = [f"c{n}" for n in range(MAX_BATCH)]
    replies = peer.exchange([pack([env("call", id=i, action="status") for i in ids])])
    for reply in replies:
        assert_well_formed(reply)
    assert [r["re"] for r in replies] == ids
    assert all(r["ok"] is True for r in replies)
    peer.exchange([pack(env("bye", id="bye"))])
    assert_still_serving(shared_broker, watcher)


def test_frame_far_over_the_limit_is_dropped_and_the_broker_keeps_serving(shared_broker, watcher):
    with Peer(shared_broker.endpoint) as peer:
        monitor = peer.sock.get_monitor_socket(zmq.EVENT_DISCONNECTED)
        try:
            peer.sock.send(b"\x00" * (MAX_FRAME_BYTES * 5))
            # libzmq drops such a peer before reading the frame: wait for that.
            assert monitor.poll(10_000), "the broker kept a peer that sent a 5 MiB frame"
            while peer.sock.poll(0):
                assert_refused([msgpack.unpackb(peer.sock.recv(), raw=False)], "frame_too_large")
        finally:
            peer.sock.disable_monitor()
            monitor.close()
    assert_still_serving(shared_broker, watcher)
    with Peer(shared_broker.endpoint) as fresh:
        assert_refused(fresh.exchange([b"\xc1"]), "malformed_frame")


def test_peer_cannot_act_for_a_session_it_did_not_open(shared_broker, watcher, peer):
    replies = peer.exchange([pack(env("call", id="c", action="send", to=watcher.id, message="hi"))])
    assert_refused(replies, "not_connected")
    replies = peer.exchange([pack(env("bye", id="b"))])
    assert_refused(replies, "not_connected")
    assert_still_serving(shared_broker, watcher)


# -- random frames (hypothesis) ----------------------------------------------------------------------

_scalars = (st.none() | st.booleans() | st.integers(min_value=-(2 ** 63), max_value=2 ** 64 - 1)
            | st.floats() | st.text(max_size=24) | st.binary(max_size=24))
msgpack_values = st.recursive(
    _scalars,
    lambda children: st.lists(children, max_size=6) | st.dictionaries(st.text(max_size=12), children, max_size=6),
    max_leaves=24)

# Envelope fields the broker reads, beyond the hello/status tables and the tool schema:
# receipts, turns, and the workflow host operations.
_FIELDS = sorted(set(HELLO_FIELDS) | set(STATUS_FIELDS) | set(INTERCOM_SCHEMA["properties"])
                 | {"ids", "op", "currentTurn", "re", "runId", "stages", "state", "transcript",
                    "quiet", "notifyUndeliverable"})
_WORDS = st.sampled_from(["default", "true", "auto", " x ", "", "idle", "thinking", "tool:x", "tool:",
                          "live", "terminal", "stage", "interactive", "watcher", "*", "**",
                          "workflow:r", "workflow:r/s", "workflow:r/**", "r", "s",
                          "register_run", "add_stages", "stage_state", "end_run",
                          "pending", "running", "completed", "failed", "skipped", "PENDING", "RUNNING",
                          str(uuid.UUID(int=0)), "00000000"])
_field_values = (st.text(max_size=24) | _WORDS | msgpack_values
                 | st.lists(st.text(max_size=8) | _WORDS, max_size=4))
_envelope_base = st.fixed_dictionaries(
    {"v": st.just(PROTOCOL_VERSION) | msgpack_values,
     "k": st.sampled_from(sorted(CLIENT_KINDS)) | st.text(max_size=8)},
    optional={"id": st.text(min_size=1, max_size=24) | msgpack_values,
              "action": st.sampled_from(INTERCOM_ACTIONS) | msgpack_values})
_envelope_fields = st.dictionaries(st.sampled_from([f for f in _FIELDS if f not in ("id", "action")]),
                                   _field_values, max_size=5)
envelopes = st.builds(lambda base, fields: {**fields, **base}, _envelope_base, _envelope_fields)
envelope_frames = (envelopes | st.lists(envelopes, min_size=1, max_size=6)).map(pack)

FUZZ = settings(max_examples=200, deadline=None, database=None, derandomize=False,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def throw_and_check(endpoint: str, frame: bytes) -> None:
    with Peer(endpoint) as peer:
        for reply in peer.exchange([frame]):
            assert_well_formed(reply)


def log_size(shared_broker) -> int:
    return shared_broker.log.stat().st_size


def assert_log_clean(shared_broker, since: int) -> None:
    """No internal error logged since offset ``since``. Call after a round trip: the
    broker logs a round's internal errors before it reads the next request."""
    with shared_broker.log.open("rb") as f:
        f.seek(since)
        log = f.read().decode(errors="replace")
    assert "Traceback" not in log
    problems = []
    for line in log.splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if record.get("event") == "internal_error":
            problems.append(record)
    assert problems == []


@pytest.mark.timeout(120)
@pytest.mark.parametrize("frames", [
    pytest.param(st.binary(max_size=4096), id="bytes"),
    pytest.param(msgpack_values.map(pack), id="msgpack-values"),
    pytest.param(envelope_frames, id="envelopes"),
])
def test_random_frames_never_stop_the_broker(shared_broker, watcher, frames):
    since = log_size(shared_broker)

    @FUZZ
    @given(frame=frames)
    def throw(frame):
        throw_and_check(shared_broker.endpoint, frame)

    throw()
    assert_still_serving(shared_broker, watcher)
    assert_log_clean(shared_broker, since)


@pytest.mark.timeout(120)
def test_random_requests_from_a_connected_peer_never_stop_the_broker(shared_broker, watcher):
    since = log_size(shared_broker)

    @FUZZ
    @given(frame=envelope_frames)
    def throw(frame):
        with Peer(shared_broker.endpoint) as peer:
            peer.hello("fuzzer", unique())
            for reply in peer.exchange([frame]):
                assert_well_formed(reply)
            peer.sock.send(pack(env("bye")))

    throw()
    assert_still_serving(shared_broker, watcher)
    assert_log_clean(shared_broker, since)
