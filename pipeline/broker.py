"""Builds WorkerPool's Dramatiq broker and its middleware stack from the settings.

The broker must exist before the actors are declared (they bind to it at import), so
``actors/__init__.py`` calls :func:`install` first; kickoff calls it earlier with the URL of the
Redis it started.
"""

from __future__ import annotations

import base64
import functools
import json
import logging
import os
import re
import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import dramatiq
import redis
import tenacity
from dramatiq.brokers.redis import RedisBroker
from dramatiq.errors import BrokerConnectionError
from dramatiq.middleware import Callbacks, CurrentMessage, Pipelines, TimeLimit
from dramatiq.rate_limits.backends import RedisBackend

from . import wakeup
from .consumer import GuardedConsumer, _Held, refill_batch
from .errors import RedisUnavailable
from .ledger import RunLedger, now_ms
from .middleware import (
    DurableRetries,
    GracefulShutdown,
    GroupCallbacksAtAck,
    MalformedMessages,
    PoisonGuard,
    Watchdog,
)
from .middleware.poison import DELIVERIES
from .scripts import script
from .settings import Settings

logger = logging.getLogger("pipeline.broker")

NAMESPACE = "dramatiq"
#: The queues of the three actors, in the order of the data flow.
QUEUES = ("discover", "fetch", "summary")
HEARTBEATS = f"{NAMESPACE}:__heartbeats__"
QUARANTINE = "wp:quarantine"
QUARANTINE_MSGS = "wp:quarantine:msgs"
_CONNECTION_ERRORS = (
    redis.ConnectionError,
    redis.TimeoutError,
    redis.BusyLoadingError,
    BrokerConnectionError,
)
#: How long an enqueue keeps trying through a Redis outage before it gives up.
_ENQUEUE_PATIENCE_S = 30
_RUN_ID = re.compile(rb"[0-9]{8}T[0-9]{6}Z-[0-9a-f]{4,12}")

# KEYS: acks, msgs.  ARGV: the payload, or a string in it; 'exact' or 'contains'.
# Finds one message this process fetched and returns {redis id, payload}. It is taken out of the
# queue in the same transaction that writes its quarantine record (WorkerPoolBroker.quarantine).
_FIND_IN_ACKS = """
for _, id in ipairs(redis.call('smembers', KEYS[1])) do
  local data = redis.call('hget', KEYS[2], id)
  if data and ((ARGV[2] == 'exact' and data == ARGV[1])
               or (ARGV[2] == 'contains' and string.find(data, ARGV[1], 1, true))) then
    return {id, data}
  end
end
return false
"""

# KEYS: acks, queue, msgs.  ARGV: the queue's wake-up channel, then ids still held by this process.
_REQUEUE_STRANDED = """
local keep = {}
for i = 2, #ARGV do keep[ARGV[i]] = true end
local n = 0
for _, id in ipairs(redis.call('smembers', KEYS[1])) do
  if not keep[id] then
    redis.call('srem', KEYS[1], id)
    if redis.call('hexists', KEYS[3], id) == 1 then
      redis.call('rpush', KEYS[2], id)
      n = n + 1
    end
  end
end
if n > 0 then redis.pcall('publish', ARGV[1], '') end
return n
"""

# KEYS: heartbeats, acks, msgs, deliveries[, group barrier, its events].
# ARGV: now ms, broker id, redis message id, message id[, barrier ttl ms].
# Dramatiq's ack (heartbeat, then out of the acks set and the queue), the poison guard's "this
# delivery finished" and the group barrier's decrement, in one round trip where they were three.
# Returns 2 when the message was its group's last member (as Dramatiq's Barrier counts), else 1.
_ACK_FINISHED = """
redis.call('zadd', KEYS[1], ARGV[1], ARGV[2])
if redis.call('srem', KEYS[2], ARGV[3]) > 0 then redis.call('hdel', KEYS[3], ARGV[3]) end
redis.call('hdel', KEYS[4], ARGV[4])
if KEYS[5] then
  local value = tonumber(redis.call('get', KEYS[5]) or '0') - 1
  if value < 1 then
    redis.call('rpush', KEYS[6], 'x')
    redis.call('pexpire', KEYS[6], ARGV[5])
    return 2
  end
  redis.call('set', KEYS[5], value, 'PX', ARGV[5])
end
return 1
"""

