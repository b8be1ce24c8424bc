"""The plain Dramatiq + requests actor: the reference the issue holds WorkerPool against.

The issue measured "a plain Dramatiq actor calling ``requests.get``" (2 processes x 8 or 32
threads: 270-424 pages/s at about 3.4 CPU-seconds per 1,000 pages); WorkerPool must be far ahead
of it and close to the aiohttp loop. Run in the same benchmark, on the same web and machine, it
shows which part of WorkerPool's cost is Dramatiq + requests themselves and which is WorkerPool's.

It is what a competent engineer writes in ten minutes: a ``RedisBroker`` with Dramatiq's default
middleware, one actor that calls ``requests.get`` (no session: the issue's reference did not
keep one), raises on a 5xx, 408, 429 or network error so that Dramatiq's Retries middleware
retries it (attempts and backoff from WorkerPool's settings in the environment, as the loop
does), and writes the body to the path in its message. No ledger, no manifest, no
de-duplication: the runner checks the files on disk.

Two uses:

- ``python -m dramatiq pipeline.bench.plain -p P -t T``: the worker processes (``REDIS_URL``)
- ``python -m pipeline.bench.plain --feed ...``: the feeder, a benchmark child (see
  :mod:`.procs`): at GO it sends one message per job of the world, then polls Redis until
  every message is acknowledged, and reports the wall time
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import dramatiq
import redis
import requests
from dramatiq.brokers.redis import RedisBroker
from dramatiq.common import dq_name

from ..settings import Settings

#: The run id in the saved files' paths (see :func:`pipeline.jobs.storage_path`).
RUN_ID = "plain"

settings = Settings.load(environ=os.environ, env_file=os.devnull)
broker = RedisBroker(url=os.environ["REDIS_URL"])
dramatiq.set_broker(broker)


@dramatiq.actor(
    max_retries=settings.max_attempts - 1,
    min_backoff=settings.retry_min_backoff_ms,
    max_backoff=settings.retry_max_backoff_ms,
)
def download(url: str, path: str) -> None:
    response = requests.get(
        url,
        headers={"User-Agent": settings.user_agent},
        timeout=(settings.connect_timeout, settings.read_timeout),
    )
    if response.status_code >= 500 or response.status_code in (408, 429):
        response.raise_for_status()  # transient: Retries sends it again after a backoff
    if not response.ok:
        return  # permanent (404 and the like): nothing to save, nothing to retry
    dest = Path(path)
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_bytes(response.content)


def _unacked(client: redis.Redis) -> int:
    """Messages not yet acknowledged: queued, prefetched, running, or waiting for a retry.

    Both hashes are read in one transaction: a retry moves a message from one to the other
    (enqueue there, then ack here), and two separate reads could miss it in between.
    """
    queue = download.queue_name
    with client.pipeline(transaction=True) as pipe:
        for name in (queue, dq_name(queue)):
            pipe.hlen(f"{broker.namespace}:{name}.msgs")
        return sum(pipe.execute())


def feed(argv: list[str] | None = None) -> None:
    # Imported here, not at the top: the worker processes import this module too, and should not
    # carry the benchmark's world (and its imports) in their measured memory.
    from .procs import announce, finish, wait_for_go  # noqa: PLC0415
    from .world import World  # noqa: PLC0415

    parser = argparse.ArgumentParser(
        prog="python -m pipeline.bench.plain", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument(
        "--feed",
        action="store_true",
        required=True,
        help="be the benchmark's feeder (the workers are `python -m dramatiq pipeline.bench.plain`)",
    )
    World.add_arguments(parser)
    parser.add_argument("--out", type=Path, required=True, help="folder the workers save the pages in")
    parser.add_argument("--poll", type=float, default=0.025, help="seconds between two Redis polls")
    parser.add_argument("--timeout", type=float, default=3600.0)
    args = parser.parse_args(argv)
    world = World.from_args(args)
    out = args.out.resolve()
    messages = [
        (settings.site_url_template.format(domain=job.domain), str(out / job.storage_path(RUN_ID)))
        for job in world.jobs
    ]
    broker.client.ping()
    announce("READY", {"pid": os.getpid(), "jobs": len(messages)})
    wait_for_go()

    started = time.perf_counter()
    for url, path in messages:
        download.send(url, path)
    enqueue_s = time.perf_counter() - started
    polls = 0
    wall_s = None
    deadline = started + args.timeout
    while time.perf_counter() < deadline:
        polls += 1
        if not _unacked(broker.client):
            wall_s = time.perf_counter() - started
            break
        time.sleep(args.poll)
    dead = broker.client.zcard(f"{broker.namespace}:{download.queue_name}.XQ")
    finish(
        {
            "wall_s": wall_s,
            "pages": len(messages),
            "run_id": RUN_ID,
            "enqueue_s": round(enqueue_s, 3),
            "dead_lettered": dead,
            # Not the plain actor's: left out of its count of Redis commands.
            "own_commands": {"multi": polls, "hlen": 2 * polls, "exec": polls, "zcard": 1},
        }
    )


if __name__ == "__main__":
    feed()
