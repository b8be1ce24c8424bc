"""Faults with real processes: kill -9, SIGTERM to a process group, Redis restarts, poison
messages, enqueue failures, duplicate deliveries and lost messages.

Every test runs a real redis-server, real ``dramatiq actors`` processes and the demo world over
HTTP on 127.0.0.1, and checks the finished run on disk (files byte-identical, one manifest line
and one outcome per job, one summary).
"""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

from conftest import FAST, make_settings
from faults import (
    NS,
    DramatiqCommand,
    dead_letters,
    fleet,
    kill_worker,
    log_files,
    log_records,
    message,
    outcomes,
    push,
    push_job,
    queues_idle,
    report_figures,
    start_run,
    synthetic_run,
    track_recovery,
    wait_finished,
    wait_until,
    worker_child,
)
from runcheck import check_finished_run

from pipeline.demo import DemoWorld, site_body, site_profile
from pipeline.redis_server import EmbeddedRedis
from pipeline.settings import Settings

#: Demo countries with no injected failure: every page of theirs must end saved.
CLEAN_COUNTRIES = [
    "angola", "argentina", "australia", "austria", "belgium", "brazil",
    "canada", "greece", "india", "italy", "spain", "sweden",
]  # fmt: skip
#: Slow sites (latency x 20: up to 3 s a page) need longer read timeouts than FAST.
PATIENT = {"read_timeout": 6.0, "total_timeout": 10.0}


def settings_for(
    tmp_path: Path, redis_server: EmbeddedRedis, world: DemoWorld, **overrides: object
) -> Settings:
    return make_settings(
        redis_url=redis_server.url,
        output_dir=tmp_path / "out",
        semrush_base_url=world.semrush_base_url,
        site_url_template=world.site_url_template,
        **{**FAST, **overrides},
    )


def slow_domains(count: int, *, min_latency_ms: float = 100, prefix: str = "slow") -> list[str]:
    """Hostnames whose demo latency is at least ``min_latency_ms`` (before latency_scale)."""
    found, i = [], 0
    while len(found) < count:
        domain = f"{prefix}{i}.example"
        if site_profile(domain).latency_ms >= min_latency_ms and not site_profile(domain).redirect:
            found.append(domain)
        i += 1
    return found


def check_synthetic_run(output_dir: Path, client, run_id: str, jobs) -> dict:
    """Every job saved once, its file byte-identical to what the demo served, one summary."""
    settled = outcomes(client, run_id)
    assert set(settled) == {job.key for job in jobs}
    for job in jobs:
        line = settled[job.key]
        assert line["outcome"] == "saved", line
        assert (output_dir / job.path).read_bytes() == site_body(job.domain), job.path
    manifest = (output_dir / run_id / "manifest.jsonl").read_text().splitlines()
    assert len(manifest) == len(jobs)
    return settled


# --- 1. kill -9 ----------------------------------------------------------------------------------------


def test_kill9_one_then_several_workers_repeatedly(tmp_path, redis_server, request):
    """SIGKILL one worker, then two at once, then a restarted one: every job still settles,
    the fleet restarts each, and the jobs each dead process held settle within 30 s."""
    with DemoWorld(latency_scale=20) as world:
        settings = settings_for(tmp_path, redis_server, world, **PATIENT)
        client = redis_server.client()
        run_id = start_run(settings, CLEAN_COUNTRIES)
        log_dir = tmp_path / "logs"
        kills, trackers = [], []

        def kill(index: int) -> None:
            pid = wait_until(lambda: worker_child(f.procs[index].pid), 60, f"worker {index} to run")
            k = kill_worker(client, pid, log_dir, min_held=2)
            kills.append(k)
            t = threading.Thread(target=track_recovery, args=(client, k, 45))
            t.start()
            trackers.append(t)

        with fleet(settings, 3, log_dir, threads=3) as f:
            kill(0)
            time.sleep(2)
            kill(1)
            kill(2)
            time.sleep(3)
            kill(0)  # the process the fleet started after the first kill
            for t in trackers:
                t.join()
            waited = wait_finished(client, run_id, 120)
            restarts = f.restarts

    run = check_finished_run(settings.output_dir, run_id, world.rankings, settings.top_n)
    assert run.summary["totals"]["jobs"] == len(CLEAN_COUNTRIES) * 20
    assert run.summary["totals"]["saved"] == len(CLEAN_COUNTRIES) * 20, run.summary["failures"]
    assert restarts >= 4
    report_figures(
        request,
        "kill9_fast",
        {
            "jobs": run.summary["totals"]["jobs"],
            "kills": len(kills),
            "held": [k.held_count for k in kills],
            "reclaimed_s": [round(k.reclaimed_s or -1, 1) for k in kills],
            "recovered_s": [round(k.recovered_s or -1, 1) for k in kills],
            "restarts": restarts,
            "finished_after_last_kill_s": round(waited, 1),
        },
    )
    for k in kills:
        assert k.held_count >= 2
        assert k.recovered_s is not None and k.recovered_s < 30, (k, k.notes)
        # heartbeat 5 s + reclaim every 0.5 s: the dead worker's messages come back in ~6 s.
        assert k.reclaimed_s < settings.heartbeat_timeout_ms / 1000 + 5, k


