"""Helpers for the fault tests: runs, raw Redis messages, worker processes, kills and their logs.

Everything here drives real processes: ``dramatiq actors`` commands, a real redis-server and the
demo world over HTTP on 127.0.0.1. Nothing is mocked.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import dramatiq
import psutil
import redis
from conftest import child_env, run_command

from pipeline.jobs import FetchJob
from pipeline.ledger import RunLedger
from pipeline.settings import Settings
from pipeline.workers import WorkerFleet

NS = "dramatiq"
TESTS_DIR = Path(__file__).resolve().parent


# --- runs --------------------------------------------------------------------------------------------


def start_run(settings: Settings, countries: Iterable[str]) -> str:
    """``pipeline.kickoff`` against the test's Redis (no local workers): returns the run id."""
    result = run_command(
        "pipeline.kickoff", ["--countries", ",".join(countries)], child_env(settings), timeout=60
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return re.search(r"^run_id: (\S+)$", result.stdout, re.M).group(1)


def new_run_id() -> str:
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + "-" + uuid.uuid4().hex[:6]


def synthetic_run(
    client: redis.Redis, settings: Settings, domains: list[str], *, country: str = "poland"
) -> tuple[str, list[FetchJob]]:
    """A run recorded in the ledger the way discover_country records one, without Semrush.

    Its jobs download ``domains`` (the demo world must serve them); nothing is enqueued: the test
    decides what reaches the queues, and in which order.
    """
    run_id = new_run_id()
    ledger = RunLedger(client, run_id)
    ledger.create([country], {"started_at": time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime())})
    jobs = [
        FetchJob.create(run_id, country, rank, domain, settings.site_url_template)
        for rank, domain in enumerate(domains, start=1)
    ]
    recorded, _ = ledger.record_discovery(
        country, jobs, {"status": "ok", "jobs": len(jobs), "url": "synthetic", "path": None}
    )
    assert recorded
    return run_id, jobs


def run_meta(client: redis.Redis, run_id: str) -> dict[str, str]:
    return client.hgetall(f"wp:run:{run_id}:meta")


def describe(client: redis.Redis, run_id: str) -> str:
    """What a stuck run looks like, for assertion messages."""
    counts = client.hgetall(f"wp:run:{run_id}:counts")
    unsettled = client.zrange(f"wp:run:{run_id}:touched", 0, 20)
    queues = {
        q: client.llen(f"{NS}:{q}") for q in ("discover", "fetch", "summary", "fetch.DQ", "discover.DQ")
    }
    acks = {k: client.scard(k) for k in client.scan_iter(f"{NS}:__acks__.*")}
    return f"counts={counts} unsettled={unsettled} queues={queues} acks={acks}"


def wait_finished(client: redis.Redis, run_id: str, timeout: float) -> float:
    """Seconds until the run's summary is written; fails the test after ``timeout``."""
    started = time.monotonic()
    while True:
        try:
            if run_meta(client, run_id).get("status") == "finished":
                break
        except (redis.ConnectionError, redis.BusyLoadingError):
            pass  # a test restarting Redis
        if time.monotonic() - started > timeout:
            raise AssertionError(f"run {run_id} not finished after {timeout}s: {describe(client, run_id)}")
        time.sleep(0.2)
    return time.monotonic() - started


def wait_until(predicate: Callable[[], Any], timeout: float, what: str, interval: float = 0.1) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


def outcomes(client: redis.Redis, run_id: str) -> dict[str, dict[str, Any]]:
    return {k: json.loads(v) for k, v in client.hgetall(f"wp:run:{run_id}:outcomes").items()}


def files_outside(root: Path, allowed: Iterable[Path]) -> list[Path]:
    """Files under ``root`` that are not under one of ``allowed`` (symlinks not followed)."""
    allowed = [a.resolve() for a in allowed]
    found = []
    for dirpath, _, filenames in os.walk(root):
        for name in filenames:
            path = Path(dirpath, name).resolve()
            if not any(path.is_relative_to(a) for a in allowed):
                found.append(path)
    return found


# --- raw messages -------------------------------------------------------------------------------------


def bytes_client(url: str) -> redis.Redis:
    return redis.Redis.from_url(url)


def message(actor: str, *args: Any, queue: str = "fetch", **options: Any) -> dramatiq.Message:
    return dramatiq.Message(queue_name=queue, actor_name=actor, args=args, kwargs={}, options=options)


def push(client: redis.Redis, queue: str, payload: bytes | dramatiq.Message | dict) -> str:
    """Enqueue exactly as Dramatiq's Redis broker does: HSET <q>.msgs id payload; RPUSH <q> id."""
    redis_id = str(uuid.uuid4())
    if isinstance(payload, dramatiq.Message):
        payload = payload.copy(options={**payload.options, "redis_message_id": redis_id}).encode()
    elif isinstance(payload, dict):
        payload = json.dumps(
            {**payload, "options": {**payload.get("options", {}), "redis_message_id": redis_id}}
        )
    client.hset(f"{NS}:{queue}.msgs", redis_id, payload)
    client.rpush(f"{NS}:{queue}", redis_id)
    return redis_id


