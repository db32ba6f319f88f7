"""Client behaviours set by config or connect options, through the public surface."""

import os
import socket
import subprocess
import sys
import threading
import time

import pytest

from client import Client, ConnectError
from schemas.config import Config
from tests.conftest import ROOT, start_broker
from tests.integration.conftest import module_connect_broker

# One broker for the module: each test closes the sessions it opens.
broker = module_connect_broker()


def open_session(broker, name, **kwargs):
    return Client.connect(name=name, endpoint=broker.endpoint, timeout=15, **kwargs)


def test_reply_hint_is_in_the_body_only_when_configured(broker):
    with open_session(broker, "alice") as alice, \
            open_session(broker, "bob") as bob, \
            open_session(broker, "carol", config=Config(replyHint=False)) as carol:
        alice.intercom(action="send", to="bob", message="with hint")
        alice.intercom(action="send", to="carol", message="without hint")
        assert "intercom(" in bob.receive(timeout=10)["body"]
        assert "intercom(" not in carol.receive(timeout=10)["body"]


def test_confirm_send_skips_sends_that_carry_reply_to(broker):
    asked = []
    with open_session(broker, "alice", config=Config(confirmSend=True),
                      confirm=lambda params: asked.append(params) or False) as alice, \
            open_session(broker, "bob") as bob:
        bob.intercom(action="send", to="alice", message="question")
        msg = alice.receive(timeout=10)
        result = alice.intercom(action="send", to="bob", message="answer", replyTo=msg["id"])
        assert result["ok"] and asked == []
        assert bob.receive(timeout=10)["replyTo"] == msg["id"]


def test_marked_terminal_child_refuses_asks_with_the_spec_text(broker):
    with open_session(broker, "parent") as parent, \
            open_session(broker, "child", kind="noninteractive", parent=parent,
                         grant=parent.grant_child()["grant"]) as child:
        assert child.mark_terminal()["ok"]
        result = parent.intercom(action="ask", to="child", message="still there?", timeout=5)
        assert result == {"ok": False, "code": "terminal_child",
                          "error": "Target noninteractive child is terminal and cannot reply"}


def test_a_closed_session_id_goes_back_only_with_its_identity_entry(broker):
    entries = []
    first = open_session(broker, "resumable", atomic_session_id="atomic-1", history=entries.append)
    (identity,) = [e for e in entries if e["type"] == "intercom_session_identity"]
    assert identity["sessionId"] == first.id and identity["reclaimSecret"]
    first.close()
    # What list shows (id and Atomic session id) does not take the id.
    stranger = open_session(broker, "stranger", session_id=first.id, atomic_session_id="atomic-1")
    assert stranger.id != first.id
    assert stranger.welcome["reclaimed"] is False and stranger.welcome["reason"]
    stranger.close()
    with open_session(broker, "resumed", identity=identity) as back:
        assert back.id == first.id and back.welcome["reclaimed"] is True


def test_live_id_is_not_given_to_a_second_registration(broker):
    with open_session(broker, "holder", atomic_session_id="atomic-1") as holder, \
            open_session(broker, "copy", session_id=holder.id, atomic_session_id="atomic-1") as copy:
        assert copy.id != holder.id


def test_a_second_client_with_the_same_identity_entry_gets_a_fresh_id_and_the_first_keeps_receiving(broker):
    entries = []
    with open_session(broker, "worker", history=entries.append) as first, \
            open_session(broker, "sender") as sender:
        (identity,) = [e for e in entries if e["type"] == "intercom_session_identity"]
        with open_session(broker, "worker", identity=identity) as second:
            assert second.id != first.id
            assert second.welcome["reclaimed"] is False
            assert second.welcome["reason"] == "a live session holds that id"

            answer = sender.intercom(action="send", to=first.id, message="for the first")

            assert answer["ok"] and answer["delivered"] is True, answer
            assert first.receive(timeout=10)["message"] == "for the first"
            assert first.connected and first.intercom(action="status")["ok"]
            assert second.receive(timeout=0) is None