def test_kill9_recovery_with_default_heartbeat_settings(tmp_path, redis_server, request):
    """The production defaults (HEARTBEAT_TIMEOUT_MS=15000, RECLAIM_INTERVAL=2) also bring a
    killed worker's jobs back well within 30 s."""
    defaults = Settings()
    with DemoWorld(latency_scale=20) as world:
        settings = settings_for(
            tmp_path,
            redis_server,
            world,
            heartbeat_timeout_ms=defaults.heartbeat_timeout_ms,
            reclaim_interval=defaults.reclaim_interval,
            reaper_interval=defaults.reaper_interval,
            reaper_lost_after=defaults.reaper_lost_after,
            reaper_deadline=defaults.reaper_deadline,
            **PATIENT,
        )
        assert settings.heartbeat_timeout_ms == 15_000 and settings.reclaim_interval == 2.0
        client = redis_server.client()
        run_id = start_run(settings, CLEAN_COUNTRIES[:3])
        log_dir = tmp_path / "logs"
        with fleet(settings, 2, log_dir, threads=4) as f:
            pid = wait_until(lambda: worker_child(f.procs[0].pid), 20, "worker 0 to run")
            k = track_recovery(client, kill_worker(client, pid, log_dir, min_held=2), 45)
            wait_finished(client, run_id, 60)
    run = check_finished_run(settings.output_dir, run_id, world.rankings, settings.top_n)
    assert run.summary["totals"]["saved"] == 60
    report_figures(
        request,
        "kill9_default_heartbeat",
        {
            "held": k.held_count,
            "reclaimed_s": round(k.reclaimed_s, 1),
            "recovered_s": round(k.recovered_s, 1),
        },
    )
    assert k.recovered_s is not None and k.recovered_s < 30, k.notes
    # Not before the heartbeat timeout: a live worker's jobs are never taken from it.
    assert k.reclaimed_s >= 15 - 1


# --- 2. SIGTERM to the whole process group -------------------------------------------------------------


def _slow_run(tmp_path, redis_server, world, count: int, **overrides):
    settings = settings_for(tmp_path, redis_server, world, **{**PATIENT, **overrides})
    client = redis_server.client()
    run_id, jobs = synthetic_run(client, settings, slow_domains(count))
    for job in jobs:
        push_job(client, job)
    return settings, client, run_id, jobs


def _in_flight(world: DemoWorld, jobs, at_least: int) -> int:
    return wait_until(
        lambda: (n := sum(world.site_requests(j.domain) > 0 for j in jobs)) >= at_least and n,
        30,
        f"{at_least} downloads in flight",
        interval=0.02,
    )


def _stranded(client) -> dict[str, int]:
    return {k: n for k in client.scan_iter(f"{NS}:__acks__.*") if (n := client.scard(k))}


