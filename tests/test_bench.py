"""The benchmark's instrument: its world, its verifier, and a small end-to-end run (not timed).

No figure is asserted against a target here: a test machine's speed says nothing. What must hold
is that the world is deterministic, the verifier catches a wrong file, outcome or duplicate, and a
quick run of every contender through real processes finishes, verifies and reports every figure.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

pytest.importorskip("aiohttp")
pytest.importorskip("psutil")

from conftest import run_command  # noqa: E402

from pipeline.bench.world import HTTP_404, HTTP_500_ONCE, World, records_from_files, verify  # noqa: E402
from pipeline.countries import resolve_many  # noqa: E402
from pipeline.jobs import check_domain  # noqa: E402
from pipeline.semrush import parse_ranking  # noqa: E402


def crawl_perfectly(world: World, root: Path) -> list[dict]:
    """What a correct crawler ends with: the expected outcome of every job, files as served."""
    records = []
    for job in world.jobs:
        expected = world.expected(job)
        reason = f"{expected.reason}: HTTP 404" if expected.reason else ""
        record = {
            "country": job.country, "rank": job.rank, "domain": job.domain, "outcome": expected.outcome,
            "reason": reason, "attempts": expected.attempts, "path": None, "bytes": 0, "sha256": None,
        }  # fmt: skip
        if expected.outcome == "saved":
            body = world.body(job.domain)
            path = root / job.country / f"{job.rank:02d}-{job.domain}.html"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(body)
            record.update(path=path.relative_to(root).as_posix(), bytes=len(body))
            record["sha256"] = hashlib.sha256(body).hexdigest()
        records.append(record)
    return records


def test_world_is_deterministic_and_readable_by_workerpool():
    world = World("realistic", 400)
    again = World("realistic", 400)
    assert world.jobs == again.jobs and world.sites == again.sites
    assert len(world.jobs) == 400 and len(world.countries) == 20
    assert resolve_many(world.countries) and all(check_domain(d) for d in world.sites)
    kinds = {s.failure for s in world.sites.values()}
    assert {HTTP_404, HTTP_500_ONCE} <= kinds
    assert len({j.domain for j in world.jobs}) < len(world.jobs)  # popular domains are shared
    page = world.ranking_pages()[world.countries[0]]
    assert [s.domain for s in parse_ranking(page)] == [j.domain for j in world.jobs[:20]]
    for domain, site in list(world.sites.items())[:50]:
        assert len(world.body(domain)) == site.size and domain.encode() in world.body(domain)
    clean = World("clean", 100)
    assert {(s.latency_s, s.size, s.failure) for s in clean.sites.values()} == {(0.05, 50_000, None)}
    assert len(clean.sites) == len(clean.jobs)


def test_verification_accepts_a_correct_crawl_and_catches_mistakes(tmp_path: Path):
    world = World("realistic", 200)
    records = crawl_perfectly(world, tmp_path)
    assert verify(world, records, tmp_path).ok

    saved = next(r for r in records if r["outcome"] == "saved")
    (tmp_path / saved["path"]).write_bytes(b"not what was served")
    failed = next(r for r in records if r["outcome"] == "failed")
    failed.update(outcome="saved")
    flaky = next(r for r in records if r["attempts"] == 2)
    flaky["attempts"] = 1
    check = verify(world, [*records, records[0]], tmp_path)
    assert not check.ok
    text = "\n".join(check.problems)
    assert (
        "settled twice" in text and "not the" in text and "expected failed" in text and "1 attempts" in text
    )
    assert "jobs not settled" in "\n".join(verify(world, records[1:], tmp_path).problems)


def test_records_from_files_show_what_is_missing_or_wrong_on_disk(tmp_path: Path):
    world = World("clean", 40)
    for job in world.jobs:
        path = tmp_path / job.storage_path("plain")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(world.body(job.domain))
    assert verify(world, records_from_files(world, tmp_path, "plain"), tmp_path).ok

    missing, wrong = world.jobs[3], world.jobs[7]
    (tmp_path / missing.storage_path("plain")).unlink()
    (tmp_path / wrong.storage_path("plain")).write_bytes(b"truncated")
    check = verify(world, records_from_files(world, tmp_path, "plain"), tmp_path)
    assert not check.ok and (check.saved, check.failed) == (39, 1)
    text = "\n".join(check.problems)
    assert f"{missing.key}: failed" in text and f"{wrong.key}:" in text and "not the 50000 served" in text


def leftovers(folder: Path) -> list[str]:
    """Processes still running that the benchmark started for ``folder`` (by arguments or OUTPUT_DIR)."""
    import psutil  # noqa: PLC0415 - skipped above when missing

    found = []
    for process in psutil.process_iter(["pid", "cmdline"]):
        try:
            text = " ".join(process.info["cmdline"] or []) + " " + process.environ().get("OUTPUT_DIR", "")
        except psutil.Error:
            continue
        if str(folder) in text:
            found.append(f"{process.info['pid']}: {text[:200]}")
    return found


def test_the_report_shows_the_spread_of_rounds_and_warns_when_the_machine_drifted():
    from pipeline.bench.runner import Contender, ProfileResult, _spread  # noqa: PLC0415

    loop, pool = Contender("loop", 2, 32), Contender("workerpool", 2, 32)

    def run(pps: float, cpu: float) -> dict:
        return {"pages_per_s": pps, "cpu_crawler_per_1k": cpu, "verified": {"ok": True}}

    steady = ProfileResult({}, [loop, pool])
    steady.runs = {loop.name: [run(1100, 0.5), run(1150, 0.55)], pool.name: [run(340, 4.2), run(350, 4.4)]}
    lines = _spread(steady)
    assert lines == [
        "   spread over 2 rounds, aiohttp loop x64: pages/s 1100-1150, crawler CPU/1k 0.5-0.55",
        "   spread over 2 rounds, workerpool 2x32: pages/s 340-350, crawler CPU/1k 4.2-4.4",
    ]
    drifted = ProfileResult({}, [loop, pool])
    drifted.runs = {loop.name: [run(1100, 0.5), run(640, 1.56)], pool.name: [run(340, 4.2), run(296, 5.07)]}
    assert "WARNING: the loop's CPU per page varied x3.1" in _spread(drifted)[-1]


def test_ratios_pair_the_contenders_of_each_round():
    from pipeline.bench.runner import Contender, ProfileResult  # noqa: PLC0415

    loop, pool = Contender("loop", 2, 32), Contender("workerpool", 2, 32)

    def run(pps: float, ok: bool = True) -> dict:
        return {"pages_per_s": pps, "verified": {"ok": ok}}

    result = ProfileResult({}, [loop, pool])
    # The machine slowed after round 1; round 4's WorkerPool run failed its verification.
    result.runs = {
        loop.name: [run(1000), run(400), run(500), run(1000)],
        pool.name: [run(600), run(240), run(250), run(100, ok=False)],
    }
    # Each round's ratio: 0.6, 0.6, 0.5 (round 4 left out). A ratio of the medians (250 / 750)
    # would be 0.33, the machine's drift taken for WorkerPool's.
    assert result.paired_ratio(pool.name, loop.name, "pages_per_s") == 0.6


def test_quick_benchmark_runs_every_contender_and_verifies(tmp_path: Path):
    out = tmp_path / "bench.json"
    result = run_command(
        "pipeline.bench",
        ["--quick", "--json-out", str(out), "--work-dir", str(tmp_path), "--max-seconds", "150"],
        env=None,
        timeout=200,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "verification: all runs passed" in result.stdout
    report = json.loads(out.read_text())
    assert report["verified"] and not report["errors"]
    assert set(report["profiles"]) == {"clean", "realistic"}
    for profile in report["profiles"].values():
        loop = profile["aiohttp loop x16"]["median"]
        pool = profile["workerpool 2x8"]
        assert loop["pages_per_s"] > 0 and loop["cpu_crawler_per_1k"] > 0
        for key in ("pages_per_s", "wall_s", "cpu_crawler_per_1k", "cpu_master_per_1k", "cpu_redis_per_1k",
                    "cpu_web_per_1k", "peak_rss_mb", "redis_cmds_per_page"):  # fmt: skip
            assert pool["median"][key] > 0, key
        assert pool["ratio_to_loop"]["pages_per_s"] > 0
    # The plain Dramatiq + requests actor: in the clean profile only, every page saved as served.
    plain_name = "plain dramatiq+requests 2x8"
    assert plain_name not in report["profiles"]["realistic"]["runs"]
    clean = report["profiles"]["clean"]
    (plain_run,) = clean["runs"][plain_name]
    assert plain_run["verified"] == {"ok": True, "problems": [], "saved": 200, "failed": 0}
    assert plain_run["dead_lettered"] == 0 and plain_run["site_requests"] >= 200
    plain = clean[plain_name]["median"]
    for key in ("pages_per_s", "cpu_crawler_per_1k", "cpu_master_per_1k", "cpu_redis_per_1k",
                "peak_rss_mb", "redis_cmds_per_page"):  # fmt: skip
        assert plain[key] > 0, key
    assert set(clean["workerpool 2x8"]["ratio_to_plain"]) == {
        "pages_per_s", "cpu_crawler_per_1k", "cpu_total_per_1k"
    }  # fmt: skip
    assert all(v > 0 for v in clean["workerpool 2x8"]["ratio_to_plain"].values())
    assert "workerpool 2x8 / plain: pages/s x" in result.stdout
    # The download floor: WorkerPool's download alone, clean profile only, every page saved as served.
    floor_name = "download floor 2x8"
    assert floor_name not in report["profiles"]["realistic"]["runs"]
    (floor_run,) = clean["runs"][floor_name]
    assert floor_run["verified"] == {"ok": True, "problems": [], "saved": 200, "failed": 0}
    assert floor_run["site_requests"] == 200
    floor = clean[floor_name]["median"]
    assert floor["pages_per_s"] > 0 and floor["peak_rss_mb"] > 0
    # Its CPU counts its forked worker processes: far more than the idle parent alone could spend.
    assert floor["cpu_crawler_per_1k"] > 0.2, floor
    assert all(v > 0 for v in clean["workerpool 2x8"]["ratio_to_floor"].values())
    assert "workerpool 2x8 / floor: pages/s x" in result.stdout
    targets = {(t["profile"], t["target"]) for t in report["targets"]}
    assert ("realistic", "same pages saved, same failures") in targets
    assert next(t for t in report["targets"] if t["target"] == "same pages saved, same failures")["ok"]
    assert not list(tmp_path.glob("wp-bench-*")), "the run's files were not cleaned up"
    assert not leftovers(tmp_path)


def test_benchmark_stops_everything_when_its_time_is_up(tmp_path: Path):
    result = run_command(
        "pipeline.bench",
        ["--quick", "--profile", "clean", "--work-dir", str(tmp_path), "--max-seconds", "4"],
        env=None,
        timeout=60,
    )
    assert result.returncode == 4, result.stdout[-2000:] + result.stderr[-2000:]
    assert "ran out" in result.stderr
    assert not leftovers(tmp_path)
