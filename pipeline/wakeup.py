"""Wakes a worker's idle consumers as soon as work is enqueued, instead of at their next poll.

An idle Dramatiq Redis consumer polls with a backoff that grows to the worker timeout (1 s). So
every hop of a run that finds its queue idle waited up to a second: a run enqueued on an idle
fleet, the first downloads of the first country, the summary after the last page, a retry back
from the delay queue. Measured on the benchmark: the first ranking page was fetched 0.3 to 1 s
after kickoff.

Every enqueue that makes a queue non-empty publishes on the queue's channel (the broker's Lua
scripts do, in the same round trip). One thread per worker process listens and wakes that queue's
consumer. A notification lost (Redis restarting, the listener reconnecting) costs only the wait
it would have saved: the consumer still polls.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Iterable

import redis

logger = logging.getLogger("pipeline.wakeup")

#: The channel of queue ``q`` is ``CHANNEL_PREFIX + q``.
CHANNEL_PREFIX = "wp:wake:"
#: How long the listener waits after Redis went away before it listens again.
_RECONNECT_S = 1.0


def channel(queue_name: str) -> str:
    return CHANNEL_PREFIX + queue_name


class Wakeups:
    """Per queue, an event set when the queue's channel says work arrived.

    The listener thread starts on the first :meth:`wait` in each process: a worker process
    forked after the broker was built gets its own.
    """

    def __init__(self, url: str, queue_names: Iterable[str]) -> None:
        self.url = url
        self.queue_names = tuple(queue_names)
        self._events = {name: threading.Event() for name in self.queue_names}
        self._lock = threading.Lock()
        self._listening_pid: int | None = None  # a forked child does not inherit the thread

    def wait(self, queue_name: str, timeout_s: float) -> bool:
        """Block until work is announced on ``queue_name`` or ``timeout_s`` passed; True if announced."""
        event = self._events.get(queue_name)
        if event is None or timeout_s <= 0:
            return False
        self._listen()
        announced = event.wait(timeout_s)
        event.clear()  # cleared before the caller fetches: a later announcement is not lost
        return announced

    def _listen(self) -> None:
        if self._listening_pid != os.getpid():
            with self._lock:
                if self._listening_pid != os.getpid():
                    threading.Thread(target=self._run, name="wakeup-listener", daemon=True).start()
                    self._listening_pid = os.getpid()

    def _run(self) -> None:
        prefix = len(CHANNEL_PREFIX)
        client = redis.Redis.from_url(self.url)
        while True:
            pubsub = client.pubsub(ignore_subscribe_messages=True)
            try:
                pubsub.subscribe(*(channel(name) for name in self.queue_names))
                # Subscribed: whatever was enqueued while we were not may have no announcement.
                self._wake_all()
                while True:
                    message = pubsub.get_message(timeout=60.0)
                    if message is not None and message["type"] == "message":
                        event = self._events.get(message["channel"][prefix:].decode())
                        if event is not None:
                            event.set()
            except redis.exceptions.NoPermissionError as e:
                logger.warning(
                    "no wake-ups: this Redis user may not subscribe; idle workers poll instead",
                    extra={"error": str(e), "hint": "grant the channels wp:wake:* (ACL &wp:wake:*)"},
                )
                return
            except (redis.RedisError, OSError) as e:
                logger.debug("wake-up listener lost Redis, listening again soon", extra={"error": repr(e)})
            finally:
                with contextlib.suppress(redis.RedisError, OSError):
                    pubsub.close()
            time.sleep(_RECONNECT_S)

    def _wake_all(self) -> None:
        for event in self._events.values():
            event.set()
