"""RecentMap: the newest keys are kept, memory stays bounded, lookups see both halves."""

from broker.core.kernel.bounded import RecentMap
from broker.core.messaging.dedup import MessageIds, fingerprint
from schemas.errors import BusError


def test_the_newest_half_of_capacity_is_always_remembered():
    recent = RecentMap(100)
    for i in range(1000):
        recent[i] = str(i)
        newest = range(max(0, i - 49), i + 1)
        assert all(recent.get(k) == str(k) for k in newest)


def test_memory_is_bounded_by_capacity():
    recent = RecentMap(100)
    for i in range(10_000):
        recent[i] = i + 1
    assert len(recent) <= 100
    assert recent.get(0) is None and 0 not in recent


def test_a_rewritten_key_reads_its_newest_value():
    recent = RecentMap(4)
    recent["a"] = 1
    recent["b"] = 2          # rotates: a and b are now the old half
    recent["a"] = 3
    assert recent.get("a") == 3 and recent.get("b") == 2


def test_message_ids_keep_answers_and_refuse_reuse_for_other_content():
    ids = MessageIds(capacity=10)
    mark = fingerprint("send", "bob", "hi")
    assert mark != fingerprint("send", "bob", "hi", attachments=[{"type": "file"}])
    ids.record("m1", "alice", mark, {"delivered": True, "messageId": "m1"})
    assert ids.lookup("m1", "alice", mark) == ({"delivered": True, "messageId": "m1"},)
    ids.record("m2", "alice", mark, None)
    assert ids.lookup("m2", "alice", mark) == (None,)
    ids.answer("m2", BusError("ask_timeout", timeout_s=1))
    (refusal,) = ids.lookup("m2", "alice", mark)
    assert isinstance(refusal, BusError) and refusal.code == "ask_timeout"
    assert ids.lookup("m3", "alice", mark) is None
    try:
        ids.lookup("m1", "mallory", mark)
    except Exception as exc:
        assert getattr(exc, "code", None) == "message_id_conflict"
    else:
        raise AssertionError("reuse by another sender was accepted")


def test_put_all_keeps_the_same_newest_keys_as_one_write_each():
    one, bulk = RecentMap(10), RecentMap(10)
    keys = list(range(37))
    for k in keys:
        one[k] = -k
    bulk.put_all(keys[:3], value=0)
    bulk.put_all(keys[3:], [-k for k in keys[3:]])
    assert [one.get(k) for k in keys[3:]] == [bulk.get(k) for k in keys[3:]]
    assert len(bulk) <= 10
