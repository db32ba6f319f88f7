"""The client's message ids: unique whatever reseeds the process's ``random`` module,
and drawn without touching it (client.ids)."""

from __future__ import annotations

import os
import random
import uuid

from hypothesis import given, settings
from hypothesis import strategies as st

from client.ids import new_message_id


def test_ids_are_version_4_uuids():
    value = new_message_id()
    assert str(uuid.UUID(value)) == value and uuid.UUID(value).version == 4


def test_reseeding_the_random_module_does_not_repeat_ids():
    random.seed(0)
    first = [new_message_id() for _ in range(3)]
    random.seed(0)
    assert not set(first) & {new_message_id() for _ in range(3)}


def test_drawing_an_id_leaves_the_random_module_as_it_was():
    # Hypothesis warns when it changes while a strategy draws (a client's IO thread).
    before = random.getstate()
    new_message_id()
    assert random.getstate() == before


def test_each_hypothesis_example_gets_ids_of_its_own():
    # Hypothesis seeds the random module alike for every example.
    seen = []

    @settings(max_examples=20, database=None)
    @given(st.integers())
    def draw(_):
        seen.append(new_message_id())

    draw()
    assert len(set(seen)) == len(seen) == 20


def test_a_forked_child_draws_other_ids():
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.write(write, new_message_id().encode())
        os._exit(0)
    os.close(write)
    child = os.read(read, 64).decode()
    os.close(read)
    os.waitpid(pid, 0)
    assert child != new_message_id()