def test_sigterm_to_process_group_finishes_or_requeues_inflight_jobs(tmp_path, redis_server, request):
    """Heroku/systemd style: SIGTERM reaches every process of ``dramatiq actors`` (main and
    workers), so each worker gets it twice. The running jobs finish within the grace period,
    the prefetched ones are put back, nothing is left in an acks set: a new worker completes the
    run at once. Heartbeat and reaper are set far out so that only the shutdown can save them."""
    with DemoWorld(serve_any_domain=True, latency_scale=25) as world:  # pages take 2.5-3.75 s
        settings, client, run_id, jobs = _slow_run(
            tmp_path, redis_server, world, 16,
            heartbeat_timeout_ms=600_000, reaper_lost_after=3600.0, reaper_deadline=3600.0,
        )  # fmt: skip
        log = tmp_path / "logs" / "sigterm.log"
        cmd = DramatiqCommand(settings, log, processes=2, threads=4, shutdown_timeout_ms=20_000).start()
        try:
            cmd.wait_booted(2)
            running = _in_flight(world, jobs, 8)
            signalled = time.monotonic()
            os.killpg(cmd.pgid, signal.SIGTERM)
            code = cmd.proc.wait(30)
            stopped_s = time.monotonic() - signalled
        finally:
            cmd.stop()
        text = log.read_text()
        settled_at_stop = len(outcomes(client, run_id))
        stranded = _stranded(client)
        ready = client.llen(f"{NS}:fetch")
        with fleet(settings, 1, tmp_path / "logs", threads=8):
            resumed_s = wait_finished(client, run_id, 30)
    report_figures(
        request,
        "sigterm_group",
        {
            "running_at_sigterm": running,
            "stopped_s": round(stopped_s, 1),
            "settled_at_stop": settled_at_stop,
            "requeued": ready,
            "resumed_run_finished_s": round(resumed_s, 1),
        },
    )
    assert "ignoring a repeated SIGTERM" in text  # the second SIGTERM did arrive
    assert "Killing worker process" not in text
    assert code == 0, text[-2000:]
    assert stopped_s < 20, "the workers did not stop within the shutdown timeout"
    assert not stranded, f"messages left in acks sets: {stranded}"
    assert settled_at_stop >= running, "a running job was abandoned instead of finished"
    assert settled_at_stop + ready == len(jobs)
    check_synthetic_run(settings.output_dir, client, run_id, jobs)


def test_contrast_a_real_second_sigterm_kills_and_strands(tmp_path, redis_server):
    """The contrast: a second SIGTERM well after the first (a deliberate hard stop) kills the
    workers; their running jobs are stranded in acks sets until the heartbeat reclaim."""
    with DemoWorld(serve_any_domain=True, latency_scale=25) as world:
        settings, client, run_id, jobs = _slow_run(tmp_path, redis_server, world, 8)
        log = tmp_path / "logs" / "sigterm.log"
        cmd = DramatiqCommand(settings, log, processes=1, threads=4, shutdown_timeout_ms=20_000).start()
        try:
            cmd.wait_booted(1)
            _in_flight(world, jobs, 4)
            os.killpg(cmd.pgid, signal.SIGTERM)
            time.sleep(1.3)  # past GracefulShutdown's 1 s window
            os.killpg(cmd.pgid, signal.SIGTERM)
            cmd.proc.wait(30)
        finally:
            cmd.stop()
        assert "Killing worker process" in log.read_text()
        assert _stranded(client), "a killed worker should have left its running jobs behind"
        with fleet(settings, 1, tmp_path / "logs", threads=8):
            wait_finished(client, run_id, 30)  # the reclaim (heartbeat 5 s) brings them back
    check_synthetic_run(settings.output_dir, client, run_id, jobs)


# --- 3. Redis restarted while retries wait in the delay queue (Dramatiq issue 527) -----------------------


