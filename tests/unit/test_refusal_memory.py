"""What a refused request leaves in the broker: its id, its code and a short text.

The message-id memory keeps every answer for a retry, refusals included. A refusal
must be kept as data, not as the raised exception: a raised exception's traceback
holds the frames it passed through, and they hold the request (and the whole batch
it came in) for as long as the id is remembered.
"""

import gc
import sys
import tracemalloc

import pytest

from broker.core.messaging.dedup import MessageIds, fingerprint
from schemas.errors import BusError
from schemas.protocol import envelope

from .harness import Bus, result_for

BIG = 10_000     # characters of the field each refused request carries


def reachable_bytes(root: object, limit: int = 1 << 20) -> int:
    """Bytes of every object reachable from ``root`` (stops counting past ``limit``)."""
    seen: set[int] = set()
    stack, total = [root], 0
    while stack and total <= limit:
        obj = stack.pop()
        if id(obj) in seen or isinstance(obj, type):
            continue
        seen.add(id(obj))
        total += sys.getsizeof(obj)
        stack.extend(gc.get_referents(obj))
    return total


def remembered(bus: Bus, msg_id: str) -> object:
    return bus.engine.state.ids._seen.get(msg_id)


def supervisor(bus: Bus, identity: bytes, msg_id: str, **fields) -> dict:
    out = bus.feed(identity, envelope("supervisor", id=msg_id, **fields))
    return result_for(out, identity, msg_id)


REFUSED = [
    pytest.param(lambda bus, n: supervisor(bus, b"a", f"s{n}", message="?", junk="x" * BIG),
                 "not_supervisor", id="supervisor-undeclared-field"),
    pytest.param(lambda bus, n: supervisor(bus, b"a", f"s{n}", message=f"{n}" + "x" * BIG),
                 "not_supervisor", id="supervisor-message-without-parent"),
    pytest.param(lambda bus, n: bus.call(b"a", "ask", msg_id=f"q{n}", to="nobody",
                                         message=f"{n}" + "x" * BIG),
                 "target_not_found", id="ask-to-nobody"),
    pytest.param(lambda bus, n: bus.call(b"a", "reply", msg_id=f"r{n}", to="nobody",
                                         replyTo="m0", message=f"{n}" + "x" * BIG),
                 None, id="reply-to-no-thread"),
]


@pytest.mark.parametrize("refuse, code", REFUSED)
def test_a_refused_request_is_remembered_as_its_code_and_text_only(refuse, code):
    bus = Bus(liveness_s=1e9)
    bus.hello("a")
    answer = refuse(bus, 0)
    assert answer["ok"] is False and (code is None or answer["code"] == code), answer
    (msg_id,) = [k for k in bus.engine.state.ids._seen.generations()[0] if k.endswith("0")]
    assert reachable_bytes(remembered(bus, msg_id)) < 2_000


@pytest.mark.parametrize("refuse, code", REFUSED)
def test_refused_requests_hold_nothing_of_what_they_carried(refuse, code):
    bus = Bus(liveness_s=1e9)
    bus.hello("a")
    refuse(bus, -1)
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    for n in range(200):
        assert refuse(bus, n)["ok"] is False
    grown = sum(s.size_diff for s in tracemalloc.take_snapshot().compare_to(before, "filename"))
    tracemalloc.stop()
    assert grown < 500_000, grown       # 200 x 10 KB would be 2 MB


def test_a_retried_refusal_gets_the_same_answer_and_holds_nothing_more():
    bus = Bus(liveness_s=1e9)
    bus.hello("a")
    first = supervisor(bus, b"a", "s1", message="?")
    for _ in range(3):
        assert supervisor(bus, b"a", "s1", message="?") == first
    assert first["code"] == "not_supervisor"
    assert reachable_bytes(remembered(bus, "s1")) < 2_000


def test_a_remembered_redirect_keeps_its_endpoint_and_a_long_text_is_cut():
    ids = MessageIds(capacity=10)
    mark = fingerprint("send", "workflow:r/s", "hi")
    ids.record("m1", "alice", mark, BusError("run_elsewhere", run_id="r", endpoint="ipc://b",
                                             server_key="k" * 40))
    ids.record("m2", "alice", mark, BusError("target_not_found", to="t" * 100_000))
    (redirect,) = ids.lookup("m1", "alice", mark)
    assert redirect.reply()["endpoint"] == "ipc://b" and redirect.reply()["serverKey"] == "k" * 40
    (lost,) = ids.lookup("m2", "alice", mark)
    assert lost.code == "target_not_found" and len(lost.text) < 300
    assert reachable_bytes(ids._seen.get("m2")) < 2_000


def test_a_remembered_refusal_is_a_fresh_error_each_time():
    """Raising the one stored exception again would grow its traceback on every retry."""
    ids = MessageIds(capacity=10)
    ids.record("m1", "alice", 7, BusError("not_supervisor"))
    (first,), (second,) = ids.lookup("m1", "alice", 7), ids.lookup("m1", "alice", 7)
    assert first is not second and first.reply() == second.reply()
