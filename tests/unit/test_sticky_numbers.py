"""Sticky entry numbers stay unique and ordered when several brokers share a database."""

from broker.core import Engine


def test_two_brokers_number_entries_apart_and_a_restore_continues_above_all_of_them():
    a, b = Engine(broker_id="broker-a").state.sticky, Engine(broker_id="broker-b").state.sticky
    assert a.tag != b.tag
    numbers_a = [a.allocate() for _ in range(100)]
    numbers_b = [b.allocate() for _ in range(100)]
    assert not set(numbers_a) & set(numbers_b)
    assert numbers_a == sorted(numbers_a)              # FIFO order within one broker

    from broker.core.workflow.sticky_queue import Entry
    from broker.core.runs.paths import parse_path
    restored = Engine(broker_id="broker-c").state.sticky
    for seq in (numbers_a[-1], numbers_b[-1], 7):        # 7: a number from before tags
        restored.add(Entry(seq, "r1", parse_path("workflow:r1/x"), "s", "n", f"m{seq}", "t",
                           [], 0.0, False))
    assert restored.allocate() > max(numbers_a + numbers_b)
