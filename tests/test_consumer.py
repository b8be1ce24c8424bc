"""The guarded consumer's round trips, on a real Redis with an in-process Dramatiq worker.

It refills its prefetch a batch at a time (Dramatiq fetches after every ack), and a group
member's barrier decrement rides in its ack (Dramatiq spends a round trip of its own).
"""

from __future__ import annotations

import time

import dramatiq
import pytest
from conftest import make_settings

from pipeline.broker import WorkerPoolBroker, build_broker


def no_schema_check(args, kwargs, settings) -> None:
    return None


@pytest.fixture
def broker(redis_server, tmp_path):
    broker = build_broker(make_settings(redis_url=redis_server.url, output_dir=tmp_path))
    yield broker
    broker.close()


def run_worker_until(broker: WorkerPoolBroker, done, *, threads: int, timeout: float = 30) -> None:
    worker = dramatiq.Worker(broker, worker_threads=threads, worker_timeout=50)
    worker.start()
    try:
        deadline = time.monotonic() + timeout
        while not done():
            assert time.monotonic() < deadline, "the messages were not all processed in time"
            time.sleep(0.02)
    finally:
        worker.stop()


def test_the_consumer_refills_a_batch_at_a_time(broker, monkeypatch):
    client = broker.ledger_client

    @dramatiq.actor(broker=broker, queue_name="fetch", schema=no_schema_check)
    def slow(i: int) -> None:
        time.sleep(0.02)
        client.incr("test:done")

    fetched: list[int] = []
    do_fetch = broker.do_fetch

    def counting_fetch(queue_name, count):
        batch = do_fetch(queue_name, count)
        if queue_name == "fetch" and batch:
            fetched.append(len(batch))
        return batch

    monkeypatch.setattr(broker, "do_fetch", counting_fetch)
    for i in range(200):
        slow.send(i)
    run_worker_until(broker, lambda: int(client.get("test:done") or 0) == 200, threads=8)

    assert sum(fetched) == 200
    # 8 threads: 10 at first (threads + a batch of 2), then batches of 2 or more: 80-85 fetches
    # measured. Dramatiq alone fetches after every ack: 146 measured.
    assert len(fetched) <= 110, f"{len(fetched)} fetches for 200 messages: {fetched}"


def test_a_groups_callback_runs_once_after_its_last_members_ack(broker):
    client = broker.ledger_client

    @dramatiq.actor(broker=broker, queue_name="fetch", schema=no_schema_check)
    def member(i: int) -> None:
        time.sleep(0.01 * (i % 3))
        client.rpush("test:members", i)

    @dramatiq.actor(broker=broker, queue_name="summary", schema=no_schema_check)
    def completed(label: str) -> None:
        client.rpush("test:callbacks", f"{label} after {client.llen('test:members')} members")

    group = dramatiq.group([member.message(i) for i in range(30)], broker=broker)
    group.add_completion_callback(completed.message("group"))
    group.run()
    run_worker_until(broker, lambda: client.llen("test:callbacks") >= 1, threads=8)
    time.sleep(0.3)  # a second callback, if there were one, would have run by now

    assert client.lrange("test:callbacks", 0, -1) == ["group after 30 members"]
    assert not broker.barriers_at_ack, "every member's barrier was counted in its ack"
    # Every member was acked: nothing left in the worker's acks set or the queue's messages.
    assert client.hlen("dramatiq:fetch.msgs") == 0
