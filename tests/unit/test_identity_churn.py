"""Identity churn: a bounded identity table never hands an id to someone without its
secret, never forgets an id that holds anything, and churn itself is rate-bounded."""

from schemas.protocol import envelope

from .harness import Bus, result_for
from .test_workflow import STAGES

NEVER_ISSUED = "12345678-1234-4123-8123-123456789abc"


def churn(bus: Bus, count: int, peer: str = "pid=9") -> None:
    """``count`` sessions open and close, each on its own connection, a second apart
    (well inside the rate), committed as they go."""
    for n in range(count):
        bus.advance(1.0)
        identity = f"churn-{bus.now}-{n}".encode()
        assert bus.hello(f"c{n}", identity=identity, peer=peer)["ok"]
        bus.feed(identity, envelope("bye"))
        bus.commit()


def hello_committed(bus: Bus, name: str, **fields) -> dict:
    """A hello whose welcome may wait for its claim's commit."""
    msg_id = f"h-{name}-{bus.now}"
    out = bus.feed(name.encode(), envelope("hello", id=msg_id, name=name, **fields))
    out = out + bus.commit()
    return result_for(out, name.encode(), msg_id)


def test_churn_forgets_old_identities_that_hold_nothing():
    bus = Bus(max_identities=4, liveness_s=1e9)
    gone = bus.hello("gone")
    bus.feed(b"gone", envelope("bye"))
    churn(bus, 10)
    assert gone["sessionId"] not in bus.engine.state.identities
    assert len(bus.engine.state.identities) <= 5


def test_a_forgotten_id_asked_for_without_its_secret_gets_a_fresh_id_and_the_reason():
    bus = Bus(max_identities=4, liveness_s=1e9)
    gone = bus.hello("gone")
    bus.feed(b"gone", envelope("bye"))
    churn(bus, 10)
    taker = hello_committed(bus, "taker", sessionId=gone["sessionId"])
    assert (taker["ok"], taker["reclaimed"]) == (True, False)
    assert taker["sessionId"] != gone["sessionId"] and "reclaim secret" in taker["reason"]


def test_an_id_never_issued_is_not_granted_on_request():
    bus = Bus()
    for token in (None, "made-up"):
        fields = {"token": token} if token else {}
        taker = hello_committed(bus, f"taker-{token}", sessionId=NEVER_ISSUED, **fields)
        assert (taker["reclaimed"], taker["sessionId"] != NEVER_ISSUED) == (False, True)
        assert taker["reason"]
    assert NEVER_ISSUED not in bus.engine.registry.by_id


def test_a_forgotten_id_goes_back_with_its_secret_once_the_store_confirms_it():
    bus = Bus(max_identities=4, liveness_s=1e9)
    gone = bus.hello("gone")
    bus.feed(b"gone", envelope("bye"))
    churn(bus, 10)
    wrong = hello_committed(bus, "wrong", sessionId=gone["sessionId"], token="not-the-secret")
    assert (wrong["reclaimed"], wrong["sessionId"] != gone["sessionId"]) == (False, True)
    back = hello_committed(bus, "back", sessionId=gone["sessionId"], token=gone["token"])
    assert (back["reclaimed"], back["sessionId"]) == (True, gone["sessionId"])


def test_a_run_hosts_identity_survives_churn_and_goes_back_only_with_its_secret():
    bus = Bus(max_identities=4, liveness_s=1e9)
    host = bus.hello("host")
    assert bus.workflow(b"host", "register_run", runId="r1", stages=STAGES)["ok"]
    bus.feed(b"host", envelope("bye"))
    churn(bus, 20)
    assert host["sessionId"] in bus.engine.state.identities
    taker = hello_committed(bus, "taker", sessionId=host["sessionId"])
    assert (taker["reclaimed"], taker["sessionId"] != host["sessionId"]) == (False, True)
    assert bus.workflow(b"taker", "register_run", runId="r1", stages=STAGES)["ok"] is False
    back = bus.hello("host", identity=b"host-2", sessionId=host["sessionId"], token=host["token"])
    assert (back["reclaimed"], back["sessionId"]) == (True, host["sessionId"])