def push_job(client: redis.Redis, job: FetchJob | dict) -> str:
    body = job.to_body() if isinstance(job, FetchJob) else job
    return push(client, "fetch", message("fetch_page", body))


def queues_idle(client: redis.Redis, queues: Iterable[str] = ("fetch", "summary", "discover")) -> bool:
    """No ready, delayed or unacknowledged message on ``queues``."""
    for q in queues:
        if client.llen(f"{NS}:{q}") or client.llen(f"{NS}:{q}.DQ"):
            return False
    return not any(client.scard(k) for k in client.scan_iter(f"{NS}:__acks__.*"))


def dead_letters(client: redis.Redis) -> dict[str, dict[str, Any]]:
    return {k: json.loads(v) for k, v in client.hgetall("wp:deadletters").items()}


def quarantined(client: redis.Redis) -> dict[str, dict[str, Any]]:
    return {k: json.loads(v) for k, v in client.hgetall("wp:quarantine:msgs").items()}


# --- logs ---------------------------------------------------------------------------------------------


def log_records(*paths: Path) -> list[dict[str, Any]]:
    records = []
    for path in paths:
        if not path.exists():
            continue
        for line in path.read_text(errors="replace").splitlines():
            if line.startswith("{"):
                with contextlib.suppress(ValueError):  # a line cut by a kill
                    records.append(json.loads(line))
    return records


def log_files(log_dir: Path) -> list[Path]:
    return sorted(log_dir.glob("*.log"))


def broker_id_of(log_dir: Path, pid: int) -> str | None:
    """The Redis broker id of a worker process, from its "worker process booted" log line."""
    for record in log_records(*log_files(log_dir)):
        if record.get("message") == "worker process booted" and record.get("pid") == pid:
            return record["broker_id"]
    return None


# --- worker processes ------------------------------------------------------------------------------


