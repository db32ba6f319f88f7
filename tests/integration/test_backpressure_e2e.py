"""Pipelined senders wait for a backlogged consumer that reads; a blocking send is refused.

The broker bounds what one session may leave unread (``--max-backlog-bytes``). A
pipelined send past that bound is held by the client and sent again under the same
id while the consumer drains (client.backpressure), so fast producers see no
refusal; the blocking tool call still answers ``target_backlogged`` when the
consumer has stopped reading.
"""

from __future__ import annotations

import json
import threading

import pytest

from client import Client

from ..conftest import start_broker

BOUND = 1 << 20                   # crossed several times over below
PRODUCERS = 4
PER_PRODUCER = 1500
BODY = "y" * 1000                 # 4 x 1,500 x 1 KB: about 6 times the bound


@pytest.fixture
def bounded_broker(short_tmp):
    proc = start_broker(short_tmp, "--max-backlog-bytes", str(BOUND))
    yield proc
    proc.stop()


def broker_counters(broker) -> dict:
    """The counters a stopped broker logged (``broker_stopping``)."""
    (line,) = [line for line in broker.log.read_text(errors="replace").splitlines()
               if '"broker_stopping"' in line]
    return json.loads(line)


def connect(broker, name: str):
    return Client.connect(name, endpoint=broker.endpoint, timeout=15)


@pytest.mark.timeout(90)
def test_four_pipelined_producers_to_a_reading_consumer_see_no_refusal_and_lose_nothing(
        bounded_broker):
    consumer = connect(bounded_broker, "consumer")
    producers = [connect(bounded_broker, f"producer-{p}") for p in range(PRODUCERS)]
    total = PRODUCERS * PER_PRODUCER
    got: list[dict] = []

    def read() -> None:
        while len(got) < total:
            msg = consumer.receive(timeout=15)
            if msg is None:
                return
            got.append(msg)

    answers: list[list[dict]] = [[] for _ in producers]

    def produce(p: int) -> None:
        futures = [producers[p].send_nowait(consumer.id, f"{p}:{n:05d}:{BODY}")
                   for n in range(PER_PRODUCER)]
        answers[p] = [future.result(60) for future in futures]

    threads = [threading.Thread(target=read)] + \
        [threading.Thread(target=produce, args=(p,)) for p in range(PRODUCERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(80)
    refused = [a for per in answers for a in per if not a["ok"]]
    assert refused == [], refused[:3]
    assert sum(len(per) for per in answers) == total
    assert len(got) == total and len({m["id"] for m in got}) == total    # each once
    for p in range(PRODUCERS):             # each producer's messages in its order
        mine = [m["message"][:7] for m in got if m["message"].startswith(f"{p}:")]
        assert mine == [f"{p}:{n:05d}" for n in range(PER_PRODUCER)]
    for session in [consumer, *producers]:
        session.close()
    bounded_broker.stop()
    # The bound was met (the test exercised the wait), and nothing was refused for good.
    counters = broker_counters(bounded_broker)
    assert counters.get("backlog.refused", 0) > 0, counters
    assert counters.get("sessions.not_reading", 0) == 0, counters


@pytest.mark.timeout(60)
def test_a_blocking_send_to_a_consumer_that_stopped_reading_is_refused_target_backlogged(
        bounded_broker):
    consumer = Client.connect("stopped", endpoint=bounded_broker.endpoint, timeout=15,
                              inbox_limit_bytes=16 << 10)     # never calls receive
    producer = connect(bounded_broker, "producer")
    refusal = None
    for _ in range(4 * BOUND // len(BODY)):
        answer = producer.intercom(action="send", to=consumer.id, message=BODY)
        if not answer["ok"]:
            refusal = answer
            break
    assert refusal is not None and refusal["code"] == "target_backlogged", refusal
    # A pipelined send meanwhile is held, not refused, and goes once the consumer reads.
    waiting = producer.send_nowait(consumer.id, "after")
    while True:
        msg = consumer.receive(timeout=15)
        assert msg is not None, "the held send never arrived"
        if msg["message"] == "after":
            break
    assert waiting.result(15)["ok"]
    producer.close(), consumer.close()
