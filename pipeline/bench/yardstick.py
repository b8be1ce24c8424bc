"""``python -m pipeline.bench.yardstick``: the bare asyncio + aiohttp loop WorkerPool is measured against.

What a competent engineer writes in an afternoon: one process, one event loop, N requests in
flight (a semaphore), every body written to disk with its sha256, a transient failure (5xx, 408,
429, timeout, connection error) retried after the same backoff as WorkerPool's (the settings in
the environment: same timeouts, attempts, backoff and User-Agent), anything else recorded as
failed. Its manifest has WorkerPool's fields, so one verifier checks both.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import time
from pathlib import Path
from typing import Any

import aiohttp

from ..settings import Settings
from ..tasks import backoff_ms
from .procs import announce, finish, wait_for_go
from .world import Job, World

RUN_ID = "yardstick"


def _transient(status: int) -> bool:
    return status >= 500 or status in (408, 429)


async def fetch(
    session: aiohttp.ClientSession, gate: asyncio.Semaphore, job: Job, out: Path, settings: Settings
) -> dict[str, Any]:
    url = settings.site_url_template.format(domain=job.domain)
    path = job.storage_path(RUN_ID)
    record: dict[str, Any] = {
        "country": job.country, "rank": job.rank, "domain": job.domain, "url": url,
        "path": None, "bytes": 0, "sha256": None, "outcome": "failed", "reason": "",
    }  # fmt: skip
    for attempt in range(1, settings.max_attempts + 1):
        record["attempts"] = attempt
        async with gate:
            try:
                async with session.get(url) as response:
                    body = await response.read()
                    status = response.status
            except (aiohttp.ClientError, asyncio.TimeoutError) as e:
                status, record["reason"] = (
                    0,
                    f"{'timeout' if isinstance(e, asyncio.TimeoutError) else 'connection_error'}: {e!r}",
                )
        if 200 <= status < 300:
            dest = out / path
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(body)
            sha256 = hashlib.sha256(body).hexdigest()
            record.update(path=path, bytes=len(body), sha256=sha256, outcome="saved", reason="")
            return record
        if status:
            record["reason"] = f"http_{status}: HTTP {status} from {url}"
        if (status and not _transient(status)) or attempt == settings.max_attempts:
            break
        await asyncio.sleep(backoff_ms(settings, attempt) / 1000)  # outside the gate: a slot is not held
    return record


async def crawl(world: World, out: Path, concurrency: int, settings: Settings) -> dict[str, Any]:
    timeout = aiohttp.ClientTimeout(
        total=settings.total_timeout, connect=settings.connect_timeout, sock_read=settings.read_timeout
    )
    connector = aiohttp.TCPConnector(limit=concurrency, limit_per_host=0)
    headers = {"User-Agent": settings.user_agent, "Accept-Encoding": "gzip, deflate"}
    async with aiohttp.ClientSession(connector=connector, timeout=timeout, headers=headers) as session:
        announce("READY", {"pid": os.getpid()})
        await asyncio.get_running_loop().run_in_executor(None, wait_for_go)
        started = time.perf_counter()
        gate = asyncio.Semaphore(concurrency)
        records = await asyncio.gather(*(fetch(session, gate, job, out, settings) for job in world.jobs))
        wall = time.perf_counter() - started
    manifest = out / "manifest.jsonl"
    manifest.write_text("".join(json.dumps(r, separators=(",", ":")) + "\n" for r in records))
    return {"wall_s": wall, "pages": len(records), "manifest": str(manifest)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m pipeline.bench.yardstick", description=__doc__.split("\n\n")[0]
    )
    World.add_arguments(parser)
    parser.add_argument("--out", type=Path, required=True, help="folder for the pages and manifest.jsonl")
    parser.add_argument("--concurrency", type=int, default=64, help="requests in flight")
    args = parser.parse_args(argv)
    settings = Settings.load(environ=os.environ, env_file=os.devnull)
    world = World.from_args(args)
    finish(asyncio.run(crawl(world, args.out, args.concurrency, settings)))


if __name__ == "__main__":
    main()