class DramatiqCommand:
    """``python -m dramatiq actors ...`` in its own session (process group), logging to a file."""

    def __init__(
        self,
        settings: Settings,
        log_path: Path,
        *,
        processes: int = 1,
        threads: int = 4,
        shutdown_timeout_ms: int | None = None,
        modules: Iterable[str] = (),
    ) -> None:
        self.log_path = log_path
        timeout = shutdown_timeout_ms or settings.worker_shutdown_timeout_ms
        self.args = [
            sys.executable, "-m", "dramatiq", "actors", *modules,
            "--processes", str(processes), "--threads", str(threads),
            "--worker-shutdown-timeout", str(timeout),
        ]  # fmt: skip
        self.env = child_env(settings, PYTHONPATH=str(TESTS_DIR))
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> DramatiqCommand:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as out:
            self.proc = subprocess.Popen(
                self.args, env=self.env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip
        return self

    @property
    def pgid(self) -> int:
        return os.getpgid(self.proc.pid)

    def children(self) -> list[int]:
        try:
            return [c.pid for c in psutil.Process(self.proc.pid).children()]
        except psutil.NoSuchProcess:
            return []

    def wait_booted(self, count: int, timeout: float = 30) -> list[str]:
        """Broker ids of ``count`` booted worker processes."""

        def booted() -> list[str] | None:
            ids = [broker_id_of(self.log_path.parent, pid) for pid in self.children()]
            ids = [i for i in ids if i]
            return ids if len(ids) >= count else None

        return wait_until(booted, timeout, f"{count} worker process(es) to boot ({self.log_path})")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def __enter__(self) -> DramatiqCommand:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def fleet(
    settings: Settings, processes: int, log_dir: Path, *, threads: int = 4, modules: Iterable[str] = ()
):
    """A WorkerFleet whose children see the tests folder (for test-only actor modules)."""
    return WorkerFleet(
        settings,
        processes,
        threads=threads,
        log_dir=log_dir,
        extra_env={"WORKERPOOL_ENV_FILE": os.devnull, "PYTHONPATH": str(TESTS_DIR)},
        modules=list(modules),
    )


def worker_child(main_pid: int) -> int | None:
    """The pid of the worker process of a ``dramatiq -p 1`` main process."""
    try:
        children = psutil.Process(main_pid).children()
    except psutil.NoSuchProcess:
        return None
    return children[0].pid if children else None


# --- kills and recovery -----------------------------------------------------------------------------


def held_messages(client: redis.Redis, broker_id: str) -> dict[str, list[str]]:
    """Redis message ids that a worker process has fetched and not acknowledged, per queue."""
    held = {}
    prefix = f"{NS}:__acks__.{broker_id}."
    for key in client.scan_iter(prefix + "*"):
        ids = client.smembers(key)
        if ids:
            held[key.removeprefix(prefix)] = sorted(ids)
    return held


def work_of(client: redis.Redis, held: dict[str, list[str]]) -> set[tuple[str, str]]:
    """(run_id, ledger key) of the jobs and discoveries behind held messages."""
    work = set()
    for queue, ids in held.items():
        for raw in client.hmget(f"{NS}:{queue}.msgs", ids) if ids else []:
            try:
                m = json.loads(raw)
                if m["actor_name"] == "fetch_page":
                    job = m["args"][0]
                    work.add((job["run_id"], f"{job['country']}/{int(job['rank']):02d}"))
                elif m["actor_name"] == "discover_country":
                    work.add((m["args"][0], "discover:" + m["args"][1]))
            except (TypeError, ValueError, KeyError, IndexError):
                continue
    return work


def work_done(client: redis.Redis, run_id: str, key: str) -> bool:
    if key.startswith("discover:"):
        return bool(client.hexists(f"wp:run:{run_id}:discovered", key.removeprefix("discover:")))
    return bool(client.hexists(f"wp:run:{run_id}:outcomes", key))


@dataclass
class Kill:
    """One SIGKILL of a worker process, and how long its work took to come back."""

    pid: int
    broker_id: str
    at: float
    held: dict[str, list[str]]
    work: set[tuple[str, str]]
    reclaimed_s: float | None = None  #: its acks sets were put back in the queues
    recovered_s: float | None = None  #: every job it held has settled
    notes: list[str] = field(default_factory=list)

    @property
    def held_count(self) -> int:
        return sum(len(v) for v in self.held.values())


def kill_worker(
    client: redis.Redis, pid: int, log_dir: Path, *, min_held: int = 1, timeout: float = 20
) -> Kill:
    """SIGKILL a worker process once it holds at least ``min_held`` messages."""
    broker_id = wait_until(lambda: broker_id_of(log_dir, pid), timeout, f"broker id of pid {pid}")
    wait_until(
        lambda: sum(len(v) for v in held_messages(client, broker_id).values()) >= min_held,
        timeout,
        f"worker {pid} to hold {min_held} message(s)",
        interval=0.02,
    )
    held = held_messages(client, broker_id)
    work = work_of(client, held)
    os.kill(pid, signal.SIGKILL)
    return Kill(pid, broker_id, time.monotonic(), held, work)


def track_recovery(client: redis.Redis, kill: Kill, timeout: float = 60) -> Kill:
    """Fill in ``reclaimed_s`` and ``recovered_s`` (None when not within ``timeout``)."""
    prefix = f"{NS}:__acks__.{kill.broker_id}."
    pending = set(kill.work)
    while time.monotonic() - kill.at < timeout:
        elapsed = time.monotonic() - kill.at
        try:
            if kill.reclaimed_s is None and not any(True for _ in client.scan_iter(prefix + "*")):
                kill.reclaimed_s = elapsed
            pending = {w for w in pending if not work_done(client, *w)}
        except redis.ConnectionError:  # Redis is being restarted by the chaos test
            time.sleep(0.2)
            continue
        if not pending and kill.reclaimed_s is not None:
            kill.recovered_s = max(elapsed, kill.reclaimed_s)
            return kill
        time.sleep(0.1)
    kill.notes.append(f"still pending after {timeout}s: {sorted(pending)[:5]}")
    return kill


# --- figures ----------------------------------------------------------------------------------------


def report_figures(request: Any, name: str, figures: dict[str, Any]) -> Path:
    """Show a test's measurements whatever the capture mode, and keep them as JSON.

    They are written through pytest's terminal reporter (so ``pytest -q`` shows them without
    ``-s``), printed (kept with the test's captured output) and saved under the pytest cache:
    ``.pytest_cache/d/workerpool/<name>.json``.
    """
    cache = getattr(request.config, "cache", None)  # absent under `-p no:cacheprovider`
    folder = Path(cache.mkdir("workerpool")) if cache else Path(tempfile.gettempdir()) / "workerpool-figures"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.json"
    path.write_text(json.dumps(figures, indent=2, default=str) + "\n")
    text = f"\n[{name}] " + ", ".join(f"{k}={v}" for k, v in figures.items()) + f"\n[{name}] saved to {path}"
    print(text)
    reporter = request.config.pluginmanager.getplugin("terminalreporter")
    capture = request.config.pluginmanager.getplugin("capturemanager")
    if reporter is not None and capture is not None:
        with capture.global_and_fixture_disabled():  # fd-level capture would swallow it
            reporter.write_line(text)
    return path
