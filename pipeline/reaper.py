"""The reaper: compares each active run's ledger with the queues and re-enqueues what is stuck.

It is the last line of defence: whatever path loses or strands a message (one we did not
foresee included), the job is still unsettled in the ledger, so it is found here and sent again.
Duplicates are harmless because the ledger settles a job once.

* unsettled and in no queue (ready, delayed or running) for ``reaper_lost_after`` -> lost;
* unsettled for ``reaper_deadline`` whatever the queues say -> stuck;
* complete but no summary written and nobody writing it -> summarize again.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .jobs import job_key
from .ledger import active_runs, now_ms
from .settings import Settings

if TYPE_CHECKING:
    from .broker import WorkerPoolBroker

logger = logging.getLogger("pipeline.reaper")


@dataclass
class ReapReport:
    runs: int = 0
    requeued_jobs: int = 0
    requeued_discoveries: int = 0
    summaries: int = 0


def queued_work(broker: WorkerPoolBroker) -> set[tuple[str, str]]:
    """(run_id, key) of every message held by Redis for a job or a discovery."""
    found: set[tuple[str, str]] = set()
    client = broker.client
    for queue in ("fetch", "fetch.DQ", "discover", "discover.DQ"):
        for _, raw in client.hscan_iter(f"{broker.namespace}:{queue}.msgs", count=500):
            try:
                message = json.loads(raw)
                args = message["args"]
                if message["actor_name"] == "fetch_page":
                    job = args[0]
                    found.add((job["run_id"], job_key(job["country"], int(job["rank"]))))
                elif message["actor_name"] == "discover_country":
                    found.add((args[0], f"discover:{args[1]}"))
            except (ValueError, KeyError, TypeError, IndexError):
                continue  # malformed: the consumer quarantines it
    return found


def reap(broker: WorkerPoolBroker, settings: Settings) -> ReapReport:
    report = ReapReport()
    runs = active_runs(broker.ledger_client)
    if not runs:
        return report
    present = queued_work(broker)
    now = now_ms()
    lost_after = settings.reaper_lost_after * 1000
    deadline = settings.reaper_deadline * 1000
    for run_id in runs:
        report.runs += 1
        ledger = broker.ledger(run_id)
        unsettled = ledger.unsettled()
        jobs = None
        for key, last in unsettled.items():
            age = now - last
            if not (age > deadline or (age > lost_after and (run_id, key) not in present)):
                continue
            if key.startswith("discover:"):
                broker.discovery_pipeline(run_id, key.removeprefix("discover:")).run()
                report.requeued_discoveries += 1
            else:
                jobs = ledger.jobs() if jobs is None else jobs
                if key not in jobs:
                    continue
                broker.get_actor("fetch_page").send(jobs[key])
                report.requeued_jobs += 1
            ledger.touch(key)
            logger.warning(
                "reaper enqueued again a job with no progress",
                extra={"run_id": run_id, "job": key, "age_s": round(age / 1000, 1)},
            )
        if not unsettled:
            snapshot = ledger.snapshot(with_discovered=True)
            if snapshot.complete and not snapshot.finished:
                # A worker killed while writing the summary keeps its claim for minutes: once the
                # claim's owner is gone from the heartbeats (reclaimed as dead), drop it. The chaos
                # test caught a run that waited the claim's whole TTL after such a kill.
                owner = ledger.summary_claim_owner()
                alive = (
                    owner and broker.client.zscore(f"{broker.namespace}:__heartbeats__", owner) is not None
                )
                if owner and not alive and ledger.drop_summary_claim(owner):
                    logger.warning(
                        "dropped the summary claim of a dead worker",
                        extra={"run_id": run_id, "broker_id": owner},
                    )
                if not ledger.summary_claimed():
                    broker.run_complete(run_id)
                    report.summaries += 1
    return report
