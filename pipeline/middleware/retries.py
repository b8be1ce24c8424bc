"""Retries that cannot lose a message when its re-enqueue fails."""

from __future__ import annotations

import logging

import dramatiq
from dramatiq.middleware import Retries

from .deadletter import record_dead_letter

logger = logging.getLogger("pipeline.middleware.retries")


class Defer(dramatiq.Retry):
    """Raised by an actor whose message should run later: not a failure, no retry used up.

    ``options`` are merged into the message first (to tell its next delivery what this one
    arranged, such as a reserved turn).
    """

    def __init__(self, message: str, *, delay: int, options: dict | None = None) -> None:
        super().__init__(message, delay=max(0, int(delay)))
        self.options = options or {}


class DurableRetries(Retries):
    """Dramatiq's Retries, except that a retry which cannot be enqueued is not acked away.

    The broker already retries enqueues through short Redis outages. If it still fails,
    Dramatiq would swallow the error and ack the original: the message would vanish (Dramatiq
    issue 545). Here the original is failed instead, so it is nacked into the dead-letter queue,
    and the reaper enqueues the job again because its run still counts it as unsettled.

    A :class:`Defer` re-enqueues the message with its delay and the same retry count.

    When retries are exhausted the job is settled as dead-lettered with the last error, so the
    run still completes and the reaper does not send it again.
    """

    def after_process_message(self, broker: dramatiq.Broker, message, *, result=None, exception=None) -> None:
        try:
            if isinstance(exception, Defer):
                message.options.update(exception.options)
                broker.enqueue(message, delay=exception.delay)
                return
            super().after_process_message(broker, message, result=result, exception=exception)
        except Exception as e:
            logger.critical(
                "could not enqueue a retry; the message is kept in the dead-letter queue for the reaper",
                extra={"message_id": message.message_id, "actor": message.actor_name, "error": repr(e)},
            )
            message.fail()
            return
        if exception is not None and message.failed:
            record_dead_letter(broker, message, f"retries exhausted: {type(exception).__name__}: {exception}")
