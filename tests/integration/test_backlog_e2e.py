"""The per-session backlog bound over real sockets: a frozen consumer, a fast one."""

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from client import Client

from ..conftest import start_broker

PEER = Path(__file__).with_name("peer_process.py")
BOUND = 1 << 20
TEN_KB = "x" * 10_000


@pytest.fixture
def bounded_broker(short_tmp):
    proc = start_broker(short_tmp, "--max-backlog-bytes", str(BOUND))
    yield proc
    proc.stop()


def test_a_frozen_consumer_gets_refusals_not_memory_and_loses_nothing_it_was_sent(bounded_broker):
    consumer = subprocess.Popen([sys.executable, str(PEER), bounded_broker.endpoint, "frozen", "print"],
                                stdout=subprocess.PIPE, text=True)
    try:
        consumer_id = consumer.stdout.readline().strip()
        assert consumer_id
        producer = Client.connect("producer", endpoint=bounded_broker.endpoint, timeout=15)
        os.kill(consumer.pid, signal.SIGSTOP)
        delivered, refusal = [], None
        for n in range(1000):
            answer = producer.intercom(action="send", to=consumer_id, message=TEN_KB)
            if not answer["ok"]:
                refusal = answer
                break
            delivered.append(answer["messageId"] if "messageId" in answer else None)
        assert refusal is not None and refusal["code"] == "target_backlogged", refusal
        # Refused once about the bound was unread (frames in flight count as unread).
        assert BOUND // 10_000 - 30 <= len(delivered) <= 2 * BOUND // 10_000, len(delivered)
        os.kill(consumer.pid, signal.SIGCONT)
        received = []
        deadline = time.monotonic() + 20
        while len(received) < len(delivered) and time.monotonic() < deadline:
            line = consumer.stdout.readline()
            if not line:
                break
            received.append(line.strip())
        assert len(received) == len(delivered)       # everything answered delivered arrived
        producer.close()
    finally:
        os.kill(consumer.pid, signal.SIGCONT)
        consumer.kill()
        consumer.wait(10)


def test_a_consumer_that_keeps_reading_is_never_refused(bounded_broker):
    producer = Client.connect("producer", endpoint=bounded_broker.endpoint, timeout=15)
    consumer = Client.connect("consumer", endpoint=bounded_broker.endpoint, timeout=15)
    total = 20 * BOUND // len(TEN_KB)           # twenty times the bound goes through
    got = []

    def read():
        while len(got) < total:
            msg = consumer.receive(timeout=10)
            if msg is None:
                return
            got.append(msg["id"])

    reader = threading.Thread(target=read)
    reader.start()
    refused = []
    for n in range(total):
        answer = producer.intercom(action="send", to=consumer.id, message=TEN_KB)
        if not answer["ok"]:
            refused.append(answer["code"])
            break
    reader.join(30)
    assert refused == [] and len(got) == total
    producer.close(), consumer.close()