def test_redis_restart_strands_no_delayed_retry(tmp_path, redis_server, request):
    """30 jobs get a 500 and wait 5-7.5 s in fetch.DQ, held in the worker's memory and acks set;
    Redis restarts meanwhile. The consumer fix puts them back and the run completes promptly.
    Heartbeat reclaim and reaper are pushed out of reach: nothing else could save them."""
    domains = [f"flaky{i}.example" for i in range(30)]
    with DemoWorld(serve_any_domain=True, flaky_domains=domains) as world:
        settings = settings_for(
            tmp_path,
            redis_server,
            world,
            retry_min_backoff_ms=5000,
            retry_max_backoff_ms=8000,
            heartbeat_timeout_ms=600_000,
            reaper_lost_after=3600.0,
            reaper_deadline=3600.0,
        )
        client = redis_server.client()
        run_id, jobs = synthetic_run(client, settings, domains)
        for job in jobs:
            push_job(client, job)
        log_dir = tmp_path / "logs"
        with fleet(settings, 1, log_dir, threads=8):
            wait_until(
                lambda: sum(client.scard(k) for k in client.scan_iter(f"{NS}:__acks__.*.fetch.DQ")) == 30,
                20,
                "30 retries held from fetch.DQ",
            )
            assert not outcomes(client, run_id)
            restarted = time.monotonic()
            redis_server.restart(down_for=1.0)
            waited = wait_finished(client, run_id, 40)
            after_restart_s = time.monotonic() - restarted
    settled = check_synthetic_run(settings.output_dir, client, run_id, jobs)
    assert all(line["attempts"] == 2 for line in settled.values())
    records = log_records(*log_files(log_dir))
    put_back = sum(
        r.get("count", 0) for r in records if "stranded by a consumer restart" in r.get("message", "")
    )
    report_figures(
        request,
        "redis_restart_dq",
        {"retries_waiting": 30, "put_back": put_back, "finished_after_restart_s": round(after_restart_s, 1)},
    )
    assert put_back >= 30
    # Backoff (<= 7.5 s) + consumer restart (3 s) + slack; the reclaim would take 600 s.
    assert waited < 25


# --- 4. A job that crashes its worker every time ------------------------------------------------------


def test_message_that_kills_its_worker_is_dead_lettered_as_poison(tmp_path, redis_server, request):
    """``crash_now`` calls os._exit(1): Dramatiq's Retries never sees it. After REDELIVERY_LIMIT
    crashes PoisonGuard dead-letters it with that reason; a run going on meanwhile completes."""
    with DemoWorld(serve_any_domain=True) as world:
        settings = settings_for(tmp_path, redis_server, world, heartbeat_timeout_ms=3000)
        client = redis_server.client()
        run_id, jobs = synthetic_run(client, settings, [f"site{i}.example" for i in range(40)])
        poison_id = push(client, "fetch", message("crash_now", "boom"))
        for job in jobs:
            push_job(client, job)
        log_dir = tmp_path / "logs"
        with fleet(settings, 2, log_dir, threads=4, modules=["crash_actor"]) as f:
            started = time.monotonic()
            wait_until(lambda: client.zscore(f"{NS}:fetch.XQ", poison_id), 60, "the poison in fetch.XQ")
            dead_lettered_s = time.monotonic() - started
            wait_finished(client, run_id, 30)
            restarts = f.restarts
    reason = dead_letters(client)[poison_id]["reason"]
    report_figures(
        request,
        "poison",
        {"crashes": restarts, "dead_lettered_s": round(dead_lettered_s, 1), "reason": reason},
    )
    limit = settings.redelivery_limit
    assert reason == f"poison: its worker died {limit} times while running it"
    # Usually one restart per crash; but a worker that dies while still booting keeps its
    # `dramatiq` main process waiting --worker-fork-timeout (30 s) before it exits and is restarted.
    assert 1 <= restarts <= limit
    assert not client.hexists("wp:deliveries", dead_letters(client)[poison_id]["message_id"])
    assert client.hget(f"{NS}:fetch.XQ.msgs", poison_id)
    check_synthetic_run(settings.output_dir, client, run_id, jobs)  # bystanders were not dead-lettered
    # Its last crash happened while it ran alone in its process: that one was certainly its own.
    logs = "".join(p.read_text() for p in log_dir.glob("*.log"))
    assert "running a message alone" in logs


# --- 5. A retry enqueued while Redis is down ---------------------------------------------------------


def test_retry_enqueued_while_redis_is_down_is_not_lost(tmp_path, redis_server):
    """The page answers 500 while Redis is stopped: the retry's enqueue waits for Redis (the
    broker retries for 30 s) instead of being swallowed, and the job settles once it is back."""
    domain = slow_domains(1, prefix="flaky")[0]
    with DemoWorld(serve_any_domain=True, latency_scale=25, flaky_domains=[domain]) as world:
        settings = settings_for(tmp_path, redis_server, world, **PATIENT)
        client = redis_server.client()
        run_id, jobs = synthetic_run(client, settings, [domain])
        push_job(client, jobs[0])
        log_dir = tmp_path / "logs"
        with fleet(settings, 1, log_dir, threads=2):
            wait_until(lambda: world.site_requests(domain), 30, "the first download", interval=0.02)
            redis_server.stop()  # the 500 arrives 2.5+ s later, while Redis is down
            time.sleep(6)
            redis_server.start()
            wait_finished(client, run_id, 40)
    records = log_records(*log_files(log_dir))
    assert any(r.get("message") == "Redis unavailable, retrying" for r in records), (
        "Redis was not down in time"
    )
    settled = check_synthetic_run(settings.output_dir, client, run_id, jobs)
    assert settled[jobs[0].key]["attempts"] == 2
    assert world.site_requests(domain) == 2


