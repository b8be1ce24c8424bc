"""What WorkerPool's commands share: common flags, error handling, and finding the run's Redis.

A user's mistake ends a command with one clear line, a hint and a documented exit code
(:mod:`pipeline.errors`); never with a traceback.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import redis

from .errors import EXIT_INTERRUPTED, EXIT_OK, OutputNotWritable, RedisUnavailable, WorkerPoolError
from .redis_server import EmbeddedRedis
from .settings import Settings

logger = logging.getLogger("pipeline.cli")


class Parser(argparse.ArgumentParser):
    """argparse, but a bad flag is a UsageError like every other mistake (exit code 2)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.print_usage(sys.stderr)
        self.exit(2, f"{self.prog}: error: {message}\n  hint: see `{self.prog} --help`\n")


def add_common_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("settings (flags win over the environment and .env)")
    group.add_argument("--redis-url", help="Redis of the run (default: REDIS_URL; unset: the embedded Redis)")
    group.add_argument("--output-dir", help="folder of the runs (default: OUTPUT_DIR or ./downloads)")
    group.add_argument("--log-level", help="DEBUG, INFO, WARNING or ERROR (default: LOG_LEVEL or INFO)")
    group.add_argument("--log-format", choices=("json", "text"), help="default: LOG_FORMAT or json")


def settings_from(args: argparse.Namespace, **overrides: object) -> Settings:
    return Settings.load(
        {
            "redis_url": args.redis_url,
            "output_dir": args.output_dir,
            "log_level": args.log_level,
            "log_format": args.log_format,
            **overrides,
        }
    )


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def run(main: Callable[[], int]) -> None:
    """Run a command's main and exit with its code; errors of ours become one line.

    SIGTERM and SIGHUP (``timeout``, a closed terminal, a supervisor) stop it like Ctrl-C, so
    that what it started (workers, the embedded Redis, the demo world) is stopped too.
    """
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _interrupt)
    try:
        code = main()
    except WorkerPoolError as e:
        print(f"error: {e.describe()}", file=sys.stderr)
        code = e.exit_code
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        code = EXIT_INTERRUPTED
    sys.exit(code if code is not None else EXIT_OK)


def ensure_output_dir(path: Path) -> Path:
    """Create OUTPUT_DIR if needed and prove it is writable."""
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / f".probe-{uuid.uuid4().hex}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as e:
        raise OutputNotWritable(f"output folder {path} is not writable: {e.strerror or e}") from None
    return path


def preflight(client: redis.Redis, where: str) -> list[str]:
    """Check that Redis is reachable and fit to hold a run; return warnings for the user."""
    try:
        info = client.info()
        policy = client.config_get("maxmemory-policy").get("maxmemory-policy", "")
    except redis.ResponseError:  # CONFIG disabled by a managed Redis: skip that check
        policy = ""
    except redis.RedisError as e:
        raise RedisUnavailable(f"cannot reach Redis at {where}: {e}") from None
    warnings = []
    version = info.get("redis_version", "0")
    if int(version.split(".")[0]) < 5:
        raise RedisUnavailable(f"Redis {version} at {where} is too old", hint="use Redis 5 or newer")
    if not info.get("aof_enabled") and not info.get("rdb_last_save_time"):
        warnings.append("Redis persistence is off: a Redis restart would lose the queued jobs")
    elif not info.get("aof_enabled"):
        warnings.append("Redis append-only file is off: a crash may lose the jobs since the last snapshot")
    if policy and policy != "noeviction":
        warnings.append(f"Redis maxmemory-policy is {policy}: it may evict queued jobs; use noeviction")
    return warnings


@contextmanager
def open_redis(
    settings: Settings, *, start_embedded: bool = True
) -> Iterator[tuple[Settings, EmbeddedRedis | None]]:
    """The run's Redis: REDIS_URL, else the embedded Redis of OUTPUT_DIR.

    An embedded Redis already running for OUTPUT_DIR (another kickoff) is reused; one started
    here is stopped on exit. Yields the settings with ``redis_url`` filled in.
    """
    if settings.redis_url:
        client = redis.Redis.from_url(settings.redis_url, decode_responses=True, socket_connect_timeout=5)
        for warning in preflight(client, _redact(settings.redis_url)):
            logger.warning(warning)
        yield settings, None
        return
    data_dir = settings.output_dir / ".redis"
    running = _running_embedded(data_dir)
    if running:
        yield settings.with_overrides(redis_url=running), None
        return
    if not start_embedded:
        raise RedisUnavailable(
            f"no Redis: REDIS_URL is unset and no embedded Redis data in {data_dir}",
            hint="set REDIS_URL, or point OUTPUT_DIR at the folder of the run",
        )
    ensure_output_dir(settings.output_dir)
    server = EmbeddedRedis(data_dir).start()
    try:
        yield settings.with_overrides(redis_url=server.url), server
    finally:
        server.stop()


@contextmanager
def open_run_redis(settings: Settings) -> Iterator[tuple[Settings, EmbeddedRedis | None]]:
    """The Redis of existing runs, for commands that inspect them (status, dlq).

    REDIS_URL, else the embedded Redis of OUTPUT_DIR (started from its files if no kickoff runs).
    Losing Redis midway is a RedisUnavailable too, not a traceback.
    """
    if not settings.redis_url and not has_embedded_data(settings):
        raise RedisUnavailable(
            f"REDIS_URL is unset and {settings.output_dir} holds no embedded Redis",
            hint="set REDIS_URL (or --redis-url), or --output-dir to the folder of the run",
        )
    with open_redis(settings, start_embedded=True) as (settings, embedded):
        try:
            yield settings, embedded
        except redis.RedisError as e:
            raise RedisUnavailable(f"lost Redis at {_redact(settings.redis_url)}: {e}") from None


def _redact(url: str) -> str:
    from .broker import redact  # noqa: PLC0415 - keeps `cli` light for commands without a broker

    return redact(url)


def _running_embedded(data_dir: Path) -> str | None:
    try:
        port = int((data_dir / "redis.port").read_text().strip())
    except (OSError, ValueError):
        return None
    url = f"redis://127.0.0.1:{port}/0"
    try:
        redis.Redis.from_url(url, socket_connect_timeout=1).ping()
    except redis.RedisError:
        return None
    return url


def has_embedded_data(settings: Settings) -> bool:
    return (settings.output_dir / ".redis").is_dir()
