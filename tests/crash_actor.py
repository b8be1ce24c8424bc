"""A test-only actor that takes its worker process down, as an out-of-memory kill would.

Never imported by WorkerPool itself: fault tests start workers with
``dramatiq actors crash_actor`` and ``PYTHONPATH`` set to the tests folder.
"""

from __future__ import annotations

import os

import dramatiq

from actors import broker  # noqa: F401 - installs WorkerPool's broker before the actor is declared
from pipeline.errors import InvalidJob


def crash_schema(args, kwargs, settings) -> None:
    if kwargs or len(args) != 1 or not isinstance(args[0], str):
        raise InvalidJob("crash_now takes one string")


@dramatiq.actor(queue_name="fetch", schema=crash_schema, max_retries=0)
def crash_now(tag: str) -> None:
    """Exit at once, with no cleanup and no hook run: the message stays unacknowledged."""
    os._exit(1)
