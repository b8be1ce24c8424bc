"""Rejects a message that does not match its actor's schema before the actor runs."""

from __future__ import annotations

import logging

import dramatiq
from dramatiq.middleware import Middleware, SkipMessage

from ..errors import InvalidJob
from ..settings import Settings
from .deadletter import dead_letter

logger = logging.getLogger("pipeline.middleware.malformed")


class MalformedMessages(Middleware):
    """Validate every message with its actor's ``schema`` option; dead-letter it when invalid.

    An actor declares ``schema=callable(args, kwargs, settings)`` which raises
    :class:`~pipeline.errors.InvalidJob`. An invalid message is never run and never retried.
    Every exception is caught here: Dramatiq swallows other exceptions from ``before_*`` hooks
    and would then run the malformed message anyway.

    Parameters:
        settings: passed to the schemas (OUTPUT_DIR, ALLOW_PRIVATE_ADDRESSES).
    """

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    @property
    def actor_options(self) -> set[str]:
        return {"schema"}

    def before_process_message(self, broker: dramatiq.Broker, message: dramatiq.MessageProxy) -> None:
        try:
            actor = broker.get_actor(message.actor_name)
            schema = actor.options.get("schema")
            if schema is None:
                raise InvalidJob(f"actor {message.actor_name} declares no schema")
            schema(message.args, message.kwargs, self.settings)
            return
        except SkipMessage:
            raise
        except InvalidJob as e:
            reason = f"malformed: {e}"
        except Exception as e:
            reason = f"malformed: validation failed with {type(e).__name__}: {e}"
        dead_letter(broker, message, reason)
