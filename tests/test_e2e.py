"""The whole pipeline: kickoff -> dramatiq worker processes -> files, manifest and summary.

A real redis-server, real `dramatiq actors` processes started by `kickoff --local`, and the demo
world on 127.0.0.1 serving the Semrush mirror and the sites.
"""

from __future__ import annotations

import json
import re

from conftest import child_env, make_settings, run_command
from runcheck import check_finished_run

from pipeline.demo import INJECTED_FAILURES, demo_rankings, expected_outcomes
from pipeline.redis_server import EmbeddedRedis

# The three countries with injected failures, plus ones with real Semrush values and overlaps.
COUNTRIES = ["germany", "france", "japan", "angola", "argentina", "australia", "global", "brazil"]


def test_run_downloads_every_page_and_writes_one_summary(
    crawl_settings, demo_world, redis_server: EmbeddedRedis
):
    env = child_env(crawl_settings)
    result = run_command(
        "pipeline.kickoff",
        ["--countries", ",".join(COUNTRIES), "--local", "2", "--threads", "8", "--wait"],
        env,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    run_id = re.search(r"^run_id: (\S+)$", result.stdout, re.M).group(1)
    summary_path = re.search(r"^summary: (\S+)$", result.stdout, re.M).group(1)
    assert summary_path.endswith(f"{run_id}/summary.json")

    run = check_finished_run(crawl_settings.output_dir, run_id, demo_world.rankings, crawl_settings.top_n)
    assert list(run.summary["countries"]) == COUNTRIES
    assert run.summary["totals"]["jobs"] == len(COUNTRIES) * 20

    expected = expected_outcomes(COUNTRIES, crawl_settings, slow_seconds=5)
    for line in run.manifest:
        want = expected[(line["country"], line["domain"])]
        assert line["outcome"] == want.status, line
        if want.reason:
            assert line["reason"].startswith(want.reason), line
    failed = {line["domain"] for line in run.manifest if line["outcome"] != "saved"}
    assert failed == {d for d, kind in INJECTED_FAILURES.items() if kind != "http_500_once"}
    flaky = next(d for d, kind in INJECTED_FAILURES.items() if kind == "http_500_once")
    assert next(line for line in run.manifest if line["domain"] == flaky)["attempts"] == 2
    assert {f["domain"] for f in run.summary["failures"]} == failed

    # What was read from each ranking page is kept beside it, with the values Semrush showed.
    ranking = json.loads((crawl_settings.output_dir / run_id / "_sources" / "angola.json").read_text())
    assert [r["domain"] for r in ranking] == [s.domain for s in demo_world.rankings["angola"]]
    assert ranking[0]["visits"] == 9878417 and ranking[2]["change"] == 2  # real values, chatgpt.com "up 2"

    # Download once per run: a domain ranked by several countries was fetched once, then linked.
    reused = [line for line in run.manifest if line["reused"]]
    assert reused and run.summary["throughput"]["fetches_saved_by_dedup"] == len(reused)
    shared = {line["domain"] for line in reused}
    assert "google.com" in shared and demo_world.site_requests("google.com") == 1
    fetched = {line["domain"] for line in run.manifest if not line["reused"]}
    assert len(fetched) == len({line["domain"] for line in run.manifest}), "each domain downloaded once"

    # Status reads the same numbers back from Redis, for scripts.
    status = run_command("pipeline.status", [run_id, "--json"], env)
    assert status.returncode == 0, status.stderr
    view = json.loads(status.stdout)
    assert view["status"] == "finished" and view["settled"] == view["expected"] == len(run.manifest)
    assert view["saved"] == run.summary["totals"]["saved"]

    # One summary: the ledger says finished once; logs are JSON lines with context.
    client = redis_server.client()
    assert client.hget(f"wp:run:{run_id}:meta", "status") == "finished"
    log_lines = (crawl_settings.output_dir / run_id / "_logs" / "worker-0.log").read_text().splitlines()
    records = [json.loads(line) for line in log_lines if line.startswith("{")]
    settled = [r for r in records if r.get("message") == "page settled"]
    assert settled and {"run_id", "country", "rank", "domain", "url", "attempt", "outcome"} <= set(settled[0])


def test_demo_command_runs_everything_on_this_machine(tmp_path):
    """The README's demo path: no REDIS_URL, so kickoff starts the embedded Redis and two workers."""
    env = child_env(make_settings(output_dir=tmp_path / "out"))
    env.pop("REDIS_URL")
    result = run_command(
        "pipeline.kickoff", ["--demo", "--countries", "germany,france,angola"], env, cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr[-3000:]
    run_id = re.search(r"^run_id: (\S+)$", result.stdout, re.M).group(1)
    assert "| germany | 20 | 19 | 1 | 0 | ok |" in result.stdout  # the summary, on screen
    run = check_finished_run(tmp_path / "out", run_id, demo_rankings(), 20)
    assert run.summary["totals"] == {"jobs": 60, "saved": 59, "failed": 1, "dead_lettered": 0,
                                     "bytes": run.summary["totals"]["bytes"]}  # fmt: skip
    redis_dir = tmp_path / "out" / ".redis"
    assert any(redis_dir.glob("appendonly*")), "the embedded Redis persists its data"
    # The run can be inspected afterwards: status restarts the embedded Redis from its files.
    status = run_command("pipeline.status", ["--json"], env, cwd=tmp_path)
    assert status.returncode == 0, status.stderr
    assert json.loads(status.stdout)["run_id"] == run_id
