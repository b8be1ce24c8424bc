"""Dead-letters a message that keeps taking its worker down with it."""

from __future__ import annotations

import logging
import threading

import dramatiq
from dramatiq.middleware import Middleware

from .deadletter import dead_letter

logger = logging.getLogger("pipeline.middleware.poison")

DELIVERIES = "wp:deliveries"


class _Solo:
    """Many ordinary messages at once in a process, or one suspect alone (writer-preferring)."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.running = 0
        self.alone = False
        self.waiting_alone = 0

    def enter_shared(self) -> None:
        with self.cond:
            while self.alone or self.waiting_alone:
                self.cond.wait()
            self.running += 1

    def enter_alone(self) -> None:
        with self.cond:
            self.waiting_alone += 1
            while self.alone or self.running:
                self.cond.wait()
            self.waiting_alone -= 1
            self.alone = True

    def leave(self, alone: bool) -> None:
        with self.cond:
            if alone:
                self.alone = False
            else:
                self.running -= 1
            self.cond.notify_all()


class PoisonGuard(Middleware):
    """Count deliveries that never finished; past ``redelivery_limit`` the message is poison.

    A worker that dies (out of memory, ``os._exit``, kill -9) runs no hook, so its message keeps
    the count it had; every finish, success or failure, clears it (the consumer's ack does, in
    the same round trip; a nack, right after it). Retries start from zero.
    Dramatiq's Retries never sees such crashes, so without this the message loops forever.

    A crash takes down every message running in the process, so a count alone cannot tell the
    culprit from its neighbours. A message that has died ``solo_after`` times therefore runs
    alone in its process (the others wait for it): its next death is its own. An innocent message
    is dead-lettered only if it also dies while alone.

    Parameters:
        redelivery_limit: crashes allowed before the message is dead-lettered (default 3).
        solo_after: crashes after which the message runs alone (default 2; at most the limit).
    """

    def __init__(self, *, redelivery_limit: int = 3, solo_after: int = 2) -> None:
        self.redelivery_limit = redelivery_limit
        self.solo_after = min(solo_after, redelivery_limit)
        self.solo = _Solo()
        self.held = threading.local()

    def before_process_message(self, broker: dramatiq.Broker, message: dramatiq.MessageProxy) -> None:
        self.held.alone = None
        try:
            deliveries = broker.ledger_client.hincrby(DELIVERIES, message.message_id, 1)
        except Exception:
            logger.exception("could not count a delivery", extra={"message_id": message.message_id})
            deliveries = 1
        # This delivery is number ``deliveries``: the ones before it all died unfinished.
        if deliveries > self.redelivery_limit:
            dead_letter(broker, message, f"poison: its worker died {deliveries - 1} times while running it")
        alone = deliveries > self.solo_after
        if alone:
            logger.warning(
                "running a message alone: its workers died while running it",
                extra={
                    "message_id": message.message_id,
                    "actor": message.actor_name,
                    "crashes": deliveries - 1,
                },  # noqa: E501
            )
            self.solo.enter_alone()
        else:
            self.solo.enter_shared()
        self.held.alone = alone

    def _finished(self, broker: dramatiq.Broker, message: dramatiq.MessageProxy) -> None:
        alone = getattr(self.held, "alone", None)
        if alone is not None:  # None: skipped before this middleware's turn came
            self.held.alone = None
            self.solo.leave(alone)
        # The count is cleared by the message's ack or nack (pipeline.consumer).

    def after_process_message(self, broker, message, *, result=None, exception=None) -> None:
        self._finished(broker, message)

    def after_skip_message(self, broker: dramatiq.Broker, message: dramatiq.MessageProxy) -> None:
        self._finished(broker, message)
