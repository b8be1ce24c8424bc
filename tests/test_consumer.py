"""The guarded consumer's round trips, on a real Redis with an in-process Dramatiq worker.

It refills its prefetch a batch at a time (Dramatiq fetches after every ack), and a group
member's barrier decrement rides in its ack (Dramatiq spends a round trip of its own).
"""

from __future__ import annotations

import threading
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


# --- waking idle consumers -------------------------------------------------------------------------

#: A consumer idle this long polls every 10 to 20 s (Dramatiq's backoff, capped at its timeout):
#: without a wake-up, none of the tests below could see their message in time.
IDLE_TIMEOUT_MS = 20_000


def idle_consumer(broker: WorkerPoolBroker, queue_name: str):
    consumer = broker.consume(queue_name, prefetch=2, timeout=IDLE_TIMEOUT_MS)
    consumer.misses = 30  # as after a long idle spell
    return consumer


def next_message_in_thread(consumer) -> tuple[threading.Thread, list]:
    """Calls ``next(consumer)`` until a message comes; the list gets it and the time it came."""
    got: list = []

    def loop() -> None:
        while (message := next(consumer)) is None:
            got.append(None)
        got.append((message, time.monotonic()))

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    return thread, got


def test_an_idle_consumer_wakes_as_soon_as_work_is_enqueued(broker):
    @dramatiq.actor(broker=broker, queue_name="fetch", schema=no_schema_check)
    def work(i: int) -> None:
        pass

    consumer = idle_consumer(broker, "fetch")
    thread, got = next_message_in_thread(consumer)
    time.sleep(0.5)  # the consumer has found its queue empty and waits
    assert got.count(None) <= 2, "the consumer should wait, not poll"
    sent = time.monotonic()
    work.send(1)
    thread.join(5)
    assert not thread.is_alive(), "the consumer did not wake up when its queue got work"
    message, when = got[-1]
    assert message.args == (1,)
    assert when - sent < 5
    consumer.close()


def test_a_delay_queue_consumer_wakes_when_its_message_is_due(broker):
    @dramatiq.actor(broker=broker, queue_name="fetch", schema=no_schema_check)
    def later(i: int) -> None:
        pass

    consumer = idle_consumer(broker, "fetch.DQ")
    later.send_with_options(args=(1,), delay=600)
    thread, got = next_message_in_thread(consumer)
    thread.join(5)
    message, _ = got[-1]
    eta = message.options["eta"]

    # The worker moves a due message to its queue between two calls of next(): a call must return
    # by the eta of the message handed out, not at the next poll 10 s later. (A call may return
    # earlier: a wake-up for nothing costs one poll.)
    consumer.misses = 30
    returns: list[int] = []

    def until_due() -> None:
        while not returns or returns[-1] < eta:
            assert next(consumer) is None
            returns.append(int(time.time() * 1000))

    waiter = threading.Thread(target=until_due, daemon=True)
    waiter.start()
    waiter.join(5)
    assert not waiter.is_alive(), "the delay queue's consumer slept past the eta of the message it holds"
    assert returns[-1] < eta + 1000
    assert len(returns) <= 3, f"polled {len(returns)} times instead of waiting for the eta"
    consumer.close()


def test_idle_consumers_still_wake_after_a_redis_restart(broker, redis_server):
    @dramatiq.actor(broker=broker, queue_name="fetch", schema=no_schema_check)
    def work(i: int) -> None:
        pass

    first = idle_consumer(broker, "fetch")
    thread, got = next_message_in_thread(first)
    time.sleep(0.3)  # the listener is subscribed
    redis_server.restart()
    time.sleep(2.5)  # the listener notices, waits a second and subscribes again
    assert thread.is_alive()
    work.send(2)
    thread.join(5)
    assert not thread.is_alive(), "no wake-up after Redis restarted"
    assert got[-1][0].args == (2,)
    first.close()


def test_a_redis_user_without_pub_sub_rights_still_enqueues_and_polls(redis_server, tmp_path, caplog):
    # Managed Redis often hands out ACL users with no channel rights (Redis 7's default for new
    # users): announcing work must never make an enqueue fail, and workers fall back to polling.
    redis_server.client().execute_command(
        "ACL", "SETUSER", "nopubsub", "on", ">pw", "~*", "resetchannels", "+@all"
    )
    url = f"redis://nopubsub:pw@127.0.0.1:{redis_server.port}/0"
    broker = build_broker(make_settings(redis_url=url, output_dir=tmp_path))
    try:

        @dramatiq.actor(broker=broker, queue_name="fetch", schema=no_schema_check)
        def work(i: int) -> None:
            pass

        work.send(1)  # one enqueue, announced: the PUBLISH inside the script is refused
        with broker.batched_enqueues():
            work.send(2)
        assert broker.ledger_client.llen("dramatiq:fetch") == 2

        consumer = broker.consume("fetch", prefetch=2, timeout=200)
        got = []
        deadline = time.monotonic() + 10
        while len(got) < 2 and time.monotonic() < deadline:
            if (message := next(consumer)) is not None:
                got.append(message.args[0])
        consumer.close()
        assert sorted(got) == [1, 2]
        consumer = broker.consume("fetch", prefetch=2, timeout=200)
        assert next(consumer) is None  # idle: waits (the listener is refused), then polls
        deadline = time.monotonic() + 5
        while "no wake-ups" not in caplog.text and time.monotonic() < deadline:
            time.sleep(0.05)
        assert "no wake-ups: this Redis user may not subscribe" in caplog.text
        consumer.close()
    finally:
        broker.close()
