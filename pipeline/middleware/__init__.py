"""WorkerPool's Dramatiq middleware, one class per module.

Their order in :func:`pipeline.broker.build_broker` matters: ``before_*`` hooks run in list
order, ``after_*`` hooks in reverse.
"""

from .groups import GroupCallbacksAtAck
from .malformed import MalformedMessages
from .poison import PoisonGuard
from .retries import Defer, DurableRetries
from .shutdown import GracefulShutdown
from .watchdog import Watchdog

__all__ = [
    "Defer",
    "DurableRetries",
    "GracefulShutdown",
    "GroupCallbacksAtAck",
    "MalformedMessages",
    "PoisonGuard",
    "Watchdog",
]
