"""Dead-lettering a message on purpose, with a reason that the logs, the ledger and dlq show.

``message.fail()`` + ``SkipMessage`` makes Dramatiq nack the message into ``<queue>.XQ`` without
running the actor and without Retries. Dramatiq keeps no reason, so it is stored beside, in
``wp:deadletters`` (redis message id -> JSON).
"""

from __future__ import annotations

import json
import logging
from typing import Any

import dramatiq
from dramatiq.middleware import SkipMessage

from ..jobs import FetchJob
from ..ledger import now_ms

DEAD_LETTERS = "wp:deadletters"

logger = logging.getLogger("pipeline.deadletter")


def dead_letter(broker: dramatiq.Broker, message: dramatiq.MessageProxy, reason: str) -> None:
    """Record why, settle the job if the message is one, and skip the message into the DLQ.

    Raises:
        SkipMessage: always; Dramatiq then nacks the message.
    """
    record_dead_letter(broker, message, reason)
    message.fail()
    raise SkipMessage(reason)


def record_dead_letter(broker: dramatiq.Broker, message: dramatiq.MessageProxy, reason: str) -> None:
    """Keep the reason, and settle the job as dead-lettered when the message is a job of a run."""
    run_id, job = identify_message(message)
    record = {
        "kind": "dead_lettered",
        "reason": reason,
        "at": now_ms(),
        "actor": message.actor_name,
        "queue": message.queue_name,
        "message_id": message.message_id,
        "run_id": run_id,
    }
    redis_id = message.options.get("redis_message_id", message.message_id)
    try:
        client = broker.ledger_client
        client.hset(DEAD_LETTERS, redis_id, json.dumps(record))
        if run_id:
            ledger = broker.ledger(run_id)
            settled = None
            # Only the job's own message settles it. A malformed or hostile message that merely
            # names a job of the run (its country and rank) must not take the real one's place:
            # in the fault tests a "../" path naming rank 1 was dead-lettered as rank 1, and the
            # good message of rank 1 was then ignored as a duplicate.
            if job is not None and ledger.job_body(job.key) == message.args[0]:
                settled = ledger.settle(job, job.outcome("dead_lettered", reason=reason))
            if settled is None or not settled.recorded:
                ledger.reject(message.message_id, record)
            if settled is not None and settled.run_complete:
                broker.run_complete(run_id)
    except Exception:  # the message must still be skipped if Redis hiccups
        logger.exception("could not record a dead letter", extra={"message_id": message.message_id})
    logger.error(
        "dead-lettered a message",
        extra={
            "actor": message.actor_name,
            "message_id": message.message_id,
            "run_id": run_id,
            "error": reason,
        },
    )


def identify_message(message: dramatiq.MessageProxy) -> tuple[str | None, FetchJob | None]:
    """The run (and, for fetch_page, the job) a message names, however broken it is."""
    args: Any = message.args
    first = args[0] if isinstance(args, (list, tuple)) and args else None
    if isinstance(first, dict):
        run_id = first.get("run_id") if isinstance(first.get("run_id"), str) else None
        try:
            job = FetchJob(
                run_id=str(first["run_id"]),
                country=str(first["country"]),
                rank=int(first["rank"]),
                domain=str(first.get("domain", "")),
                url=str(first.get("url", "")),
                path=str(first.get("path", "")),
            )
        except (KeyError, TypeError, ValueError):
            job = None
        return run_id, job
    if isinstance(first, str):
        return first, None
    return None, None
