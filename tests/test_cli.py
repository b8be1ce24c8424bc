"""A user's mistakes end with one clear line and the documented exit code, never a traceback."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys

import psutil
import pytest
from conftest import child_env, make_settings, run_command

from pipeline import errors


def check_error(result, code: int, *phrases: str) -> None:
    assert result.returncode == code, (result.returncode, result.stderr)
    assert "Traceback" not in result.stderr + result.stdout
    for phrase in phrases:
        assert phrase in result.stderr, result.stderr


@pytest.fixture
def env(tmp_path, demo_world):
    settings = make_settings(output_dir=tmp_path / "out", semrush_base_url=demo_world.semrush_base_url)
    return child_env(settings)


def test_bad_flag(env):
    result = run_command("pipeline.kickoff", ["--bogus"], env)
    check_error(result, errors.EXIT_USAGE, "unrecognized arguments: --bogus", "hint:")


def test_bad_setting_value(env):
    result = run_command("pipeline.kickoff", ["--countries", "de"], {**env, "TOP_N": "lots"})
    check_error(result, errors.EXIT_USAGE, "TOP_N='lots' is not a valid int")


def test_unknown_country_suggests_close_matches_before_anything_is_enqueued(env):
    result = run_command("pipeline.kickoff", ["--countries", "germany,Germny,Untied Kingdom"], env)
    check_error(result, errors.EXIT_COUNTRY, "Germny", "germany", "united-kingdom")


def test_unreachable_redis(env):
    result = run_command(
        "pipeline.kickoff", ["--countries", "de", "--redis-url", "redis://127.0.0.1:1/0"], env
    )
    check_error(result, errors.EXIT_REDIS, "cannot reach Redis at redis://127.0.0.1:1/0", "hint:")


def test_output_folder_not_writable(env, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    result = run_command("pipeline.kickoff", ["--countries", "de", "--output-dir", str(blocker / "out")], env)
    check_error(result, errors.EXIT_OUTPUT, "is not writable", "hint:")


def test_semrush_unreachable(env):
    result = run_command(
        "pipeline.kickoff", ["--countries", "de"], {**env, "SEMRUSH_BASE_URL": "http://127.0.0.1:1"}
    )
    check_error(result, errors.EXIT_SEMRUSH, "Semrush is unreachable at http://127.0.0.1:1")


def test_status_of_a_redis_without_runs(redis_server, env):
    result = run_command("pipeline.status", ["--redis-url", redis_server.url], env)
    check_error(result, errors.EXIT_NOT_FOUND, "no run has been started")


def test_status_without_any_redis(env):
    result = run_command("pipeline.status", [], env)
    check_error(result, errors.EXIT_REDIS, "REDIS_URL is unset")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_a_stopped_kickoff_leaves_no_worker_behind(tmp_path, sig):
    """`timeout`, a closed terminal or a supervisor sends SIGTERM: workers and Redis stop too.
    Even after SIGKILL, which kickoff cannot handle, the kernel stops its workers."""
    env = child_env(make_settings(output_dir=tmp_path / "out"))
    env.pop("REDIS_URL")
    kickoff = subprocess.Popen(
        [sys.executable, "-m", "pipeline.kickoff", "--demo", "--countries", "germany"],
        env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    children: list[psutil.Process] = []
    try:
        assert kickoff.stdout.readline().startswith("run_id: ")
        children = psutil.Process(kickoff.pid).children(recursive=True)
        workers = [c for c in children if "dramatiq" in " ".join(c.cmdline())]
        redis_server = [c for c in children if "redis-server" in " ".join(c.cmdline())]
        assert workers and redis_server
        kickoff.send_signal(sig)
        kickoff.wait(60)
        if sig == signal.SIGTERM:
            assert kickoff.returncode == errors.EXIT_INTERRUPTED
            _, alive = psutil.wait_procs(children, timeout=30)
        else:
            _, alive = psutil.wait_procs(workers, timeout=30)
        assert not alive, [c.cmdline() for c in alive]
    finally:
        kickoff.kill()
        for child in children:  # after SIGKILL the embedded Redis outlives kickoff: by design
            with contextlib.suppress(psutil.NoSuchProcess):
                child.terminate()


def test_kickoff_warns_when_redis_may_lose_or_evict_jobs(env, redis_server):
    client = redis_server.client()
    client.config_set("appendonly", "no")
    client.config_set("maxmemory-policy", "allkeys-lru")
    result = run_command("pipeline.kickoff", ["--countries", "de", "--redis-url", redis_server.url], env)
    assert result.returncode == 0, result.stderr
    assert "persistence is off" in result.stderr or "append-only file is off" in result.stderr
    assert "maxmemory-policy is allkeys-lru" in result.stderr
    assert result.stdout.startswith("run_id: ")
    assert client.llen("dramatiq:discover") == 1, "enqueued all the same, with the warning"


@pytest.mark.parametrize(
    ("redis_url", "message"),
    [
        (None, "REDIS_URL is not set"),
        ("redis://127.0.0.1:1/0", "cannot reach Redis at redis://127.0.0.1:1/0"),
    ],
)
def test_a_worker_without_its_redis_says_so_and_exits(env, redis_url, message):
    env = {**env, "REDIS_URL": redis_url} if redis_url else {k: v for k, v in env.items() if k != "REDIS_URL"}
    result = run_command("dramatiq", ["actors", "--processes", "1", "--threads", "1"], env, timeout=60)
    check_error(result, errors.EXIT_REDIS, message, "hint:")
