"""Group completion counted in the member's ack: one round trip per member where there were two."""

from __future__ import annotations

import dramatiq
from dramatiq.middleware import GroupCallbacks


class GroupCallbacksAtAck(GroupCallbacks):
    """Dramatiq's GroupCallbacks, except that a member's barrier decrement rides in its ack.

    Dramatiq decrements the group's barrier once the actor returns, then acks the message: two
    round trips per member, and a member redelivered in between (its worker killed) counts
    twice. Here the hook only notes the barrier; the consumer's ack script decrements it in the
    same atomic step as the ack (:meth:`pipeline.broker.WorkerPoolBroker.ack_finished`), which
    then enqueues the callbacks if the member was the last.

    A broker without ``barriers_at_ack`` (a test's StubBroker) gets Dramatiq's behaviour.
    """

    def after_process_message(self, broker: dramatiq.Broker, message, *, result=None, exception=None) -> None:
        pending = getattr(broker, "barriers_at_ack", None)
        redis_message_id = message.options.get("redis_message_id")
        if pending is None or redis_message_id is None:
            super().after_process_message(broker, message, result=result, exception=exception)
            return
        key = message.options.get("group_completion_uuid")
        callbacks = message.options.get("group_completion_callbacks")
        if exception is None and key and callbacks:
            pending[redis_message_id] = (key, callbacks, self.barrier_ttl)