# KEYS: heartbeats.  ARGV: now ms, broker id, namespace, wake-up channel prefix, then
# (queue, redis id, payload) triples.
# Dramatiq's "enqueue" dispatch for one or many messages, announcing each queue it makes
# non-empty to idle consumers (pipeline.wakeup). Announcements use pcall here and below: a Redis
# user without pub/sub rights (ACL) still enqueues, and its workers poll.
_ENQUEUE = """
redis.call('zadd', KEYS[1], ARGV[1], ARGV[2])
for i = 5, #ARGV, 3 do
  local queue = ARGV[3] .. ':' .. ARGV[i]
  redis.call('hset', queue .. '.msgs', ARGV[i + 1], ARGV[i + 2])
  if redis.call('rpush', queue, ARGV[i + 1]) == 1 then redis.pcall('publish', ARGV[4] .. ARGV[i], '') end
end
return (#ARGV - 4) / 3
"""

# KEYS: heartbeats.  ARGV: namespace, cutoff (ms), wake-up channel prefix, queue names...
# Dramatiq does this too, but only on a 0.1 % lottery per command: minutes to hours when idle.
# The messages go back to the head of their queue (LPUSH), not its tail: they had already
# waited their turn once, and behind a crawl's backlog they would wait it again (the fault
# tests measured 20 s more before a dead worker's jobs settled with only 200 jobs queued).
_RECLAIM = """
local dead = redis.call('zrangebyscore', KEYS[1], '-inf', ARGV[2])
local moved = 0
for _, worker in ipairs(dead) do
  for i = 4, #ARGV do
    local queue = ARGV[1] .. ':' .. ARGV[i]
    local acks = ARGV[1] .. ':__acks__.' .. worker .. '.' .. ARGV[i]
    local before = moved
    for _, id in ipairs(redis.call('smembers', acks)) do
      if redis.call('hexists', queue .. '.msgs', id) == 1 then
        redis.call('lpush', queue, id)
        moved = moved + 1
      end
    end
    if moved > before then redis.pcall('publish', ARGV[3] .. ARGV[i], '') end
    redis.call('del', acks)
  end
  redis.call('zrem', KEYS[1], worker)
end
return {#dead, moved}
"""


_OUTAGE_RETRYING = tenacity.Retrying(
    retry=tenacity.retry_if_exception_type(_CONNECTION_ERRORS),
    wait=tenacity.wait_exponential(multiplier=0.2, max=5),
    stop=tenacity.stop_after_delay(_ENQUEUE_PATIENCE_S),
    before_sleep=lambda state: logger.warning(
        "Redis unavailable, retrying",
        extra={"attempt": state.attempt_number, "error": repr(state.outcome.exception())},
    ),
    reraise=True,
)

_F = TypeVar("_F", bound=Callable[..., Any])


