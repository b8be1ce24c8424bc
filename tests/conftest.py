"""Fixtures: a real redis-server per test, the demo world, settings and worker processes.

Every server listens on 127.0.0.1 on a free port and is stopped by its fixture.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from pipeline.demo import DemoWorld
from pipeline.redis_server import EmbeddedRedis
from pipeline.settings import Settings

#: Short timeouts so that the demo's slow site fails within seconds.
FAST = {
    "semrush_delay": 0.02,
    "connect_timeout": 2.0,
    "read_timeout": 1.0,
    "total_timeout": 4.0,
    "max_attempts": 3,
    "retry_min_backoff_ms": 200,
    "retry_max_backoff_ms": 2000,
    "heartbeat_timeout_ms": 5000,
    "reclaim_interval": 0.5,
    "reaper_interval": 2.0,
    "reaper_lost_after": 8.0,
    "reaper_deadline": 60.0,
    "worker_threads": 8,
    "worker_shutdown_timeout_ms": 10000,
    "allow_private_addresses": True,
    "log_format": "json",
}


def make_settings(**overrides: object) -> Settings:
    """Settings from the given values and defaults only: the developer's .env and env stay out."""
    return Settings.load(overrides, environ={}, env_file=os.devnull)


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[EmbeddedRedis]:
    with EmbeddedRedis(tmp_path / "redis") as server:
        yield server


@pytest.fixture
def demo_world() -> Iterator[DemoWorld]:
    with DemoWorld(slow_seconds=5) as world:
        yield world


@pytest.fixture
def crawl_settings(tmp_path: Path, redis_server: EmbeddedRedis, demo_world: DemoWorld) -> Settings:
    return make_settings(
        redis_url=redis_server.url,
        output_dir=tmp_path / "out",
        semrush_base_url=demo_world.semrush_base_url,
        site_url_template=demo_world.site_url_template,
        **FAST,
    )


def child_env(settings: Settings, **extra: str) -> dict[str, str]:
    """The environment of a kickoff or worker process started by a test."""
    env = {k: v for k, v in os.environ.items() if k not in settings.to_environ()}
    env.update(settings.to_environ())
    env["WORKERPOOL_ENV_FILE"] = os.devnull
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra)
    return env


def run_command(
    module: str, args: list[str], env: dict[str, str], *, timeout: float = 240, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )
