"""Dead-letters a message that keeps taking its worker down with it."""

from __future__ import annotations

import logging

import dramatiq
from dramatiq.middleware import Middleware

from .deadletter import dead_letter

logger = logging.getLogger("pipeline.middleware.poison")

DELIVERIES = "wp:deliveries"


class PoisonGuard(Middleware):
    """Count deliveries that never finished; past ``redelivery_limit`` the message is poison.

    A worker that dies (out of memory, ``os._exit``, kill -9) runs no hook, so its message keeps
    the count it had; every finish, success or failure, clears it. Retries start from zero.
    Dramatiq's Retries never sees such crashes, so without this the message loops forever.

    Parameters:
        redelivery_limit: crashes allowed before the message is dead-lettered (default 3).
    """

    def __init__(self, *, redelivery_limit: int = 3) -> None:
        self.redelivery_limit = redelivery_limit

    def before_process_message(self, broker: dramatiq.Broker, message: dramatiq.MessageProxy) -> None:
        try:
            deliveries = broker.ledger_client.hincrby(DELIVERIES, message.message_id, 1)
        except Exception:
            logger.exception("could not count a delivery", extra={"message_id": message.message_id})
            return
        # This delivery is number ``deliveries``: the ones before it all died unfinished.
        if deliveries > self.redelivery_limit:
            dead_letter(
                broker,
                message,
                f"poison: its worker died {deliveries - 1} times while running it",
            )

    def _finished(self, broker: dramatiq.Broker, message: dramatiq.MessageProxy) -> None:
        try:
            broker.ledger_client.hdel(DELIVERIES, message.message_id)
        except Exception:
            logger.exception("could not clear a delivery count", extra={"message_id": message.message_id})

    def after_process_message(self, broker, message, *, result=None, exception=None) -> None:
        self._finished(broker, message)

    def after_skip_message(self, broker: dramatiq.Broker, message: dramatiq.MessageProxy) -> None:
        self._finished(broker, message)