def ride_out_redis_outage(func: _F) -> _F:
    """Rides out a Redis restart: every enqueue (kickoff, retries, pipelines, groups) and barrier creation.

    The first attempt is a plain call: tenacity's per-call bookkeeping (a copy of its state) cost
    4 % of a worker's CPU when every call paid it.
    """

    @functools.wraps(func)
    def call(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except _CONNECTION_ERRORS:
            pass
        return _OUTAGE_RETRYING.copy()(func, *args, **kwargs)

    return call  # type: ignore[return-value]


class BarrierBackend(RedisBackend):
    """The group-completion barrier's backend, outage-proof. Members are counted in their ack
    (:class:`~pipeline.middleware.GroupCallbacksAtAck`); this creates the barrier."""

    @ride_out_redis_outage
    def add(self, key: str, value: int, ttl: int) -> bool:
        return super().add(key, value, ttl)


class WorkerPoolBroker(RedisBroker):
    """A RedisBroker with a guarded consumer, quarantine and prompt reclaim of dead workers."""

    def __init__(self, settings: Settings, **kwargs: object) -> None:
        super().__init__(
            url=settings.redis_url,
            namespace=NAMESPACE,
            heartbeat_timeout=settings.heartbeat_timeout_ms,
            **kwargs,
        )
        self.settings = settings
        self.max_message_bytes = settings.max_message_bytes
        self.held = _Held()
        self.wakeups = wakeup.Wakeups(settings.redis_url, self.all_queue_names())
        self._ledger_client: redis.Redis | None = None
        self._ledger_client_lock = threading.Lock()
        self._batch = threading.local()
        #: redis message id -> (barrier key, callbacks, ttl ms) of a group member to count at its ack
        self.barriers_at_ack: dict[str, tuple[str, list[dict], int]] = {}
        self._keys_by_queue: dict[str, tuple[str, str, str]] = {}

    def _keys(self, queue_name: str) -> tuple[str, str, str]:
        """Dramatiq's keys of a queue for this process: (its acks set, the queue, its messages hash).

        Built once per queue: the ack of every page uses them.
        """
        keys = self._keys_by_queue.get(queue_name)
        if keys is None:
            queue = f"{NAMESPACE}:{queue_name}"
            acks = f"{NAMESPACE}:__acks__.{self.broker_id}.{queue_name}"
            keys = self._keys_by_queue[queue_name] = (acks, queue, queue + ".msgs")
        return keys

    @property
    def consumer_class(self) -> type[GuardedConsumer]:
        return GuardedConsumer

    def do_fetch(self, queue_name: str, count: int) -> list[bytes]:
        """Fetch a batch for a consumer, quarantining oversized payloads before anything decodes them."""
        batch = self._dispatch("fetch")(queue_name, count)
        kept = []
        for data in batch:
            if data is not None and len(data) > self.max_message_bytes:
                reason = f"message of {len(data)} bytes exceeds MAX_MESSAGE_BYTES ({self.max_message_bytes})"
                self.quarantine(queue_name, reason, raw=data)
            else:
                kept.append(data)
        return kept

    def consume(self, queue_name: str, prefetch: int = 1, timeout: int = 5000) -> GuardedConsumer:
        # Dramatiq prefetches 2 x threads, and the count includes running jobs: a process then
        # hoards slow downloads while others idle. One message per thread plus one refill batch
        # (see GuardedConsumer) keeps every thread busy without that.
        if not queue_name.endswith(".DQ") and not os.getenv("dramatiq_queue_prefetch"):  # noqa: SIM112 - Dramatiq's name
            threads = max(1, prefetch // 2)
            batch = refill_batch(threads)
            return self.consumer_class(self, queue_name, threads + batch, timeout, batch=batch)
        return super().consume(queue_name, prefetch, timeout)

    @ride_out_redis_outage
    def enqueue(self, message: dramatiq.Message, *, delay: int | None = None) -> dramatiq.Message:
        """Enqueue, riding out a Redis restart: used by kickoff, retries, pipelines and groups alike."""
        return super().enqueue(message, delay=delay)

    def do_enqueue(self, queue_name: str, redis_message_id: str, payload: bytes) -> None:
        pending = getattr(self._batch, "pending", None)
        if pending is None:
            self._push([queue_name, redis_message_id, payload])
        else:
            pending += [queue_name, redis_message_id, payload]

    @contextmanager
    def batched_enqueues(self) -> Iterator[None]:
        """Enqueues made by this thread inside the block go to Redis in one round trip at its end.

        A country's group of 20 downloads cost 20 round trips (5 % of a worker's CPU) before.
        If the block raises, nothing is enqueued.
        """
        self._batch.pending = []
        try:
            yield
            pending = self._batch.pending
        finally:
            self._batch.pending = None
        if pending:
            ride_out_redis_outage(self._push)(pending)

    def _push(self, triples: list[str | bytes]) -> None:
        """Enqueue (queue, redis id, payload) triples in one round trip."""
        args = [now_ms(), self.broker_id, NAMESPACE, wakeup.CHANNEL_PREFIX, *triples]
        script(self.client, _ENQUEUE)([HEARTBEATS], args)

    def discovery_pipeline(self, run_id: str, country: str) -> dramatiq.pipeline:
        """discover_country, then summarize: a country whose discovery fails, or that has no
        jobs, still reaches the completion check."""
        return dramatiq.pipeline(
            [
                self.get_actor("discover_country").message(run_id, country),
                self.get_actor("summarize").message_with_options(args=(run_id, country), pipe_ignore=True),
            ],
            broker=self,
        )

    def run_complete(self, run_id: str) -> None:
        """The ledger says a run is complete: have its summary written."""
        self.get_actor("summarize").send(run_id)

    @property
    def ledger_client(self) -> redis.Redis:
        """A text-mode client on the same Redis, for WorkerPool's own keys."""
        if self._ledger_client is None:
            with self._ledger_client_lock:
                if self._ledger_client is None:
                    self._ledger_client = redis.Redis.from_url(self.settings.redis_url, decode_responses=True)
        return self._ledger_client

    def ledger(self, run_id: str) -> RunLedger:
        return RunLedger(self.ledger_client, run_id)

    def all_queue_names(self) -> list[str]:
        return [name for q in QUEUES for name in (q, f"{q}.DQ")]

    def quarantine(
        self, queue_name: str, reason: str, *, raw: bytes | None = None, message_id: str | None = None
    ) -> str:
        """Move a message that cannot run out of the queue, keeping its raw bytes.

        The message is one this process fetched: found in its acks set by its exact ``raw``
        payload, or, when only the decoded message is at hand, by its ``message_id``.
        """
        acks, _, msgs = self._keys(queue_name)
        needle, mode = (raw, "exact") if raw is not None else (message_id or "", "contains")
        found = script(self.client, _FIND_IN_ACKS)([acks, msgs], [needle, mode])
        if raw is None:
            raw = found[1] if found else b""
        # Named after the message: one that comes back (the transaction below failed) keeps one record.
        record_id = found[0].decode() if found else uuid.uuid4().hex
        match = _RUN_ID.search(raw[:4096])
        run_id = match.group().decode() if match else None
        try:
            text, encoding = raw.decode("utf-8"), "utf-8"
        except UnicodeDecodeError:
            text, encoding = base64.b64encode(raw).decode(), "base64"
        record = {
            "id": record_id,
            "kind": "quarantined",
            "queue": queue_name,
            "reason": reason,
            "at": now_ms(),
            "run_id": run_id,
            "raw": text,
            "raw_encoding": encoding,
            "bytes": len(raw),
        }
        # One transaction: a Redis restart between taking the message out of the queue and
        # writing its record lost the message (the chaos test caught it).
        with self.client.pipeline(transaction=True) as pipe:
            pipe.hset(QUARANTINE_MSGS, record_id, json.dumps(record))
            pipe.zadd(QUARANTINE, {record_id: record["at"]})
            if found:
                pipe.srem(acks, found[0])
                pipe.hdel(msgs, found[0])
            pipe.execute()
        if run_id:
            self.ledger(run_id).reject(record_id, {k: v for k, v in record.items() if k != "raw"})
        logger.error(
            "quarantined a malformed message",
            extra={"queue": queue_name, "reason": reason, "quarantine_id": record_id, "run_id": run_id},
        )
        return record_id

    def ack_finished(self, queue_name: str, redis_message_id: str, message_id: str) -> None:
        """Ack a message this process fetched, clear its poison-guard delivery count, and count it
        in its group's barrier (noted by GroupCallbacksAtAck), enqueueing the group's callbacks
        when it was the last member."""
        acks, _, msgs = self._keys(queue_name)
        keys = [HEARTBEATS, acks, msgs, DELIVERIES]
        args: list[object] = [now_ms(), self.broker_id, redis_message_id, message_id]
        group = self.barriers_at_ack.pop(redis_message_id, None)
        if group is not None:
            barrier, callbacks, ttl = group
            keys += [barrier, barrier + "@events"]  # the keys of Dramatiq's Barrier
            args.append(ttl)
        if script(self.client, _ACK_FINISHED)(keys, args) == 2 and group is not None:
            for callback in callbacks:
                self.enqueue(dramatiq.Message(**callback))

    def requeue_stranded(self, queue_name: str, keep: set[str]) -> int:
        keys = list(self._keys(queue_name))
        return int(script(self.client, _REQUEUE_STRANDED)(keys, [wakeup.channel(queue_name), *keep]))

    def reclaim_dead_workers(self) -> tuple[int, int]:
        """Put back the unfinished messages of workers silent for ``heartbeat_timeout``.

        Returns (dead workers, messages put back).
        """
        cutoff = now_ms() - self.heartbeat_timeout
        dead, moved = script(self.client, _RECLAIM)(
            [HEARTBEATS],
            [NAMESPACE, cutoff, wakeup.CHANNEL_PREFIX, *self.all_queue_names()],
        )
        return int(dead), int(moved)


def redact(url: str) -> str:
    """A Redis URL without its password, for messages and logs."""
    return re.sub(r"(//[^:/@]*:)[^@]*@", r"\1***@", url)


def build_broker(settings: Settings) -> WorkerPoolBroker:
    """The broker with WorkerPool's middleware, in the order their hooks must run."""
    broker = WorkerPoolBroker(settings, middleware=[])
    backend = BarrierBackend(url=settings.redis_url)
    for middleware in (
        MalformedMessages(settings),
        PoisonGuard(redelivery_limit=settings.redelivery_limit),
        # A safety net only: downloads end by their own deadline, and an interrupt can kill a
        # worker thread (Dramatiq issue 445).
        TimeLimit(time_limit=max(300_000, int(settings.total_timeout * 1000 * 5))),
        Callbacks(),
        Pipelines(),
        # A day is far more than a run's worst case: retries back off for at most a minute.
        GroupCallbacksAtAck(backend, barrier_ttl=7 * 86_400_000),
        DurableRetries(
            max_retries=settings.max_attempts - 1,
            min_backoff=settings.retry_min_backoff_ms,
            max_backoff=settings.retry_max_backoff_ms,
        ),
        CurrentMessage(),
        Watchdog(settings),
        GracefulShutdown(),
    ):
        broker.add_middleware(middleware)
    return broker


_installed: WorkerPoolBroker | None = None


def install(settings: Settings) -> WorkerPoolBroker:
    """Build the broker once per process and make it Dramatiq's global broker.

    Raises:
        RedisUnavailable: REDIS_URL is unset or Redis does not answer (a worker started against
            the wrong URL says so at once instead of retrying forever).
    """
    global _installed
    if _installed is None:
        if not settings.redis_url:
            raise RedisUnavailable(
                "REDIS_URL is not set",
                hint="workers need the Redis of the run: set REDIS_URL, or use kickoff --local",
            )
        broker = build_broker(settings)
        try:
            broker.ledger_client.ping()
        except redis.RedisError as e:
            raise RedisUnavailable(f"cannot reach Redis at {redact(settings.redis_url)}: {e}") from None
        _installed = broker
        dramatiq.set_broker(_installed)
    return _installed
