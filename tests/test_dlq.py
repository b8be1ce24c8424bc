"""``python -m pipeline.dlq`` against a real Redis holding dead letters and quarantined payloads.

Entries are written where the system writes them: encoded Dramatiq messages in
``dramatiq:<queue>.XQ`` (+ ``.msgs``) with a reason in ``wp:deadletters``, payloads through the
broker's own ``quarantine``, and the run through its ledger.
"""

from __future__ import annotations

import json
import uuid

import dramatiq
import pytest
from conftest import child_env, make_settings, run_command

from pipeline.broker import QUARANTINE, build_broker
from pipeline.jobs import FetchJob
from pipeline.ledger import ACTIVE_RUNS, RunLedger, now_ms
from pipeline.middleware.deadletter import DEAD_LETTERS
from pipeline.settings import Settings

RUN = "20261121T101500Z-3fa2"
OTHER_RUN = "20261120T090000Z-beef"
TRACEBACK = "Traceback (most recent call last):\n  File 'x.py', line 1\nTimeoutError: read timed out\n"


@pytest.fixture
def settings(tmp_path, redis_server) -> Settings:
    return make_settings(redis_url=redis_server.url, output_dir=tmp_path / "out")


@pytest.fixture
def client(redis_server):
    return redis_server.client()


def dlq(settings: Settings, *args: str):
    return run_command("pipeline.dlq", list(args), child_env(settings), timeout=60)


def start_run(client, run_id: str = RUN, countries: tuple[str, ...] = ("germany",)) -> tuple[RunLedger, list]:
    ledger = RunLedger(client, run_id)
    ledger.create(countries, {"started_at": "2026-11-21T10:15:00+00:00", "top_n": 2})
    jobs = [
        FetchJob.create(run_id, "germany", r, f"site{r}.example.com", "https://{domain}/") for r in (1, 2)
    ]
    ledger.record_discovery("germany", jobs, {"status": "ok", "jobs": 2})
    return ledger, jobs


def message(actor: str, queue: str, *args: object, **options: object) -> dramatiq.Message:
    return dramatiq.Message(queue_name=queue, actor_name=actor, args=args, kwargs={}, options=options)


def dead_letter(client, msg: dramatiq.Message, reason: str | None, run_id: str | None = RUN) -> str:
    """What Dramatiq's nack and WorkerPool's dead_letter leave in Redis."""
    redis_id = str(uuid.uuid4())
    queue = msg.queue_name.removesuffix(".DQ")
    client.zadd(f"dramatiq:{queue}.XQ", {redis_id: now_ms() - 65_000})
    client.hset(
        f"dramatiq:{queue}.XQ.msgs", redis_id, msg.copy(options={"redis_message_id": redis_id}).encode()
    )
    if reason is not None:
        record = {
            "kind": "dead_lettered",
            "reason": reason,
            "at": now_ms(),
            "actor": msg.actor_name,
            "queue": msg.queue_name,
            "message_id": msg.message_id,
            "run_id": run_id,
        }
        client.hset(DEAD_LETTERS, redis_id, json.dumps(record))
    return redis_id


def dead_fetch(
    client, ledger: RunLedger, job: FetchJob, reason: str = "retries exhausted: TimeoutError"
) -> str:
    """A fetch_page job that used up its retries: dead-lettered and settled as such."""
    msg = message("fetch_page", "fetch", job.to_body(), retries=5, traceback=TRACEBACK, requeue_timestamp=1)
    ledger.settle(job, job.outcome("dead_lettered", reason=reason))
    return dead_letter(client, msg, reason)


def quarantine(settings: Settings, raw: bytes, reason: str = "undecodable payload: JSONDecodeError") -> str:
    return build_broker(settings).quarantine("fetch", reason, raw=raw)


