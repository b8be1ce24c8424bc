"""The Redis consumer that guards a worker against bad payloads and Redis restarts.

Dramatiq's Redis consumer has two holes this closes (see shared/docs/dramatiq-notes.md):

* An undecodable payload raises out of ``__next__``: the consumer restarts, the poison id stays
  in the worker's acks set forever and the good messages fetched in the same batch are stranded.
  Here the payload (and any oversized one) is moved to quarantine with its raw bytes and a
  reason, and the rest of the batch is served.
* After a connection error (a Redis restart) the worker drops its in-memory delay queue and
  fetch cache, while their ids stay in its acks set, which it keeps heartbeating: those messages
  never come back (Dramatiq issue 527). Each new consumer of a queue therefore puts back every id
  of its own acks set that is not held by a running job.

It also spends fewer round trips than Dramatiq's: it refills its prefetch a batch at a time
instead of after every message, and its ack is one script that also clears the poison guard's
delivery count and counts the message in its group's barrier. And when its queue is empty it
waits for an announcement of new work (pipeline.wakeup) rather than sleeping until its next
poll; a delay queue's consumer also wakes when its earliest message is due.

This subclasses Dramatiq's private ``_RedisConsumer``; re-check it when upgrading Dramatiq.
"""

from __future__ import annotations

import heapq
import logging
import threading
from typing import TYPE_CHECKING

import redis
from dramatiq.brokers.redis import _RedisConsumer
from dramatiq.common import compute_backoff, current_millis
from dramatiq.errors import ConnectionClosed, DecodeError

from .middleware.deadletter import record_dead_letter
from .middleware.poison import DELIVERIES

if TYPE_CHECKING:
    from dramatiq import MessageProxy

    from .broker import WorkerPoolBroker

logger = logging.getLogger("pipeline.consumer")


