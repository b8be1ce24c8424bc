"""Chaos: two full demo runs at once (41 countries x 20 pages each = 1,640 jobs) through a fleet
of worker processes that are SIGKILLed at random every few seconds, a Redis restart in the
middle and garbage pushed into the queues. Then every promise is checked on disk and in Redis.

Figures (jobs, kills, restarts, garbage, lost, duplicates, time to recover after each kill)
are shown in the terminal even under ``pytest -q`` and saved to
``.pytest_cache/d/workerpool/chaos.json``.
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections import Counter

from conftest import FAST, make_settings
from faults import (
    NS,
    dead_letters,
    files_outside,
    fleet,
    kill_worker,
    log_files,
    log_records,
    message,
    push,
    report_figures,
    start_run,
    track_recovery,
    wait_finished,
    worker_child,
)
from runcheck import check_finished_run

from pipeline.demo import DemoWorld

WORKERS = 4
KILL_EVERY_S = (0.7, 1.8)


def _garbage(run_id: str, body: dict | None) -> list[bytes | object]:
    items: list[bytes | object] = [
        b"\x00\xff not a message " + run_id.encode(),
        f'{{"run_id": "{run_id}", "args": '.encode(),
        b"[1, 2, 3]",
        message("no_such_actor", run_id),
        message("fetch_page", run_id),
    ]
    if body:
        items += [
            message("fetch_page", {**body, "path": f"{run_id}/../../escape.html"}),
            message("fetch_page", {**body, "url": "file:///etc/passwd"}),
            message("fetch_page", {**body, "pad": "x" * 20_000}),
        ]
    return items


def test_chaos_kills_redis_restart_and_garbage(tmp_path, redis_server, request):
    started = time.monotonic()
    # Slow sites keep the run going long enough for every fault to land, however fast the workers.
    with DemoWorld(slow_seconds=3, latency_scale=4.0) as world:
        settings = make_settings(
            redis_url=redis_server.url,
            output_dir=tmp_path / "out",
            semrush_base_url=world.semrush_base_url,
            site_url_template=world.site_url_template,
            # A kill every second or so, aimed at processes holding work, is far above any real
            # crash rate: a job that keeps landing in killed processes (even running alone, as a
            # suspect) would be taken for poison. This test is about delivery; poison detection
            # has its own test in test_faults.py.
            **{**FAST, "redelivery_limit": 100},
        )
        client = redis_server.client()
        countries = world.countries
        log_dir = tmp_path / "logs"
        kills, trackers, garbage_ids = [], [], []
        stop = threading.Event()
        redis_restarts = 0
        rng = random.Random()

        with fleet(settings, WORKERS, log_dir, threads=8) as f:
            run_ids = [start_run(settings, countries), start_run(settings, countries)]
            expected_jobs = len(countries) * 20 * len(run_ids)

            def settled() -> int:
                return sum(int(client.hget(f"wp:run:{r}:counts", "settled") or 0) for r in run_ids)

            def inject() -> None:
                bodies = client.hvals(f"wp:run:{run_ids[0]}:jobs")
                body = json.loads(bodies[0]) if bodies else None
                for item in _garbage(run_ids[0], body):
                    garbage_ids.append(push(client, "fetch", item))

            def chaos() -> None:
                nonlocal redis_restarts
                injected_at = 0
                while not stop.wait(rng.uniform(*KILL_EVERY_S)):
                    try:
                        if len(garbage_ids) < 40 and time.monotonic() - injected_at > 3:
                            injected_at = time.monotonic()
                            inject()
                        if not redis_restarts and settled() > expected_jobs * 0.4:
                            redis_server.restart(down_for=1.0)
                            redis_restarts += 1
                            continue
                        victims = [rng.randrange(WORKERS)]
                        if len(kills) == 3:
                            victims = [0, 1]  # once, two at the same time
                        for index in victims:
                            pid = worker_child(f.procs[index].pid)
                            if pid is None:
                                continue
                            k = kill_worker(client, pid, log_dir, min_held=1, timeout=5)
                            kills.append(k)
                            t = threading.Thread(target=track_recovery, args=(client, k, 60), daemon=True)
                            t.start()
                            trackers.append(t)
                    except AssertionError:
                        continue  # that worker was still booting or idle: pick another next time
                    except Exception as e:  # Redis restarting under our feet
                        print("chaos loop:", repr(e))

            chaos_thread = threading.Thread(target=chaos, daemon=True)
            chaos_thread.start()
            try:
                for run_id in run_ids:
                    wait_finished(client, run_id, 170 - (time.monotonic() - started))
            finally:
                stop.set()
                chaos_thread.join()
            for t in trackers:
                t.join()
            worker_restarts = f.restarts
    elapsed = time.monotonic() - started

    # A SIGKILLed download leaves its hidden temporary file (never a half page under the real
    # name). Only processes this test killed may have left one; they are removed before runcheck.
    killed = {k.pid for k in kills}
    leftovers = list(settings.output_dir.rglob(".*.part"))
    for part in leftovers:
        assert int(part.name.split(".")[-4]) in killed, part
        part.unlink()

    # Every job settled exactly once; files byte-identical; summary == manifest (runcheck).
    total_jobs = settled_total = 0
    outcomes = Counter()
    for run_id in run_ids:
        run = check_finished_run(settings.output_dir, run_id, world.rankings, settings.top_n)
        counts = client.hgetall(f"wp:run:{run_id}:counts")
        assert int(counts["settled"]) == int(counts["expected"]) == len(run.manifest) == len(countries) * 20
        total_jobs += len(run.manifest)
        settled_total += int(counts["settled"])
        outcomes.update(line["outcome"] for line in run.manifest)
        # No real job is lost to the chaos: not even dead-lettered as poison.
        assert not [line for line in run.manifest if line["outcome"] == "dead_lettered"]
    records = log_records(*log_files(log_dir))
    summaries = Counter(r.get("run_id") for r in records if r.get("message") == "run summary written")
    assert all(summaries[r] == 1 for r in run_ids), summaries
    redeliveries = sum("duplicate" in r.get("message", "") for r in records)

    # Garbage: every piece quarantined or dead-lettered, none run; no file outside OUTPUT_DIR.
    letters = dead_letters(client)
    quarantine = client.zcard("wp:quarantine")
    handled = [g for g in garbage_ids if g in letters or client.zscore(f"{NS}:fetch.XQ", g) is not None]
    assert quarantine + len(handled) == len(garbage_ids), (quarantine, len(handled), len(garbage_ids))
    assert files_outside(tmp_path, [settings.output_dir, tmp_path / "redis", log_dir]) == []

    recover = [round(k.recovered_s, 1) if k.recovered_s is not None else None for k in kills]
    figures = {
        "jobs": total_jobs,
        "runs": len(run_ids),
        "outcomes": dict(outcomes),
        "kills": len(kills),
        "worker_restarts": worker_restarts,
        "redis_restarts": redis_restarts,
        "garbage_injected": len(garbage_ids),
        "garbage_quarantined": quarantine,
        "garbage_dead_lettered": len(handled),
        "lost": expected_jobs - settled_total,
        "duplicates": total_jobs
        - len({(r, k) for r in run_ids for k in client.hkeys(f"wp:run:{r}:outcomes")}),
        "redeliveries_absorbed": redeliveries,
        "temp_files_left_by_kills": len(leftovers),
        "held_per_kill": [k.held_count for k in kills],
        "reclaim_s": [round(k.reclaimed_s, 1) if k.reclaimed_s is not None else None for k in kills],
        "recover_s": recover,
        "elapsed_s": round(elapsed, 1),
    }
    report_figures(request, "chaos", figures)
    assert total_jobs >= 1000
    assert len(kills) >= 5 and redis_restarts == 1 and len(garbage_ids) >= 10
    assert worker_restarts >= len(kills)
    assert figures["lost"] == 0 and figures["duplicates"] == 0
    for k in kills:
        # Back in the queues within 30 s of the kill (heartbeat 5 s + reclaim), and every job it
        # held settled in the end. How long settling took is reported, not bounded, here: under
        # random kills a reclaimed job can be held by the next victim, or wait out the domain
        # claim (11 s) of a killed peer. test_faults bounds it for isolated kills.
        assert k.reclaimed_s is not None and k.reclaimed_s < 30, (k.pid, k.notes)
        assert k.recovered_s is not None, (k.pid, k.reclaimed_s, k.notes)
