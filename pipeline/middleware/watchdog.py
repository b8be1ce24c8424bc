"""A thread in every worker process that keeps the cluster from stalling."""

from __future__ import annotations

import logging
import threading
import time
import uuid

import dramatiq
from dramatiq.middleware import Middleware

from ..reaper import reap
from ..settings import Settings

logger = logging.getLogger("pipeline.middleware.watchdog")

REAPER_LOCK = "wp:reaper:lock"


class Watchdog(Middleware):
    """Every ``reclaim_interval`` seconds: put back the messages of dead workers; every
    ``reaper_interval`` seconds, in one worker of the cluster at a time: run the reaper.

    Dramatiq returns a dead worker's messages only when a 0.1 % lottery on some later command
    wins, after a 60 s heartbeat timeout: 17 minutes when the cluster is idle. Here it is
    ``heartbeat_timeout + reclaim_interval`` at most (after a worker's own start or a Redis outage,
    one ``heartbeat_timeout`` more: long enough for every live worker to heartbeat again).
    """

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.stopping = threading.Event()
        self.thread: threading.Thread | None = None
        self.token = uuid.uuid4().hex

    def after_worker_boot(self, broker: dramatiq.Broker, worker: dramatiq.Worker) -> None:
        # The broker id names this process in Redis (heartbeats, acks sets): logging it with the
        # pid lets an operator (and the fault tests) tell which messages a dead process held.
        logger.info("worker process booted", extra={"broker_id": broker.broker_id})
        self.stopping.clear()
        self.thread = threading.Thread(target=self._run, args=(broker,), name="watchdog", daemon=True)
        self.thread.start()

    def before_worker_shutdown(self, broker: dramatiq.Broker, worker: dramatiq.Worker) -> None:
        self.stopping.set()

    def _run(self, broker) -> None:
        interval = self.settings.reclaim_interval
        reap_every = max(1, round(self.settings.reaper_interval / interval))
        tick = 0
        # While Redis is down no worker can heartbeat: right after it comes back every heartbeat
        # is stale, live workers' included. Only silence while Redis was reachable means death.
        reachable_since: float | None = None
        while not self.stopping.wait(interval):
            tick += 1
            try:
                if reachable_since is None:
                    broker.ledger_client.ping()
                    reachable_since = time.monotonic()
                if time.monotonic() - reachable_since < self.settings.heartbeat_timeout_ms / 1000:
                    continue
                dead, moved = broker.reclaim_dead_workers()
                if dead:
                    logger.warning(
                        "reclaimed the messages of dead workers",
                        extra={"dead_workers": dead, "count": moved},
                    )
                if tick % reap_every == 0 and self._take_reaper_turn(broker):
                    reap(broker, self.settings)
            except Exception as e:  # Redis down: try again next tick
                reachable_since = None
                logger.warning("watchdog pass failed", extra={"error": repr(e)})

    def _take_reaper_turn(self, broker) -> bool:
        ttl_ms = int(self.settings.reaper_interval * 1000 * 0.9)
        return bool(broker.ledger_client.set(REAPER_LOCK, self.token, nx=True, px=ttl_ms))