class _Held:
    """Ids of messages handed to this process's worker threads or delay queue, per queue."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.ids: dict[str, set[str]] = {}
        self.lost_connection: set[str] = set()
        self.started: set[str] = set()


def refill_batch(threads: int) -> int:
    """Messages fetched together once running ones finish: a quarter of the threads."""
    return max(1, threads // 4)


#: Longest the consumer waits for a full refill batch before it fetches what is missing.
REFILL_WAIT_S = 0.05


class GuardedConsumer(_RedisConsumer):
    def __init__(
        self, broker: WorkerPoolBroker, queue_name: str, prefetch: int, timeout: int, *, batch: int = 1
    ) -> None:
        super().__init__(broker, queue_name, prefetch, timeout)
        # Dramatiq sleeps out its idle backoff itself; here it waits instead (see _idle).
        self.idle_timeout_ms, self.timeout = timeout, 0
        #: Delay queue only: the etas (ms) of the messages handed out, earliest first.
        self.etas: list[int] = []
        # Dramatiq fetches as soon as one message is acked: a fetch round trip per message.
        # Given ``batch`` more than its threads, it refills a batch at a time instead.
        self.batch = batch
        self.finished = threading.Condition()
        self.held: _Held = broker.held
        with self.held.lock:
            restarted = queue_name in self.held.started
            self.held.started.add(queue_name)
            held = self.held.ids.setdefault(queue_name, set())
            if queue_name in self.held.lost_connection and queue_name.endswith(".DQ"):
                # The worker replaced its delay queue: nothing held there survived.
                held.clear()
            self.held.lost_connection.discard(queue_name)
            keep = set(held)
        if restarted:
            returned = broker.requeue_stranded(queue_name, keep)
            if returned:
                logger.warning(
                    "put back %d message(s) stranded by a consumer restart",
                    returned,
                    extra={"queue": queue_name, "count": returned},
                )

    def __next__(self) -> MessageProxy | None:
        if not self.message_cache and self.prefetch - self.outstanding_message_count < self.batch:
            with self.finished:  # every thread still has work: let a batch finish first
                self.finished.wait(REFILL_WAIT_S)
            if self.prefetch - self.outstanding_message_count < self.batch:
                return None
        try:
            proxy = super().__next__()
        except DecodeError as e:
            self._quarantine(e.data, f"undecodable payload: {e.error}")
            return None
        except ConnectionClosed:
            with self.held.lock:
                self.held.lost_connection.add(self.queue_name)
            raise
        if proxy is None:  # it fetched (the check above left room) and found the queue empty
            self._idle()
            return None
        if "redis_message_id" not in proxy.options:
            # Not enqueued by Dramatiq: without its Redis id it could never be acked.
            reason = "message has no options.redis_message_id: it was not enqueued by Dramatiq"
            self.broker.quarantine(self.queue_name, reason, message_id=proxy.message_id)
            return None
        with self.held.lock:
            self.held.ids[self.queue_name].add(proxy.options["redis_message_id"])
        eta = proxy.options.get("eta")
        if eta is not None:
            heapq.heappush(self.etas, int(eta))
        elif proxy.actor_name not in self.broker.actors:
            # Dramatiq dead-letters it (ActorNotFound) before any middleware sees it, and
            # keeps no reason: record one, as for every other dead letter. (A delayed one
            # is checked when it comes out of the delay queue.)
            record_dead_letter(self.broker, proxy, f"unknown actor {proxy.actor_name!r}")
        return proxy

    def _idle(self) -> None:
        """Wait, with Dramatiq's growing backoff, for work to be announced or a delayed message to be due.

        The worker moves due delayed messages to their queue only between two calls of
        ``__next__``, so this returns at once when one is due.
        """
        _, wait_ms = compute_backoff(self.misses - 1, max_backoff=self.idle_timeout_ms)
        if self.etas:
            now = current_millis()
            if self.etas[0] <= now:
                while self.etas and self.etas[0] <= now:
                    heapq.heappop(self.etas)
                return
            wait_ms = min(wait_ms, self.etas[0] - now + 1)
        self.broker.wakeups.wait(self.queue_name, wait_ms / 1000)

    def ack(self, message: MessageProxy) -> None:
        self._release(message)
        if self.queue_name.endswith(".DQ"):
            # Moved from the delay queue to its queue, where it may already run: its delivery
            # count is not ours to clear.
            super().ack(message)
            return
        try:
            self.broker.ack_finished(self.queue_name, message.options["redis_message_id"], message.message_id)
        except redis.ConnectionError as e:
            raise ConnectionClosed(e) from None
        finally:
            self.queued_message_ids.discard(message.message_id)

    def nack(self, message: MessageProxy) -> None:
        self._release(message)
        self.broker.barriers_at_ack.pop(message.options.get("redis_message_id"), None)
        super().nack(message)
        if not self.queue_name.endswith(".DQ"):
            self.broker.ledger_client.hdel(DELIVERIES, message.message_id)

    def requeue(self, messages: list[MessageProxy]) -> None:
        for message in messages:
            self._release(message)
        super().requeue(messages)

    def close(self) -> None:
        """Put back what this consumer fetched but never handed out, then close.

        A stopping worker (graceful shutdown, consumer restart) requeues its work and delay
        queues, but not the rest of the consumer's fetch cache: those ids stayed in the acks set
        of a worker that was gone, until the heartbeat reclaim. The SIGTERM fault test caught
        one. Held ids (running, queued for a thread, delayed) are left to Dramatiq.
        """
        with self.held.lock:
            keep = set(self.held.ids.get(self.queue_name, ()))
        try:
            returned = self.broker.requeue_stranded(self.queue_name, keep)
        except Exception as e:  # Redis down: the next consumer (or the reclaim) puts them back
            logger.warning(
                "could not put back unserved messages", extra={"queue": self.queue_name, "error": repr(e)}
            )
        else:
            if returned:
                logger.info(
                    "put back %d fetched message(s) never served",
                    returned,
                    extra={"queue": self.queue_name, "count": returned},
                )
        super().close()

    def _release(self, message: MessageProxy) -> None:
        with self.held.lock:
            self.held.ids.get(self.queue_name, set()).discard(message.options.get("redis_message_id"))
        with self.finished:
            self.finished.notify()

    def _quarantine(self, data: bytes | str, reason: str) -> None:
        raw = data.encode("utf-8", "surrogateescape") if isinstance(data, str) else bytes(data)
        self.broker.quarantine(self.queue_name, reason, raw=raw)
