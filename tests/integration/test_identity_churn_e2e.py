"""Ids and new sessions through a real broker: an id asked for without its secret is
never granted, churn is rate-bounded, and plain-TCP clients do not share one
per-connection session bound."""

from __future__ import annotations

import shutil
import socket
import time
import uuid

import msgpack
import pytest
import zmq

from client import Client, ConnectError
from schemas.protocol import envelope, pack

from .conftest import make_tmp, start_broker, wait_ready


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture
def tcp_broker():
    """A broker on plain TCP (loopback) allowing two sessions per connection."""
    path = make_tmp()
    router, pub = f"tcp://127.0.0.1:{_free_port()}", f"tcp://127.0.0.1:{_free_port()}"
    proc = start_broker(path, "--endpoint", router, "--pub-endpoint", pub,
                        "--max-sessions-per-connection", "2", wait=False)
    try:
        wait_ready(router, proc.proc)
        yield router
    finally:
        proc.stop()
        shutil.rmtree(path, ignore_errors=True)


def _connect(endpoint: str, name: str, **kwargs):
    return Client.connect(name=name, endpoint=endpoint, timeout=15, **kwargs)


def test_a_made_up_session_id_gets_a_fresh_id_and_the_reason(broker):
    made_up = str(uuid.uuid4())
    for token in (None, "a guessed secret"):
        with _connect(broker.endpoint, "taker", session_id=made_up, identity=None if token is None
                      else {"sessionId": made_up, "reclaimSecret": token}) as taker:
            assert taker.id != made_up
            assert taker.welcome["reclaimed"] is False and taker.welcome["reason"]


def test_an_id_goes_back_across_a_restart_with_its_secret_only(short_tmp):
    broker = start_broker(short_tmp)
    try:
        entries: list[dict] = []
        first = _connect(broker.endpoint, "first", history=entries.append)
        (identity,) = [e for e in entries if e["type"] == "intercom_session_identity"]
        first.close()
        broker.stop()
        broker = start_broker(short_tmp)
        with _connect(broker.endpoint, "stranger", session_id=identity["sessionId"]) as stranger:
            assert stranger.id != identity["sessionId"] and stranger.welcome["reclaimed"] is False
        with _connect(broker.endpoint, "back", identity=identity) as back:
            assert back.id == identity["sessionId"] and back.welcome["reclaimed"] is True
    finally:
        broker.stop()


def test_on_plain_tcp_each_connection_has_its_own_session_bound(tcp_broker):
    # Three sessions from this one process over TCP (two allowed per connection): the
    # address is every local client's, so each connection is counted alone.
    opened = []
    try:
        opened += [_connect(tcp_broker, f"tcp-{n}") for n in range(3)]
        assert len({s.id for s in opened}) == 3
    finally:
        for session in opened:
            session.close()


def test_on_ipc_one_process_is_still_one_peer(short_tmp):
    broker = start_broker(short_tmp, "--max-sessions-per-connection", "2")
    opened = []
    try:
        opened += [_connect(broker.endpoint, f"ipc-{n}") for n in range(2)]
        with pytest.raises(ConnectError) as refused:
            _connect(broker.endpoint, "ipc-2")
        assert refused.value.code == "too_many_sessions"
    finally:
        for session in opened:
            session.close()
        broker.stop()


def _request(sock: zmq.Socket, env: dict, timeout_s: float = 10.0) -> dict:
    """Send one envelope on a raw connection; the result answering it."""
    sock.send(pack(env))
    deadline = time.monotonic() + timeout_s
    while sock.poll(max(0.0, deadline - time.monotonic()) * 1000):
        frame = msgpack.unpackb(sock.recv(), raw=False)
        for answer in frame if isinstance(frame, list) else [frame]:
            if answer.get("k") == "result" and answer.get("re") == env["id"]:
                return answer
    raise AssertionError(f"no answer to {env['id']} within {timeout_s} s")


def test_hello_and_bye_in_a_loop_on_one_connection_is_refused_past_its_burst(short_tmp):
    broker = start_broker(short_tmp, "--max-new-sessions-per-second", "1")
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.linger = 0
    try:
        sock.connect(broker.endpoint)
        answers = []
        for n in range(9):
            answers.append(_request(sock, envelope("hello", id=f"h{n}", name="looper")))
            if answers[-1]["ok"]:
                assert _request(sock, envelope("bye", id=f"b{n}"))["ok"]
        assert [a["ok"] for a in answers] == [True] * 8 + [False]
        assert answers[-1]["code"] == "session_rate_limited"
    finally:
        sock.close()
        broker.stop()