def test_client_enforces_configured_max_pending_asks(broker):
    with open_session(broker, "alice", config=Config(maxPendingAsks=2)) as alice, \
            open_session(broker, "bob"):
        started = threading.Barrier(3)
        results = []

        def ask():
            started.wait()
            results.append(alice.intercom(action="ask", to="bob", message="q", timeout=2))

        threads = [threading.Thread(target=ask) for _ in range(3)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(20)
        codes = sorted(r["code"] for r in results)
        assert codes == ["ask_timeout", "ask_timeout", "too_many_asks"]


def test_connect_with_no_ipc_socket_fails_within_about_a_second_naming_the_fix(short_tmp):
    endpoint = f"ipc://{short_tmp}/none.sock"
    started = time.monotonic()
    with pytest.raises(ConnectError) as error:
        Client.connect(name="lonely", endpoint=endpoint, timeout=15)
    assert time.monotonic() - started < 2.0
    assert error.value.code == "no_broker"
    assert endpoint in str(error.value) and "python -m broker" in str(error.value)


def test_connect_to_a_stale_ipc_socket_file_fails_fast(short_tmp):
    stale = short_tmp / "stale.sock"
    with socket.socket(socket.AF_UNIX) as left_behind:   # bound, never listening: as after kill -9
        left_behind.bind(str(stale))
        started = time.monotonic()
        with pytest.raises(ConnectError) as error:
            Client.connect(name="lonely", endpoint=f"ipc://{stale}", timeout=15)
    assert time.monotonic() - started < 2.0 and error.value.code == "no_broker"


def test_connect_to_a_refusing_tcp_port_fails_fast():
    with socket.socket() as holder:            # a port nobody listens on
        holder.bind(("127.0.0.1", 0))
        port = holder.getsockname()[1]
        started = time.monotonic()
        with pytest.raises(ConnectError) as error:
            Client.connect(name="lonely", endpoint=f"tcp://127.0.0.1:{port}", timeout=15)
    assert time.monotonic() - started < 2.0 and error.value.code == "no_broker"
    assert "python -m broker" in str(error.value)


def test_a_broker_that_listens_but_never_answers_gets_the_full_wait(short_tmp):
    with socket.socket(socket.AF_UNIX) as mute:
        mute.bind(str(short_tmp / "mute.sock"))
        mute.listen()
        started = time.monotonic()
        with pytest.raises(ConnectError) as error:
            Client.connect(name="lonely", endpoint=f"ipc://{short_tmp}/mute.sock", timeout=1.5)
    assert error.value.code == "broker_unavailable" and time.monotonic() - started >= 1.5


def test_the_cli_with_no_broker_prints_one_line_fast_and_exits_non_zero(short_tmp):
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "client", "--endpoint",
                           f"ipc://{short_tmp}/none.sock", "status"], cwd=ROOT,
                          capture_output=True, text=True, timeout=30,
                          env=dict(os.environ, PYTHONPATH=str(ROOT), HOME=str(short_tmp)))
    elapsed = time.monotonic() - started
    assert done.returncode != 0 and elapsed < 5.0      # interpreter start included
    lines = (done.stdout + done.stderr).strip().splitlines()
    assert len(lines) == 1 and "no_broker" in lines[0] and "python -m broker" in lines[0]


def test_a_send_with_reply_to_answers_the_waiting_ask(broker):
    with open_session(broker, "alice") as alice, open_session(broker, "bob") as bob:
        waiting = []
        asker = threading.Thread(target=lambda: waiting.append(
            alice.intercom(action="ask", to="bob", message="ready?", timeout=10)))
        asker.start()
        msg = bob.receive(timeout=10)
        result = bob.intercom(action="send", to="alice", message="yes", replyTo=msg["id"])
        asker.join(15)
        assert result["ok"] and result["replyTo"] == msg["id"]
        assert waiting[0]["ok"] and waiting[0]["message"] == "yes"


def test_a_confirm_callback_that_raises_declines_the_send(broker):
    def broken(params):
        raise RuntimeError("no dialog")

    with open_session(broker, "alice", config=Config(confirmSend=True), confirm=broken) as alice, \
            open_session(broker, "bob") as bob:
        assert alice.intercom(action="send", to="bob", message="m")["code"] == "confirmation_declined"
        assert bob.receive(timeout=0.3) is None


def test_confirm_send_applies_to_interactive_sessions_only(broker):
    asked = []
    with open_session(broker, "worker", kind="noninteractive", config=Config(confirmSend=True),
                      confirm=lambda params: asked.append(params) or False) as worker, \
            open_session(broker, "bob") as bob:
        assert worker.intercom(action="send", to="bob", message="m")["ok"]
        assert asked == [] and bob.receive(timeout=10)["message"] == "m"


def test_a_rejected_config_file_is_logged_once_and_defaults_are_used(broker, tmp_path, caplog):
    bad = tmp_path / "config.json"
    bad.write_text('{"replyHint": "yes"}')
    with caplog.at_level("ERROR", logger="intercom.client"):
        with open_session(broker, "one", config_path=str(bad)) as one, \
                open_session(broker, "two", config_path=str(bad)):
            assert one.config.replyHint is True
    records = [r for r in caplog.records if r.name == "intercom.client"]
    assert len(records) == 1 and "replyHint" in records[0].getMessage()
    assert "defaults" in records[0].getMessage()


