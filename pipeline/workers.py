"""Runs ``dramatiq actors`` worker processes and restarts any that dies.

When one child of a ``dramatiq`` command dies, Dramatiq shuts all the others down and exits
without restarting. So each worker here is its own ``dramatiq actors --processes 1`` command:
a kill -9 takes down one process, and this supervisor starts it again at once. Its
unfinished messages come back through the watchdog of the surviving workers.

``kickoff --local N`` uses :class:`WorkerFleet`; on a host of your own,
``python -m pipeline.workers --processes N`` does the same job as a long-running service.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from . import logs
from .children import kill_group, stop_with_parent
from .cli import Parser, add_common_arguments, run, settings_from
from .errors import UsageError
from .settings import Settings

logger = logging.getLogger("pipeline.workers")

#: Exit codes of a `dramatiq` command that could not start: its module did not import (2), or
#: Redis did not answer (3). Restarting at once would only spin.
START_FAILURES = (2, 3)


def worker_command(threads: int, shutdown_timeout_ms: int, modules: Sequence[str] = ()) -> list[str]:
    """``modules``: more modules of actors to import after ``actors`` (tests add a crashing one)."""
    return [
        sys.executable, "-m", "dramatiq", "actors", *modules,
        "--processes", "1",
        "--threads", str(threads),
        "--worker-shutdown-timeout", str(shutdown_timeout_ms),
        # A worker process boots in about a second; one that dies while booting should not hold
        # its `dramatiq` command (and so its restart) for Dramatiq's default 30 s.
        "--worker-fork-timeout", "10000",
    ]  # fmt: skip


class WorkerFleet:
    """N supervised worker processes sharing one environment."""

    def __init__(
        self,
        settings: Settings,
        processes: int,
        *,
        threads: int | None = None,
        log_dir: Path | None = None,
        extra_env: dict[str, str] | None = None,
        modules: Sequence[str] = (),
    ) -> None:
        if processes < 1:
            raise UsageError("the number of worker processes must be at least 1")
        self.settings = settings
        self.count = processes
        self.threads = threads or settings.worker_threads
        self.log_dir = log_dir
        self.modules = tuple(modules)
        self.env = {**os.environ, **settings.to_environ(), "PYTHONUNBUFFERED": "1", **(extra_env or {})}
        self.procs: list[subprocess.Popen[bytes] | None] = [None] * processes
        self.restarts = 0
        self._not_before = [0.0] * processes
        self._backoff = [0.0] * processes
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._supervisor: threading.Thread | None = None

    def _spawn(self, index: int) -> subprocess.Popen[bytes]:
        out = subprocess.DEVNULL
        if self.log_dir is not None:
            self.log_dir.mkdir(parents=True, exist_ok=True)
            out = open(self.log_dir / f"worker-{index}.log", "ab")  # noqa: SIM115 - owned by the child
        try:
            return subprocess.Popen(
                worker_command(self.threads, self.settings.worker_shutdown_timeout_ms, self.modules),
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                # Its own process group: a Ctrl-C meant for kickoff reaches workers only through stop().
                start_new_session=True,
                # ...but if kickoff dies without stopping them (SIGKILL), they stop with it.
                preexec_fn=stop_with_parent,
            )
        finally:
            if out is not subprocess.DEVNULL:
                out.close()

    def start(self) -> WorkerFleet:
        with self._lock:
            for i in range(self.count):
                self.procs[i] = self._spawn(i)
        self._supervisor = threading.Thread(target=self._supervise, name="worker-supervisor", daemon=True)
        self._supervisor.start()
        logger.info("started worker processes", extra={"count": self.count, "threads": self.threads})
        return self

    def pids(self) -> list[int]:
        with self._lock:
            return [p.pid for p in self.procs if p is not None and p.poll() is None]

    def _supervise(self) -> None:
        while not self._stopping.wait(0.5):
            with self._lock:
                for i, proc in enumerate(self.procs):
                    if proc is None or proc.poll() is None or self._stopping.is_set():
                        continue
                    now = time.monotonic()
                    if not self._not_before[i]:
                        # One that could not start (Redis not up yet, say) backs off, up to 10 s;
                        # one that was killed comes back at once.
                        failed_start = proc.returncode in START_FAILURES
                        self._backoff[i] = min(10.0, self._backoff[i] * 2 or 1.0) if failed_start else 0.0
                        self._not_before[i] = now + self._backoff[i]
                        logger.warning(
                            "worker process exited; starting it again",
                            extra={"pid": proc.pid, "exit_code": proc.returncode, "worker": i,
                                   "delay_s": self._backoff[i]},
                        )  # fmt: skip
                    if now < self._not_before[i]:
                        continue
                    kill_group(proc.pid)  # its children, if the main process died alone
                    self._not_before[i] = 0.0
                    self.procs[i] = self._spawn(i)
                    self.restarts += 1

    def stop(self) -> None:
        """Stop gracefully: SIGTERM to each ``dramatiq`` main process, SIGKILL after the grace."""
        self._stopping.set()
        if self._supervisor is not None:
            self._supervisor.join()
        with self._lock:
            procs = [p for p in self.procs if p is not None]
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + self.settings.worker_shutdown_timeout_ms / 1000 + 10
        try:
            for proc in procs:
                try:
                    proc.wait(max(0.1, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    logger.warning("worker did not stop in time; killing it", extra={"pid": proc.pid})
                kill_group(proc.pid)
                proc.wait()
        except BaseException:  # an interrupt cut the grace short: no worker outlives its fleet
            for proc in procs:
                if proc.returncode is None:
                    kill_group(proc.pid)
                    proc.wait()
            raise

    def __enter__(self) -> WorkerFleet:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main() -> int:
    parser = Parser(
        prog="python -m pipeline.workers",
        description="Run N supervised `dramatiq actors` processes against REDIS_URL until stopped.",
    )
    parser.add_argument("-p", "--processes", type=int, default=2, help="worker processes (default 2)")
    parser.add_argument("-t", "--threads", type=int, help="threads per process (default WORKER_THREADS)")
    add_common_arguments(parser)
    args = parser.parse_args()
    settings = settings_from(args)
    logs.setup(settings)
    if not settings.redis_url:
        raise UsageError(
            "REDIS_URL is not set", hint="workers on their own need the shared Redis of the runs"
        )
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    with WorkerFleet(settings, args.processes, threads=args.threads):
        stop.wait()
        logger.info("stopping workers")
    return 0


if __name__ == "__main__":
    run(main)
