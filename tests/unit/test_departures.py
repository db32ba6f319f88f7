"""A crowd leaving at once: its peers are told a bounded amount per round, in order."""

from collections import Counter

from broker.core import Send
from broker.core.sessions.departures import SENDS_PER_ROUND
from schemas.protocol import envelope

from .harness import Bus

CROWD = 240           # 240 x 239 session_left events: several rounds' budget


def _lefts(out: list) -> Counter:
    """(receiver, departed name) -> count of session_left events in ``out``."""
    return Counter((c.identity, c.env["session"]["name"]) for c in out
                   if isinstance(c, Send) and c.env.get("k") == "event"
                   and c.env["event"] == "session_left")


def _crowd(bus: Bus, n: int) -> list[bytes]:
    ids = [f"s{i}".encode() for i in range(n)]
    for identity in ids:
        bus.hello(identity.decode())
    return ids


def _tick_until_told(bus: Bus, seen: Counter, rounds: int = 100) -> list[int]:
    """Ticks (the input drained) until nothing is left to tell; events per round."""
    per_round = []
    for _ in range(rounds):
        if bus.engine.next_deadline() > bus.now:
            return per_round
        out = bus.advance(0)
        told = _lefts(out)
        per_round.append(sum(told.values()))
        seen.update(told)
    raise AssertionError("departures still queued after 100 rounds")


def test_a_crowd_saying_bye_is_answered_at_once_and_told_within_a_budget_per_round():
    bus = Bus()
    ids = _crowd(bus, CROWD)
    leaving, staying = ids[:-3], ids[-3:]
    seen: Counter = Counter()
    for n, identity in enumerate(leaving):
        out = bus.feed(identity, envelope("bye", id=f"b{n}"))
        assert any(c.identity == identity and c.env.get("re") == f"b{n}" for c in out
                   if isinstance(c, Send)), "every bye is answered in its own round"
        seen.update(_lefts(out))
    told_with_byes = sum(seen.values())
    assert told_with_byes <= SENDS_PER_ROUND
    listed = {row["name"] for row in bus.call(staying[0], "list")["sessions"]}
    assert listed == {"s238", "s239"}, "the departed are gone from listings at once"
    per_round = _tick_until_told(bus, seen)
    assert per_round and max(per_round) <= SENDS_PER_ROUND
    # In the end every session told of every departure it could see, exactly once.
    expected = Counter()
    for i, receiver in enumerate(leaving):
        for departed in leaving[:i]:          # left before ``receiver`` did
            expected[(receiver, departed.decode())] += 1
    for receiver in staying:
        for departed in leaving:
            expected[(receiver, departed.decode())] += 1
    stayed_told = {k: v for k, v in seen.items() if k[0] in staying}
    assert stayed_told == {k: v for k, v in expected.items() if k[0] in staying}
    assert all(v == 1 for v in seen.values())


def test_a_session_back_before_its_departure_was_told_is_never_shown_leaving_after():
    bus = Bus()
    ids = _crowd(bus, CROWD)
    watcher = ids[-1]
    welcome = bus.hello("s0", identity=b"s0-again")     # a second one named s0 for contrast
    assert welcome["ok"]
    back = ids[-2]
    back_id = bus.engine.registry.by_identity[back].id
    token = bus.engine.registry.by_identity[back].token
    for n, identity in enumerate(ids[:-1]):               # back leaves last of the crowd
        bus.feed(identity, envelope("bye", id=f"b{n}"))
    assert bus.engine.next_deadline() <= bus.now, "departures are still being told"
    out = bus.feed(b"back-new", envelope("hello", id="h-back", name="s238",
                                        sessionId=back_id, token=token))
    events = [(c.env["event"], c.env["session"]["name"]) for c in out
              if isinstance(c, Send) and c.identity == watcher and c.env.get("k") == "event"
              and c.env["session"]["id"] == back_id]
    assert events == [("session_left", "s238"), ("session_joined", "s238")]
    later: Counter = Counter()
    _tick_until_told(bus, later)
    assert later[(watcher, "s238")] == 0


def test_a_session_connected_after_a_departure_is_not_told_of_it():
    bus = Bus()
    ids = _crowd(bus, CROWD)
    for n, identity in enumerate(ids[:-1]):
        bus.feed(identity, envelope("bye", id=f"b{n}"))
    bus.hello("newcomer")
    seen: Counter = Counter()
    _tick_until_told(bus, seen)
    assert not [k for k in seen if k[0] == b"newcomer"]
    assert sum(v for k, v in seen.items() if k[0] == ids[-1]) > 0
