"""Runs the contenders in turn against the simulated web, measures them, verifies them, compares.

One round runs every contender once (the aiohttp loop first, then in the clean profile the
download floor of :mod:`.floor` and the plain Dramatiq + requests actor of :mod:`.plain`, then each
WorkerPool configuration), so slow drift of the machine hits all of them alike; figures are
medians over the rounds, and WorkerPool's are given as ratios to the loop's, the floor's and the
plain actor's: the median of each round's ratio. Every WorkerPool or plain run gets a fresh
embedded Redis and fresh ``dramatiq`` worker processes (started and idle before the clock
starts); WorkerPool's clock runs from the enqueue of the first country to the summary being
written, the plain actor's from the enqueue of the first page to the last message acknowledged.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import platform
import shutil
import signal
import statistics
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis
import requests

from ..broker import HEARTBEATS
from ..redis_server import EmbeddedRedis
from ..settings import Settings
from ..workers import WorkerFleet
from .procs import Child, ChildFailed, ProcessMeter
from .world import World, read_manifest, records_from_files, verify

MB = 1024 * 1024
#: Targets of the issue: (profile, metric, limit, "min" or "max").
PPS_RATIO_MIN = 0.60
CPU_RATIO_MAX = 4.0
RSS_MB_MAX = 80.0
RSS_AT_THREADS = 32
WALL_RATIO_MAX = 1.25


class BenchTimeout(Exception):
    """--max-seconds ran out."""


@dataclass(frozen=True)
class Contender:
    kind: str  # "loop", "floor", "plain" or "workerpool"
    processes: int
    threads: int

    @property
    def in_flight(self) -> int:
        return self.processes * self.threads

    @property
    def name(self) -> str:
        if self.kind == "loop":
            return f"aiohttp loop x{self.in_flight}"
        if self.kind == "floor":
            return f"download floor {self.processes}x{self.threads}"
        if self.kind == "plain":
            return f"plain dramatiq+requests {self.processes}x{self.threads}"
        return f"workerpool {self.processes}x{self.threads}"


@dataclass
class Options:
    profiles: list[str]
    pages: int = 4000
    repeat: int = 3
    processes: int = 2
    threads: int = 32
    scaling: bool = False
    plain: bool = True
    max_seconds: float = 1800.0
    retry_backoff_ms: int = 500
    overlap: float = -1.0
    seed: int = 1
    work_dir: Path | None = None
    keep: bool = False
    poll: float = 0.025
    run_timeout: float = 600.0


@dataclass
class ProfileResult:
    world: dict[str, Any]
    contenders: list[Contender]
    runs: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    def medians(self, name: str) -> dict[str, float]:
        runs = [r for r in self.runs.get(name, []) if r.get("verified", {}).get("ok")]
        keys = {
            k for r in runs for k, v in r.items() if isinstance(v, (int, float)) and not isinstance(v, bool)
        }
        return {k: round(statistics.median(r[k] for r in runs if k in r), 4) for k in sorted(keys)}

    def paired_ratio(self, name: str, base: str, key: str) -> float | None:
        """The median over the rounds of ``name``'s figure divided by ``base``'s in the same round.

        The contenders of a round run back to back, so each round's ratio sees one state of the
        machine; a ratio of medians would mix rounds run seconds or minutes apart, and the
        machines drift (the loop's CPU per page varied 3x between rounds here).
        """
        ratios = [
            run[key] / other[key]
            for run, other in zip(self.runs.get(name, []), self.runs.get(base, []), strict=False)
            if run.get("verified", {}).get("ok") and other.get("verified", {}).get("ok")
            and run.get(key) is not None and other.get(key)
        ]  # fmt: skip
        return round(statistics.median(ratios), 3) if ratios else None


def scaling_configs(processes: int, threads: int) -> list[tuple[int, int]]:
    """1, 2 and 4 processes at the total threads of the main configuration (plus the main one)."""
    total = processes * threads
    configs = [(processes, threads)] + [(p, max(1, total // p)) for p in (1, 2, 4)]
    return list(dict.fromkeys(configs))


class Bench:
    def __init__(self, options: Options, *, log: Any = sys.stderr) -> None:
        self.o = options
        self.log = log
        self.deadline = time.monotonic() + options.max_seconds
        self.http = requests.Session()
        self.http.trust_env = False  # 127.0.0.1 only, whatever proxy the environment names
        self.work_dir = options.work_dir or Path(os.environ.get("TMPDIR", "/tmp"))
        self.results: dict[str, ProfileResult] = {}
        self.errors: list[str] = []

    # --- time -----------------------------------------------------------------------------------

    def remaining(self, cap: float | None = None) -> float:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise BenchTimeout(f"--max-seconds {self.o.max_seconds:.0f} ran out")
        return min(left, cap) if cap else left

    def say(self, text: str) -> None:
        print(text, file=self.log, flush=True)

    # --- the whole benchmark ----------------------------------------------------------------------

    def run(self, root: Path) -> dict[str, ProfileResult]:
        for profile in self.o.profiles:
            world = World(profile, self.o.pages, overlap=self.o.overlap, seed=self.o.seed)
            main = (self.o.processes, self.o.threads)
            configs = scaling_configs(*main) if self.o.scaling and profile == "clean" else [main]
            contenders = [Contender("loop", *main)]
            if profile == "clean":
                # Not in the realistic profile: neither keeps a record of which page failed why
                # (nor does the floor retry), so there is nothing to compare failures with.
                contenders.append(Contender("floor", *main))
                if self.o.plain:
                    contenders.append(Contender("plain", *main))
            contenders += [Contender("workerpool", p, t) for p, t in configs]
            result = self.results[profile] = ProfileResult(world.describe(), contenders)
            with self._web(world, root / profile) as web_url:
                for round_no in range(1, self.o.repeat + 1):
                    for contender in contenders:
                        run_dir = root / profile / f"{round_no}-{contender.name.replace(' ', '-')}"
                        figures = self._one_run(world, web_url, contender, run_dir)
                        result.runs.setdefault(contender.name, []).append(figures)
                        where = f"[{profile}] round {round_no}/{self.o.repeat} {contender.name}"
                        self.say(f"{where}: {_brief(figures)}")
        return self.results

    @contextlib.contextmanager
    def _web(self, world: World, folder: Path) -> Iterator[str]:
        command = [sys.executable, "-m", "pipeline.bench.web", *world.cli_args()]
        with Child("web", command, env=dict(os.environ), log_path=folder / "web.log") as web:
            ready = web.expect("READY", self.remaining(60))
            self.web_pid = web.pid
            yield f"http://127.0.0.1:{ready['port']}"

    def _one_run(self, world: World, web_url: str, contender: Contender, run_dir: Path) -> dict[str, Any]:
        self.http.post(f"{web_url}/_bench/reset", timeout=10).raise_for_status()
        runs = {
            "loop": self._loop_run,
            "floor": self._floor_run,
            "plain": self._plain_run,
            "workerpool": self._workerpool_run,
        }
        try:
            figures = runs[contender.kind](world, web_url, contender, run_dir)
        except (ChildFailed, redis.RedisError, OSError, ValueError, KeyError) as e:
            self.errors.append(f"{contender.name}: {e}")
            return {"error": str(e), "verified": {"ok": False, "problems": [str(e)]}, "run_dir": str(run_dir)}
        stats = self.http.get(f"{web_url}/_bench/stats", timeout=10).json()
        figures["site_requests"] = stats["site_requests"]
        figures["extra_site_requests"] = stats["site_requests"] - world.expected_site_requests()
        if figures["verified"]["ok"] and not self.o.keep:
            shutil.rmtree(run_dir, ignore_errors=True)
        else:
            figures["run_dir"] = str(run_dir)
        return figures

    def settings(self, web_url: str, output_dir: Path, redis_url: str = "") -> Settings:
        """The same settings for every contender: local web, no Semrush delay, quiet logs."""
        return Settings.load(
            {
                "redis_url": redis_url,
                "output_dir": output_dir,
                "semrush_base_url": web_url,
                "site_url_template": web_url + "/site/{domain}/",
                "allow_private_addresses": True,
                "semrush_delay": 0.0,
                "log_level": "WARNING",
                "retry_min_backoff_ms": self.o.retry_backoff_ms,
                "worker_shutdown_timeout_ms": 5000,
            },
            environ={},
            env_file=os.devnull,
        )

    @staticmethod
    def child_env(settings: Settings) -> dict[str, str]:
        """The environment of a contender's processes: these settings and nothing from a ``.env``."""
        return {**os.environ, **settings.to_environ(), "WORKERPOOL_ENV_FILE": os.devnull}

    # --- the yardstick and the download floor: one process each, no Redis ----------------------------

    def _loop_run(self, world: World, web_url: str, contender: Contender, run_dir: Path) -> dict[str, Any]:
        out = run_dir / "out"
        command = [
            sys.executable, "-m", "pipeline.bench.yardstick", *world.cli_args(),
            "--out", str(out), "--concurrency", str(contender.in_flight),
        ]  # fmt: skip
        done, figures = self._solo(web_url, out, "loop", command, run_dir)
        figures.update(_verified(world, read_manifest(Path(done["manifest"])), out))
        return figures

    def _floor_run(self, world: World, web_url: str, contender: Contender, run_dir: Path) -> dict[str, Any]:
        out = run_dir / "out"
        command = [
            sys.executable, "-m", "pipeline.bench.floor", *world.cli_args(), "--out", str(out),
            "--processes", str(contender.processes), "--threads", str(contender.threads),
        ]  # fmt: skip
        done, figures = self._solo(web_url, out, "floor", command, run_dir)
        figures.update(_verified(world, records_from_files(world, out, done["run_id"]), out))
        return figures

    def _solo(
        self, web_url: str, out: Path, name: str, command: list[str], run_dir: Path
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """Time a crawler child that needs no Redis, its forked processes included.

        Returns its DONE payload and its figures: rates, CPU per 1,000 pages of the crawler and the
        web, peak RSS of its busiest process.
        """
        env = self.child_env(self.settings(web_url, out))
        with (
            ProcessMeter() as meter,
            Child(name, command, env=env, log_path=run_dir / f"{name}.log") as crawler,
        ):
            meter.watch("web", self.web_pid, children=False)
            crawler.expect("READY", self.remaining(60))
            meter.watch("crawler", crawler.pid)
            before = meter.snapshot()
            crawler.go()
            done = crawler.expect("DONE", self.remaining(self.o.run_timeout))
            after = meter.snapshot()
        pages = done["pages"]
        figures = _rates(pages, done["wall_s"])
        cpu = {
            "crawler": meter.cpu_between(before, after, "crawler"),
            "web": meter.cpu_between(before, after, "web"),
        }
        figures.update(_per_1k(cpu, pages))
        figures["cpu_total_per_1k"] = figures["cpu_crawler_per_1k"]  # no master, no Redis
        figures["foreign_cpu_pct"] = meter.foreign_load(before, after)
        figures["peak_rss_mb"] = round(max(meter.peak_rss("crawler")) / MB, 1)
        return done, figures

    # --- the plain Dramatiq + requests actor --------------------------------------------------------

    def _plain_run(self, world: World, web_url: str, contender: Contender, run_dir: Path) -> dict[str, Any]:
        out = run_dir / "out"
        workers_command = [
            sys.executable, "-m", "dramatiq", "pipeline.bench.plain",
            "--processes", str(contender.processes), "--threads", str(contender.threads),
        ]  # fmt: skip
        feeder_command = [
            sys.executable, "-m", "pipeline.bench.plain", "--feed", *world.cli_args(), "--out", str(out),
            "--poll", str(self.o.poll), "--timeout", str(self.remaining(self.o.run_timeout)),
        ]  # fmt: skip
        with EmbeddedRedis(run_dir / "redis") as server:
            env = self.child_env(self.settings(web_url, out, server.url))
            workers = Child(
                "plain workers", workers_command, env=env, log_path=run_dir / "workers.log", protocol=False
            )
            with workers:
                done, figures = self._drive(
                    world, server, lambda: [workers.pid], contender.processes, "feeder", feeder_command, env,
                    run_dir, alive=lambda: workers.process.poll() is None,
                )  # fmt: skip
        figures["enqueue_s"] = done["enqueue_s"]
        figures["dead_lettered"] = done["dead_lettered"]
        figures.update(_verified(world, records_from_files(world, out, done["run_id"]), out))
        return figures

    # --- WorkerPool ---------------------------------------------------------------------------------

    def _workerpool_run(
        self, world: World, web_url: str, contender: Contender, run_dir: Path
    ) -> dict[str, Any]:
        out = run_dir / "out"
        with ExitStack() as stack:
            server = stack.enter_context(EmbeddedRedis(run_dir / "redis"))
            settings = self.settings(web_url, out, server.url)
            fleet = WorkerFleet(
                settings,
                contender.processes,
                threads=contender.threads,
                log_dir=run_dir / "logs",
                extra_env={"WORKERPOOL_ENV_FILE": os.devnull},
            )
            stack.enter_context(fleet)
            command = [
                sys.executable, "-m", "pipeline.bench.master",
                "--countries", ",".join(world.countries), "--poll", str(self.o.poll),
                "--timeout", str(self.remaining(self.o.run_timeout)),
            ]  # fmt: skip
            done, figures = self._drive(
                world, server, fleet.pids, contender.processes, "master", command, fleet.env, run_dir
            )
            restarts = fleet.restarts
        pages = figures["pages"]
        timeline = done["timeline"]
        figures["discovery_s"] = timeline.get("all_discovered")
        figures["first_page_s"] = timeline.get("first_settled")
        if figures["discovery_s"] is not None and done["wall_s"] > figures["discovery_s"]:
            # Once every job is known: how fast the rest goes, the Semrush gate out of the way.
            rest = pages - done["settled_when_all_discovered"]
            figures["after_discovery_pages_per_s"] = round(
                rest / (done["wall_s"] - figures["discovery_s"]), 1
            )
        figures["worker_restarts"] = restarts
        summary = done.get("summary")
        if not summary or not Path(summary).exists():
            raise ChildFailed(f"no summary written: {summary}")
        figures.update(_verified(world, read_manifest(Path(summary).parent / "manifest.jsonl"), out))
        return figures

    # --- what WorkerPool and the plain actor share ---------------------------------------------------

    def _drive(
        self,
        world: World,
        server: EmbeddedRedis,
        workers: Callable[[], Iterable[int]],
        processes: int,
        name: str,
        command: list[str],
        env: dict[str, str],
        run_dir: Path,
        *,
        alive: Callable[[], bool] | None = None,
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """Time a driver child (WorkerPool's master, the plain feeder) against idle workers on ``server``.

        Returns its DONE payload and the figures both have: rates; CPU per 1,000 pages of the
        workers ('crawler', their children included), the driver ('master'), Redis and the web;
        peak RSS per worker process; Redis commands per page, the driver's own polls left out.
        ``alive``: false once the workers are gone for good (the run then fails at once).
        """
        with (
            ProcessMeter() as meter,
            Child(name, command, env=env, log_path=run_dir / f"{name}.log") as driver,
        ):
            meter.watch("web", self.web_pid, children=False)
            assert server.process is not None
            meter.watch("redis", server.process.pid, children=False)
            meter.watch("workers", workers)
            client = server.client()
            driver.expect("READY", self.remaining(60))
            self._wait_for_workers(client, processes, alive)
            meter.watch("master", driver.pid, children=False)
            calls_before = _command_calls(client)
            before = meter.snapshot()
            driver.go()
            done = driver.expect("DONE", self.remaining(self.o.run_timeout + 30))
            after = meter.snapshot()
            calls_after = _command_calls(client)
        if done.get("wall_s") is None:
            raise ChildFailed(f"the run did not finish: {done}")
        pages = len(world.jobs)
        figures = _rates(pages, done["wall_s"])
        cpu = {
            "crawler": meter.cpu_between(before, after, "workers"),
            "master": meter.cpu_between(before, after, "master"),
            "redis": meter.cpu_between(before, after, "redis"),
            "web": meter.cpu_between(before, after, "web"),
        }
        figures.update(_per_1k(cpu, pages))
        figures["foreign_cpu_pct"] = meter.foreign_load(before, after)
        figures["cpu_total_per_1k"] = round(
            sum(figures[f"cpu_{k}_per_1k"] for k in ("crawler", "master", "redis")), 3
        )
        rss = meter.peak_rss("workers")
        figures["peak_rss_mb"] = round(max(rss) / MB, 1)
        figures["peak_rss_mb_each"] = [round(r / MB, 1) for r in rss]
        calls = {k: calls_after.get(k, 0) - calls_before.get(k, 0) for k in calls_after}
        for command_name, count in done["own_commands"].items():
            calls[command_name] = calls.get(command_name, 0) - count
        figures["redis_cmds_per_page"] = round(sum(calls.values()) / pages, 2)
        figures["redis_top_per_page"] = {
            k: round(v / pages, 2) for k, v in sorted(calls.items(), key=lambda kv: -kv[1])[:8] if v > 0
        }
        return done, figures

    def _wait_for_workers(
        self, client: redis.Redis, processes: int, alive: Callable[[], bool] | None = None
    ) -> None:
        """Every worker process has fetched from Redis once: they are up and idle."""
        deadline = time.monotonic() + self.remaining(90)
        while client.zcard(HEARTBEATS) < processes:
            if time.monotonic() > deadline:
                raise ChildFailed(f"{processes} worker processes did not start within 90 s")
            if alive is not None and not alive():
                raise ChildFailed("the worker processes exited before they were up (see workers.log)")
            time.sleep(0.1)
        time.sleep(0.5)  # the last consumers of each process settle into their polling


# --- figures -------------------------------------------------------------------------------------


def _rates(pages: int, wall_s: float) -> dict[str, Any]:
    return {"pages": pages, "wall_s": round(wall_s, 3), "pages_per_s": round(pages / wall_s, 1)}


def _per_1k(cpu: dict[str, float], pages: int) -> dict[str, float]:
    return {f"cpu_{k}_per_1k": round(v * 1000 / pages, 3) for k, v in cpu.items()}


def _command_calls(client: redis.Redis) -> dict[str, int]:
    """Calls per command since Redis started (commands run inside Lua scripts included), INFO aside."""
    stats = client.info("commandstats")
    return {
        name.removeprefix("cmdstat_"): int(value["calls"])
        for name, value in stats.items()
        if name not in ("cmdstat_info",)
    }


def _verified(world: World, records: Iterable[dict[str, Any]], out: Path) -> dict[str, Any]:
    check = verify(world, records, out)
    return {"verified": check.as_dict(), "outcomes_digest": _digest(check.outcomes)}


def _digest(outcomes: dict[tuple[str, int], str]) -> str:
    """A short fingerprint of which jobs were saved and which failed for which reason."""
    text = json.dumps(sorted([list(k) + [v] for k, v in outcomes.items()]))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _brief(figures: dict[str, Any]) -> str:
    if "error" in figures:
        return f"ERROR {figures['error']}"
    ok = "verified" if figures["verified"]["ok"] else f"NOT VERIFIED: {figures['verified']['problems'][:3]}"
    return (
        f"{figures['pages_per_s']} pages/s, wall {figures['wall_s']} s, "
        f"CPU {figures['cpu_crawler_per_1k']} s/1k pages, "
        f"other programs {figures['foreign_cpu_pct']} % CPU, {ok}"
    )


def machine() -> dict[str, Any]:
    return {
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
    }


# --- comparison and targets ----------------------------------------------------------------------


#: The figures compared between contenders. A crawler without master or Redis (the loop, the floor)
#: has its own CPU as its total.
_RATIO_KEYS = ("pages_per_s", "wall_s", "cpu_crawler_per_1k", "cpu_total_per_1k")


def compare(results: dict[str, ProfileResult]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Ratios to the loop, WorkerPool's to the floor and the plain actor, and the issue's targets."""
    report: dict[str, Any] = {}
    targets: list[dict[str, Any]] = []
    for profile, result in results.items():
        loop = next(c for c in result.contenders if c.kind == "loop")
        base = result.medians(loop.name)
        rows: dict[str, Any] = {loop.name: {"median": base}}
        plain = next((c for c in result.contenders if c.kind == "plain"), None)
        floor = next((c for c in result.contenders if c.kind == "floor"), None)
        # The plain actor and the floor keep no record of why a page failed: not part of "same failures".
        digests = {
            r.get("outcomes_digest")
            for c in result.contenders
            if c.kind not in ("plain", "floor")
            for r in result.runs.get(c.name, [])
        }
        for contender in result.contenders:
            if contender.kind == "loop":
                continue
            med = result.medians(contender.name)
            ratios = {key: result.paired_ratio(contender.name, loop.name, key) for key in _RATIO_KEYS}
            rows[contender.name] = {"median": med, "ratio_to_loop": ratios}
            if contender.kind != "workerpool":
                continue  # the targets are WorkerPool's
            # To the floor: what the pipeline costs above its own downloads; to the plain actor:
            # what WorkerPool's guarantees cost above bare Dramatiq + requests.
            for base in (c for c in (plain, floor) if c):
                rows[contender.name][f"ratio_to_{base.kind}"] = {
                    key: result.paired_ratio(contender.name, base.name, key)
                    for key in _RATIO_KEYS
                    if key != "wall_s"
                }
            main = contender.in_flight == loop.in_flight and (contender.processes, contender.threads) == (
                loop.processes,
                loop.threads,
            )
            if profile == "clean" and main:
                targets.append(
                    _target(
                        profile, contender, "pages/s vs loop", ratios["pages_per_s"], PPS_RATIO_MIN, "min"
                    )
                )
                targets.append(
                    _target(
                        profile,
                        contender,
                        "worker CPU-s/1k vs loop",
                        ratios["cpu_crawler_per_1k"],
                        CPU_RATIO_MAX,
                        "max",
                    )
                )
            if profile == "clean" and contender.threads == RSS_AT_THREADS:
                targets.append(
                    _target(
                        profile, contender, "peak RSS MB/worker", med.get("peak_rss_mb"), RSS_MB_MAX, "max"
                    )
                )
            if profile == "realistic" and main:
                targets.append(
                    _target(profile, contender, "wall time vs loop", ratios["wall_s"], WALL_RATIO_MAX, "max")
                )
                same = len(digests) == 1 and None not in digests
                name = "same pages saved, same failures"
                targets.append(
                    {"profile": profile, "contender": contender.name, "target": name,
                     "value": same, "limit": True, "ok": same}
                )  # fmt: skip
        if sum(c.kind == "workerpool" for c in result.contenders) > 1:
            rows["scaling"] = _scaling(result)
        report[profile] = rows
    return report, targets


def _scaling(result: ProfileResult) -> list[dict[str, Any]]:
    pool = sorted((c for c in result.contenders if c.kind == "workerpool"), key=lambda c: c.processes)
    return [
        {
            "config": c.name,
            "pages_per_s": result.medians(c.name).get("pages_per_s"),
            "vs_first": result.paired_ratio(c.name, pool[0].name, "pages_per_s"),
        }
        for c in pool
    ]


def _target(
    profile: str, contender: Contender, name: str, value: float | None, limit: float, kind: str
) -> dict[str, Any]:
    ok = value is not None and (value >= limit if kind == "min" else value <= limit)
    return {"profile": profile, "contender": contender.name, "target": name, "value": value,
            "limit": f"{'>=' if kind == 'min' else '<='} {limit:g}", "ok": ok}  # fmt: skip


# --- printing ------------------------------------------------------------------------------------

_COLUMNS = (
    ("pages/s", "pages_per_s"),
    ("wall s", "wall_s"),
    ("CPU/1k crawler", "cpu_crawler_per_1k"),
    ("master", "cpu_master_per_1k"),
    ("redis", "cpu_redis_per_1k"),
    ("web", "cpu_web_per_1k"),
    ("peak RSS MB", "peak_rss_mb"),
    ("redis cmds/page", "redis_cmds_per_page"),
    ("discovery s", "discovery_s"),
    ("pages/s after", "after_discovery_pages_per_s"),
    ("other CPU %", "foreign_cpu_pct"),
)
#: Above this share of the machine's CPU used by other programs during a run, its figures are flagged.
FOREIGN_WARN_PCT = 10.0


def render(results: dict[str, ProfileResult], report: dict[str, Any], targets: list[dict[str, Any]]) -> str:
    lines: list[str] = []
    for profile, result in results.items():
        w = result.world
        feeder = " or the plain actor's feeder" if any(c.kind == "plain" for c in result.contenders) else ""
        lines += [
            "",
            f"== profile {profile}: {w['jobs']} pages, {w['countries']} countries, median latency "
            f"{w['median_latency_ms']} ms (max {w['max_latency_ms']}), median {w['median_bytes']:,} bytes, "
            f"failures {w['failures'] or 'none'}, keep-alive {'on' if w['keep_alive'] else 'off'}",
            "   medians of verified runs; CPU in CPU-seconds per 1,000 pages; 'crawler' = the loop's "
            "process or all worker processes,",
            f"   'master' = WorkerPool's master{feeder}; 'all' = crawler + master + redis;",
            "   ratios: the median of each round's ratio (a round runs its contenders back to back)",
        ]
        width = max(22, *(len(c.name) + 2 for c in result.contenders))
        columns = [(label, key, max(9, len(label) + 2)) for label, key in _COLUMNS]
        header = "".join(f"{label:>{w}}" for label, _, w in columns)
        lines.append(f"   {'contender':<{width}}{'runs':>5}{header}")
        for contender in result.contenders:
            runs = result.runs.get(contender.name, [])
            ok = sum(1 for r in runs if r.get("verified", {}).get("ok"))
            med = report[profile][contender.name]["median"]
            cells = "".join(f"{_fmt(med.get(key)):>{w}}" for _, key, w in columns)
            lines.append(f"   {contender.name:<{width}}{f'{ok}/{len(runs)}':>5}{cells}")
        for contender in result.contenders:
            row = report[profile][contender.name]
            if ratios := row.get("ratio_to_loop"):
                lines.append(
                    f"   {contender.name} / loop: pages/s x{_fmt(ratios['pages_per_s'])}, "
                    f"wall x{_fmt(ratios['wall_s'])}, "
                    f"crawler CPU/1k x{_fmt(ratios['cpu_crawler_per_1k'])}, "
                    f"all CPU/1k x{_fmt(ratios['cpu_total_per_1k'])}"
                )
            for base in ("plain", "floor"):
                if ratios := row.get(f"ratio_to_{base}"):
                    lines.append(
                        f"   {contender.name} / {base}: pages/s x{_fmt(ratios['pages_per_s'])}, "
                        f"crawler CPU/1k x{_fmt(ratios['cpu_crawler_per_1k'])}, "
                        f"all CPU/1k x{_fmt(ratios['cpu_total_per_1k'])}"
                    )
        lines += _spread(result)
        for row in report[profile].get("scaling", []):
            lines.append(
                f"   scaling {row['config']}: {_fmt(row['pages_per_s'])} pages/s "
                f"(x{_fmt(row['vs_first'])} of 1 process)"
            )
        noisy = [
            r for rs in result.runs.values() for r in rs if r.get("foreign_cpu_pct", 0) > FOREIGN_WARN_PCT
        ]
        if noisy:
            lines.append(
                f"   WARNING: other programs used > {FOREIGN_WARN_PCT:g} % of the machine's CPU during "
                f"{len(noisy)} run(s): throughput figures are disturbed (see 'other CPU %')"
            )
        for contender in result.contenders:
            for run in result.runs.get(contender.name, []):
                if not run.get("verified", {}).get("ok"):
                    lines.append(
                        f"   FAILED RUN {contender.name}: {run['verified']['problems'][:3]} "
                        f"({run.get('run_dir')})"
                    )
    if targets:
        lines += ["", "== targets"]
        for t in targets:
            lines.append(
                f"   [{'PASS' if t['ok'] else 'MISS'}] {t['profile']} {t['contender']}: {t['target']} = "
                f"{_fmt(t['value'])} (target {t['limit']})"
            )
    return "\n".join(lines)


#: The loop's CPU per page varying more than this across rounds means the machine changed state.
DRIFT_WARN = 1.5


def _spread(result: ProfileResult) -> list[str]:
    """Min-max over the rounds of each contender's pages/s and CPU per page, and a warning when
    the machine drifted: the ratios compare contenders run side by side; absolute figures do not
    carry over from one machine state to another."""
    lines: list[str] = []
    drift = None
    for contender in result.contenders:
        runs = [r for r in result.runs.get(contender.name, []) if r.get("verified", {}).get("ok")]
        if len(runs) < 2:
            continue
        pps = [r["pages_per_s"] for r in runs]
        cpu = [r["cpu_crawler_per_1k"] for r in runs]
        lines.append(
            f"   spread over {len(runs)} rounds, {contender.name}: "
            f"pages/s {_fmt(min(pps))}-{_fmt(max(pps))}, crawler CPU/1k {_fmt(min(cpu))}-{_fmt(max(cpu))}"
        )
        if contender.kind == "loop" and min(cpu) > 0:
            drift = max(cpu) / min(cpu)
    if drift is not None and drift > DRIFT_WARN:
        lines.append(
            f"   WARNING: the loop's CPU per page varied x{drift:.1f} across rounds: the machine changed "
            "state during the benchmark; compare the ratios, not the absolute figures"
        )
    return lines


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 10 else f"{value:.1f}"
    return str(value)


def install_signal_handlers(max_seconds: float) -> None:
    """SIGTERM and the --max-seconds alarm unwind the stack, so every ``finally`` stops its processes."""

    def on_alarm(*_: object) -> None:
        signal.signal(signal.SIGALRM, signal.SIG_IGN)  # once: cleanup must not be interrupted
        raise BenchTimeout(f"--max-seconds {max_seconds:.0f} ran out")

    def on_term(*_: object) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        raise KeyboardInterrupt

    signal.signal(signal.SIGALRM, on_alarm)
    signal.signal(signal.SIGTERM, on_term)
    signal.setitimer(signal.ITIMER_REAL, max_seconds)