def test_the_launcher_of_a_live_child_keeps_its_identity_through_churn():
    bus = Bus(max_identities=4, liveness_s=1e9)
    launcher = bus.hello("launcher")
    assert bus.hello("child", parent=launcher["sessionId"])["ok"]
    bus.feed(b"launcher", envelope("bye"))
    churn(bus, 20)
    assert launcher["sessionId"] in bus.engine.state.identities


def test_new_sessions_past_the_burst_and_rate_of_one_peer_are_refused():
    bus = Bus(max_new_sessions_per_second=10, liveness_s=1e9)
    for n in range(1024):     # a client opening a thousand sessions at once is served
        assert bus.hello(f"s{n}", peer="pid=1")["ok"], n
        bus.feed(f"s{n}".encode(), envelope("bye"))
    refused = bus.hello("one-more", peer="pid=1")
    assert refused["code"] == "session_rate_limited" and "client" in refused["error"]
    assert bus.hello("other-client", peer="pid=2")["ok"]
    bus.advance(0.1)          # one token back at 10 a second
    assert bus.hello("one-more", peer="pid=1")["ok"]
    assert bus.hello("and-another", peer="pid=1")["code"] == "session_rate_limited"


def test_hello_and_bye_in_a_loop_on_one_connection_is_refused_past_its_burst():
    bus = Bus(max_new_sessions_per_second=1, liveness_s=1e9)
    for n in range(8):
        assert bus.hello("loop", peer="pid=1")["ok"], n
        bus.feed(b"loop", envelope("bye"))
    refused = bus.hello("loop", peer="pid=1")
    assert refused["code"] == "session_rate_limited" and "connection" in refused["error"]
    assert bus.hello("elsewhere", peer="pid=1")["ok"]


def test_a_reconnect_with_its_secret_is_not_counted_against_the_rate():
    bus = Bus(max_new_sessions_per_second=1, liveness_s=1e9)
    first = bus.hello("first", peer="pid=1")
    bus.feed(b"first", envelope("bye"))
    for n in range(7):
        assert bus.hello("first", peer="pid=1")["ok"]
        bus.feed(b"first", envelope("bye"))
    assert bus.hello("first", peer="pid=1")["code"] == "session_rate_limited"
    back = bus.hello("first", peer="pid=1", sessionId=first["sessionId"], token=first["token"])
    assert (back["ok"], back["reclaimed"]) == (True, True)


def test_the_buckets_of_clients_idle_long_enough_to_be_full_are_dropped():
    bus = Bus(max_new_sessions_per_second=100, liveness_s=1e9)
    for n in range(50):
        assert bus.hello(f"s{n}", peer=f"pid={n}")["ok"]
    rate = bus.engine.state.session_rate
    assert (len(rate.peers), len(rate.connections)) == (50, 50)
    bus.advance(1024 / 100 + 1)
    assert bus.hello("late", peer="pid=late")["ok"]
    assert (len(rate.peers), len(rate.connections)) == (1, 1)


def test_on_plain_tcp_sessions_count_per_connection_not_per_address():
    bus = Bus(max_sessions_per_connection=2, liveness_s=1e9)
    address = "Peer-Address=127.0.0.1"
    for name in ("a", "b", "c"):
        out = bus.feed(name.encode(), envelope("hello", id=f"h-{name}", name=name),
                       peer=address, peer_is_address=True)
        assert result_for(out, name.encode(), f"h-{name}")["ok"], name
    # One process (ipc) or key (CURVE) is still counted as one peer.
    for name in ("d", "e"):
        assert bus.hello(name, peer="Peer-Address=localhost:0:0:42")["ok"]
    assert bus.hello("f", peer="Peer-Address=localhost:0:0:42")["code"] == "too_many_sessions"

