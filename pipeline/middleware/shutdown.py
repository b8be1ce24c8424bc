"""Keeps a worker's shutdown graceful when SIGTERM reaches the whole process group."""

from __future__ import annotations

import logging
import signal
import threading
import time

import dramatiq
from dramatiq.middleware import Middleware

logger = logging.getLogger("pipeline.middleware.shutdown")


class GracefulShutdown(Middleware):
    """Ignore a SIGTERM that repeats within ``window`` seconds of the first one.

    Heroku, systemd and ``timeout`` signal every process of the group: a ``dramatiq`` worker
    process then gets SIGTERM twice (directly and forwarded by its parent), and Dramatiq treats
    the second as "kill now", abandoning running jobs. A deliberate second signal (a user asking
    for a hard stop) still works once the window has passed.

    Parameters:
        window: seconds within which a repeated SIGTERM counts as the same request (default 1).
    """

    def __init__(self, *, window: float = 1.0) -> None:
        self.window = window

    def after_worker_boot(self, broker: dramatiq.Broker, worker: dramatiq.Worker) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        original = signal.getsignal(signal.SIGTERM)
        if not callable(original):
            return  # not under the dramatiq CLI: nothing to protect
        first: list[float] = []

        def on_sigterm(signum: int, frame: object) -> None:
            now = time.monotonic()
            if first and now - first[0] < self.window:
                logger.info("ignoring a repeated SIGTERM: already stopping gracefully")
                return
            first[:] = [now]
            original(signum, frame)

        signal.signal(signal.SIGTERM, on_sigterm)