# --- 6. Duplicate delivery ------------------------------------------------------------------------------


def test_duplicate_deliveries_are_counted_and_written_once(tmp_path, redis_server):
    """Every fetch_page message twice in the queue, the group callback fired twice, and late
    duplicates after the summary: one outcome per job, one manifest line, one summary write."""
    with DemoWorld(serve_any_domain=True) as world:
        settings = settings_for(tmp_path, redis_server, world)
        client = redis_server.client()
        run_id, jobs = synthetic_run(client, settings, [f"dup{i}.example" for i in range(20)])
        for job in jobs:
            m = message("fetch_page", job.to_body())
            push(client, "fetch", m)
            push(client, "fetch", m)  # the same message, delivered again
        callback = message("summarize", run_id, "poland", queue="summary")
        log_dir = tmp_path / "logs"
        with fleet(settings, 2, log_dir, threads=8):
            wait_finished(client, run_id, 30)
            summary = settings.output_dir / run_id / "summary.json"
            mtime = summary.stat().st_mtime_ns
            requests_before = {j.domain: world.site_requests(j.domain) for j in jobs}
            # Late duplicates: a redelivered page, the group callback twice, run_complete again.
            push_job(client, jobs[0])
            push(client, "summary", callback)
            push(client, "summary", callback)
            push(client, "summary", message("summarize", run_id, queue="summary"))
            time.sleep(0.5)
            wait_until(lambda: queues_idle(client), 20, "the late duplicates to be processed")
    check_synthetic_run(settings.output_dir, client, run_id, jobs)
    assert summary.stat().st_mtime_ns == mtime, "the summary was written again"
    counts = client.hgetall(f"wp:run:{run_id}:counts")
    assert counts["settled"] == counts["saved"] == "20"
    records = log_records(*log_files(log_dir))
    assert sum(r.get("message") == "run summary written" for r in records) == 1
    assert world.site_requests(jobs[0].domain) == requests_before[jobs[0].domain], "a settled job ran again"
    ignored = [r for r in records if "duplicate" in r.get("message", "")]
    assert len(ignored) >= 21  # each job's second copy, plus the late one


# --- 7. A message lost behind the system's back --------------------------------------------------------


def test_reaper_re_enqueues_a_message_deleted_from_redis(tmp_path, redis_server, request):
    """HDEL + LREM a queued fetch_page message: nothing in Redis names the job any more, only
    the ledger. The reaper finds it unsettled and in no queue, and enqueues it again."""
    with DemoWorld(serve_any_domain=True) as world:
        settings = settings_for(tmp_path, redis_server, world, reaper_lost_after=3.0, reaper_interval=1.0)
        client = redis_server.client()
        run_id, jobs = synthetic_run(client, settings, [f"lost{i}.example" for i in range(10)])
        ids = [push_job(client, job) for job in jobs]
        victim = jobs[4]
        assert client.hdel(f"{NS}:fetch.msgs", ids[4]) == 1
        assert client.lrem(f"{NS}:fetch", 0, ids[4]) == 1
        log_dir = tmp_path / "logs"
        started = time.monotonic()
        with fleet(settings, 1, log_dir, threads=4):
            wait_finished(client, run_id, 30)
        finished_s = time.monotonic() - started
    check_synthetic_run(settings.output_dir, client, run_id, jobs)
    reaped = [
        r
        for r in log_records(*log_files(log_dir))
        if r.get("message") == "reaper enqueued again a job with no progress"
    ]
    report_figures(
        request, "reaper_lost_message", {"finished_s": round(finished_s, 1), "reaped": len(reaped)}
    )
    assert [r["job"] for r in reaped] == [victim.key]
    assert world.site_requests(victim.domain) == 1