def entries(settings: Settings, *args: str) -> list[dict]:
    result = dlq(settings, "list", *args, "--json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_list_and_show_dead_letters_and_quarantine(settings, client):
    ledger, jobs = start_run(client)
    dead = dead_fetch(client, ledger, jobs[1])
    hostile = b"\xff\x1b[31m{not json " + RUN.encode()
    quarantined = quarantine(settings, hostile)
    # Dead-lettered by Dramatiq itself (unknown actor): no reason, no run.
    stray = dead_letter(client, message("vanished", "summary", retries=1, traceback=TRACEBACK), None)

    listed = entries(settings)  # the latest run by default
    assert [(e["id"], e["kind"]) for e in listed] == [(dead, "dead_lettered"), (quarantined, "quarantined")]
    assert listed[0]["job"] == "germany/02" and listed[0]["actor"] == "fetch_page"
    assert listed[0]["reason"] == "retries exhausted: TimeoutError" and listed[0]["age_s"] >= 60
    assert listed[1]["run_id"] == RUN and listed[1]["queue"] == "fetch"

    every = {e["id"]: e for e in entries(settings, "--all")}
    assert set(every) == {dead, quarantined, stray}
    assert every[stray]["run_id"] is None
    assert every[stray]["reason"] == "(no reason recorded) TimeoutError: read timed out"

    text = dlq(settings, "list")
    assert text.returncode == 0, text.stderr
    assert f"run {RUN}: 1 dead_lettered, 1 quarantined" in text.stdout
    assert dead[:8] in text.stdout and "germany/02" in text.stdout and "1m0" in text.stdout
    assert "1 more in other runs or in no run" in text.stdout
    assert "\x1b" not in text.stdout

    shown = dlq(settings, "show", dead[:6])
    assert shown.returncode == 0, shown.stderr
    assert f"id:          {dead}" in shown.stdout and "retries:     5" in shown.stdout
    assert "site2.example.com" in shown.stdout and "TimeoutError: read timed out" in shown.stdout

    raw = dlq(settings, "show", quarantined)
    assert raw.returncode == 0, raw.stderr
    assert "\x1b" not in raw.stdout and "\\x1b[31m" in raw.stdout and "\\xff" in raw.stdout
    detail = json.loads(dlq(settings, "show", quarantined, "--json").stdout)
    assert detail["raw_encoding"] == "base64" and detail["bytes"] == len(hostile)
    assert detail["message"] is None and detail["reason"].startswith("undecodable payload")


def test_requeue_sends_a_fresh_copy_and_reopens_the_finished_run(settings, client):
    ledger, jobs = start_run(client)
    ledger.settle(jobs[0], jobs[0].outcome("saved"))
    dead = dead_fetch(client, ledger, jobs[1])
    ledger.finish("/out/summary.json", "2026-11-21T10:20:00+00:00")
    client.hset("wp:deliveries", json.loads(client.hget("dramatiq:fetch.XQ.msgs", dead))["message_id"], 4)

    result = dlq(settings, "requeue", dead[:8])
    assert result.returncode == 0, result.stderr
    assert "job germany/02 unsettled" in result.stdout and f"run {RUN} re-opened" in result.stdout

    (queued,) = client.lrange("dramatiq:fetch", 0, -1)
    sent = json.loads(client.hget("dramatiq:fetch.msgs", queued))
    assert sent["actor_name"] == "fetch_page" and sent["queue_name"] == "fetch"
    assert sent["args"][0] == jobs[1].to_body()
    assert sent["options"]["retries"] == 0 and sent["options"]["redis_message_id"] == queued
    assert "traceback" not in sent["options"] and "requeue_timestamp" not in sent["options"]
    assert not client.exists("dramatiq:fetch.XQ", "dramatiq:fetch.XQ.msgs", DEAD_LETTERS, "wp:deliveries")

    snapshot = ledger.snapshot()
    assert "germany/02" not in ledger.outcomes() and "germany/02" in ledger.unsettled()
    assert snapshot.counts["settled"] == 1 and snapshot.counts["dead_lettered"] == 0
    assert snapshot.meta["status"] == "running" and client.sismember(ACTIVE_RUNS, RUN)
    assert entries(settings) == []


def test_requeue_keeps_an_outcome_the_job_reached_since(settings, client):
    ledger, jobs = start_run(client)
    # A retry that could not be enqueued: dead-lettered with no reason, re-sent by the reaper.
    dead = dead_letter(client, message("fetch_page", "fetch", jobs[0].to_body(), retries=1), None)
    ledger.settle(jobs[0], jobs[0].outcome("saved"))

    result = dlq(settings, "requeue", dead)
    assert result.returncode == 0, result.stderr
    assert "job germany/01 has settled as saved since" in result.stdout
    assert ledger.outcomes()["germany/01"]["outcome"] == "saved"
    assert client.llen("dramatiq:fetch") == 1 and entries(settings) == []


def test_requeue_of_a_discovery_forgets_only_a_failed_one(settings, client):
    ledger, _ = start_run(client, countries=("germany", "france"))
    ledger.record_discovery("france", [], {"status": "failed", "reason": "CountryNotRanked", "jobs": 0})
    summarize = json.loads(message("summarize", "summary", RUN, "france").encode())
    failed = dead_letter(
        client, message("discover_country", "discover", RUN, "france", pipe_target=summarize), "x"
    )
    done = dead_letter(
        client, message("discover_country", "discover", RUN, "germany"), "poison: died 3 times"
    )

    result = dlq(settings, "requeue", "--run", RUN)
    assert result.returncode == 0, result.stderr
    assert (
        "failed discovery of france forgotten" in result.stdout and "requeued 2 message(s)" in result.stdout
    )

    assert ledger.discovery("france") is None and "discover:france" in ledger.unsettled()
    assert ledger.discovery("germany")["status"] == "ok", "a successful discovery holds jobs: kept"
    assert ledger.snapshot().expected == 2
    sent = [
        json.loads(client.hget("dramatiq:discover.msgs", i))
        for i in client.lrange("dramatiq:discover", 0, -1)
    ]
    assert sorted(m["args"][1] for m in sent) == ["france", "germany"]
    assert next(m for m in sent if m["args"][1] == "france")["options"]["pipe_target"] == summarize
    assert not client.exists("dramatiq:discover.XQ") and not client.hmget(DEAD_LETTERS, [failed, done])[0]


def test_quarantined_payloads_are_not_requeued_unless_forced_and_valid(settings, client):
    ledger, jobs = start_run(client)
    garbage = quarantine(settings, b"\x00garbage " + RUN.encode())
    valid = quarantine(settings, message("fetch_page", "fetch", jobs[0].to_body()).encode(), "suspicious")

    refused = dlq(settings, "requeue", garbage)
    assert refused.returncode == 2
    assert "cannot be requeued" in refused.stderr and "Traceback" not in refused.stderr
    assert dlq(settings, "requeue", "--run", RUN, "--kind", "quarantined").returncode == 2
    assert dlq(settings, "requeue", valid).returncode == 2, "valid bytes still need --force"
    assert dlq(settings, "requeue", "--force", garbage).returncode == 2, "--force needs a valid message"
    assert client.zcard(QUARANTINE) == 2 and client.llen("dramatiq:fetch") == 0

    huge = message("fetch_page", "fetch", {**jobs[1].to_body(), "pad": "x" * settings.max_message_bytes})
    oversized = quarantine(settings, huge.encode(), "message exceeds MAX_MESSAGE_BYTES")
    too_big = dlq(settings, "requeue", "--force", oversized)
    assert too_big.returncode == 2 and "exceed MAX_MESSAGE_BYTES" in too_big.stderr
    assert dlq(settings, "purge", oversized, "--yes").returncode == 0

    forced = dlq(settings, "requeue", "--force", valid)
    assert forced.returncode == 0, forced.stderr
    (queued,) = client.lrange("dramatiq:fetch", 0, -1)
    assert json.loads(client.hget("dramatiq:fetch.msgs", queued))["args"][0] == jobs[0].to_body()
    assert [e["id"] for e in entries(settings)] == [garbage]
    assert valid not in ledger.rejected() and garbage in ledger.rejected()


def test_purge_asks_then_deletes(settings, client):
    ledger, jobs = start_run(client)
    dead = dead_fetch(client, ledger, jobs[1])
    quarantined = quarantine(settings, b"{broken " + RUN.encode())

    refused = dlq(settings, "purge", dead)
    assert refused.returncode == 2 and "--yes" in refused.stderr
    assert len(entries(settings)) == 2

    result = dlq(settings, "purge", "--run", RUN, "--kind", "quarantined", "--yes")
    assert result.returncode == 0, result.stderr
    assert [e["id"] for e in entries(settings)] == [dead]
    assert not client.exists(QUARANTINE, "wp:quarantine:msgs")

    assert dlq(settings, "purge", dead, "--yes").returncode == 0
    assert entries(settings) == []
    assert not client.exists("dramatiq:fetch.XQ", "dramatiq:fetch.XQ.msgs", DEAD_LETTERS)
    assert ledger.outcomes()["germany/02"]["outcome"] == "dead_lettered", "purge keeps the ledger"
    assert quarantined not in {e["id"] for e in entries(settings, "--all")}


def test_unknown_ids_and_runs_exit_7(settings, client):
    start_run(client)
    for args in (["show", "deadbeef"], ["requeue", "deadbeef"], ["purge", "deadbeef", "--yes"]):
        result = dlq(settings, *args)
        assert result.returncode == 7, (args, result.stderr)
        assert "no dead-lettered or quarantined message 'deadbeef'" in result.stderr
    missing = dlq(settings, "list", OTHER_RUN)
    assert missing.returncode == 7 and f"no run '{OTHER_RUN}'" in missing.stderr


def test_bad_arguments_exit_2(settings, client):
    for args in (
        ["requeue"],
        ["purge", "abc", "--run", RUN],
        ["list", RUN, "--all"],
        ["requeue", "a", "--kind", "quarantined"],
    ):
        result = dlq(settings, *args)
        assert result.returncode == 2, (args, result.stderr)
        assert "hint:" in result.stderr and "Traceback" not in result.stderr


def test_unreachable_redis_exits_3_with_one_line(settings):
    for args in (["list"], ["show", "abc"], ["requeue", "abc"], ["purge", "--run", RUN, "--yes"]):
        result = dlq(settings, *args, "--redis-url", "redis://127.0.0.1:1/0")
        assert result.returncode == 3, (args, result.stderr)
        lines = result.stderr.strip().splitlines()
        assert lines[0].startswith("error: cannot reach Redis at redis://127.0.0.1:1/0")
        assert len(lines) == 2 and lines[1].startswith("  hint:") and "Traceback" not in result.stderr
