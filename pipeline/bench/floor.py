"""``python -m pipeline.bench.floor``: WorkerPool's download alone, without the pipeline around it.

P processes x T threads, each thread taking the next job and calling :func:`pipeline.fetch.download`,
the function every ``fetch_page`` runs (its pooled ``requests`` session, address policy, watchdog,
streamed atomic write, sha256), and nothing else: no Redis, no Dramatiq, no ledger, no logs.

Its CPU per page is the least that WorkerPool, or any design that downloads with ``requests`` in
threads, can spend: what WorkerPool spends above it is the pipeline's, what the floor spends above
the aiohttp loop is the HTTP client's and the threads'. Clean profile only: no retries, and a
failed download simply leaves no file (the runner checks the files, as for the plain actor).
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing
import os
import queue
import threading
import time
from pathlib import Path
from typing import Any

from ..errors import FetchError
from ..fetch import FetchLimits, download
from ..settings import Settings
from .procs import announce, finish, wait_for_go
from .world import Job, World

RUN_ID = "floor"


def _process(jobs: list[Job], out: Path, threads: int, sync: Any, go: Any, leave: Any) -> None:
    settings = Settings.load(environ=os.environ, env_file=os.devnull)
    limits = FetchLimits.from_settings(settings)
    todo: queue.SimpleQueue[Job] = queue.SimpleQueue()
    for job in jobs:
        todo.put(job)

    def work() -> None:
        go.wait()
        while True:
            try:
                job = todo.get_nowait()
            except queue.Empty:
                return
            url = settings.site_url_template.format(domain=job.domain)
            with contextlib.suppress(FetchError):  # no file: the runner's check reports it
                download(url, out / job.storage_path(RUN_ID), limits)

    pool = [threading.Thread(target=work) for _ in range(threads)]
    for thread in pool:
        thread.start()
    sync.wait(120)  # up
    for thread in pool:
        thread.join()
    sync.wait()  # done
    # Alive until the runner has read this process's CPU time: a dead process has none to read.
    leave.wait()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m pipeline.bench.floor", description=__doc__.split("\n\n")[0]
    )
    World.add_arguments(parser)
    parser.add_argument("--out", type=Path, required=True, help="folder for the pages")
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--threads", type=int, default=32)
    args = parser.parse_args(argv)
    world = World.from_args(args)
    # Forked, as dramatiq forks its worker processes: each starts with this process's imports.
    context = multiprocessing.get_context("fork")
    sync = context.Barrier(args.processes + 1)
    go, leave = context.Event(), context.Event()
    children = [
        context.Process(
            target=_process,
            args=(world.jobs[i :: args.processes], args.out, args.threads, sync, go, leave),
            daemon=True,
        )
        for i in range(args.processes)
    ]
    for child in children:
        child.start()
    sync.wait(120)  # every thread of every process is up
    announce("READY", {"pid": os.getpid()})
    wait_for_go()
    started = time.perf_counter()
    go.set()
    sync.wait()  # every job is done
    finish({"wall_s": time.perf_counter() - started, "pages": len(world.jobs), "run_id": RUN_ID})
    leave.set()
    for child in children:
        child.join()


if __name__ == "__main__":
    main()