def test_an_endpoint_that_cannot_be_parsed_fails_at_once():
    started = time.monotonic()
    with pytest.raises(ConnectError) as refused:
        Client.connect(name="x", endpoint="foo", timeout=15)
    assert refused.value.code == "invalid_endpoint" and time.monotonic() - started < 1


def session_of_a_killed_broker(data_dir):
    """A session in groups default and ops whose broker was just killed with SIGKILL
    (no goodbye reaches the client)."""
    broker = start_broker(data_dir)
    try:
        session = open_session(broker, "alone")
        assert session.intercom(action="join", group="ops")["ok"]
    finally:
        broker.kill()
    return session


def test_status_with_the_broker_down_answers_at_once_with_the_connection_state(short_tmp):
    session = session_of_a_killed_broker(short_tmp)
    deadline = time.monotonic() + 15
    while session.connected:            # the client notices the silence within its liveness
        assert time.monotonic() < deadline
        session.next_event(timeout=0.2)
    started = time.monotonic()
    status = session.intercom(action="status")
    assert time.monotonic() - started < 0.5
    assert status["ok"] is True and status["connected"] is False
    assert status["groups"] == ["default", "ops"] and status["since"] <= time.time()
    session.close()


def test_status_just_after_the_broker_is_killed_answers_within_a_second(short_tmp):
    session = session_of_a_killed_broker(short_tmp)
    assert session.connected            # its liveness check has not noticed yet
    started = time.monotonic()
    status = session.intercom(action="status")
    assert time.monotonic() - started < 2.0
    assert status["ok"] is True and status["connected"] is False, status
    assert (status["sessionId"], status["name"]) == (session.id, "alone")
    assert status["groups"] == ["default", "ops"] and "did not answer" in status["detail"]
    session.close()


def test_the_reply_an_asker_gets_is_in_its_history_as_received(broker):
    entries = []
    with open_session(broker, "asker", history=entries.append) as asker, \
            open_session(broker, "answerer") as answerer:
        waiting = []
        thread = threading.Thread(target=lambda: waiting.append(
            asker.intercom(action="ask", to="answerer", message="ready?", timeout=10)))
        thread.start()
        question = answerer.receive(timeout=10)
        answerer.intercom(action="reply", message="yes")
        thread.join(15)
        assert waiting[0]["ok"], waiting
    received = [e for e in entries if e["type"] == "intercom_received"]
    assert len(received) == 1, entries
    (entry,) = received
    assert (entry["from"], entry["fromName"], entry["message"], entry["replyTo"]) == \
        (answerer.id, "answerer", "yes", question["id"])
    assert entry["messageId"] == waiting[0]["replyId"] and entry["expectsReply"] is False
    kinds = [e["type"] for e in entries]
    assert kinds.index("intercom_sent") < kinds.index("intercom_received")   # ask, then its reply


def test_a_host_that_does_not_resolve_fails_within_about_a_second_naming_it():
    endpoint = "tcp://no-such-host.invalid:5555"      # .invalid never resolves
    started = time.monotonic()
    with pytest.raises(ConnectError) as error:
        Client.connect(name="lonely", endpoint=endpoint, timeout=15)
    assert time.monotonic() - started < 2.0
    assert error.value.code == "unknown_host"
    assert "'no-such-host.invalid'" in str(error.value) and "does not resolve" in str(error.value)


def test_an_unresolvable_host_among_several_endpoints_does_not_stop_the_others(broker):
    endpoints = ["tcp://no-such-host.invalid:5555", broker.endpoint]
    with Client.connect(name="failover", endpoint=endpoints, timeout=15) as session:
        assert session.intercom(action="status")["connected"] is True


def test_list_rows_show_each_sessions_working_directory_with_the_id_first(broker, tmp_path):
    with open_session(broker, "here") as here, \
            open_session(broker, "there", cwd=tmp_path / "project") as there:
        rows = {row["name"]: row for row in here.intercom(action="list")["sessions"]}
        assert rows["there"]["cwd"] == str(tmp_path / "project")   # the caller's choice
        mine = there.intercom(action="list")
        assert mine["sessions"][0]["cwd"] == os.getcwd()          # this process's directory
        assert mine["self"]["cwd"] == str(tmp_path / "project")
        assert all(list(row)[0] == "id" for row in mine["sessions"] + [mine["self"]])
