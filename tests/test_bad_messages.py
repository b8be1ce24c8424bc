"""Bad messages pushed straight into Redis, the way Dramatiq enqueues (HSET <q>.msgs id payload;
RPUSH <q> id), interleaved with good ones in the same fetch batch, against a real worker.

Undecodable payloads are quarantined with their raw bytes; decodable but invalid messages are
dead-lettered with a reason (logs, ``wp:deadletters``, the run summary); the good neighbours are
processed; no file appears outside OUTPUT_DIR.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

from conftest import FAST, make_settings
from faults import (
    NS,
    dead_letters,
    files_outside,
    fleet,
    log_files,
    log_records,
    message,
    push,
    push_job,
    quarantined,
    synthetic_run,
    wait_finished,
)

from pipeline.demo import DemoWorld, site_body, site_profile


def _settings(tmp_path: Path, redis_server, world: DemoWorld, **overrides):
    return make_settings(
        redis_url=redis_server.url,
        output_dir=tmp_path / "out",
        semrush_base_url=world.semrush_base_url,
        site_url_template=world.site_url_template,
        **{**FAST, **overrides},
    )


def _raw(record: dict) -> bytes:
    if record["raw_encoding"] == "base64":
        return base64.b64decode(record["raw"])
    return record["raw"].encode("utf-8")


def test_bad_messages_are_quarantined_or_dead_lettered_and_neighbours_served(tmp_path, redis_server):
    outside = tmp_path / "outside"
    outside.mkdir()
    # The slowest site last: the run (and its summary) ends after every bad message was handled.
    domains = sorted((f"good{i}.example" for i in range(12)), key=lambda d: site_profile(d).latency_ms)
    with DemoWorld(serve_any_domain=True, latency_scale=5) as world:
        settings = _settings(tmp_path, redis_server, world)
        client = redis_server.client()
        run_id, jobs = synthetic_run(client, settings, domains)
        (settings.output_dir / run_id).mkdir(parents=True)
        (settings.output_dir / run_id / "link").symlink_to(outside, target_is_directory=True)
        good = jobs[0].to_body()

        def job(**changes):
            return message("fetch_page", {**good, **changes})

        big = message("fetch_page", {**good, "pad": "x" * (settings.max_message_bytes + 100)})
        undecodable = {
            "not JSON": b"\xff\xfe\x00 garbage " + run_id.encode(),
            "truncated JSON": f'{{"run_id": "{run_id}", "args": ['.encode(),
            "JSON, not a message": json.dumps({"hello": run_id}).encode(),
            "a JSON array": b"[1, 2, 3]",
            "message without args": json.dumps(
                {
                    "queue_name": "fetch",
                    "actor_name": "fetch_page",
                    "kwargs": {},
                    "options": {},
                    "message_id": "m-" + run_id,
                    "message_timestamp": 0,
                }
            ).encode(),
            "oversized": big.encode(),
            # Decodes, but without the Redis id Dramatiq adds on enqueue it could never be acked.
            "not enqueued by Dramatiq": message("fetch_page", good).encode(),
        }
        invalid = {
            "unknown actor": (message("no_such_actor", run_id), "unknown actor 'no_such_actor'"),
            "two arguments": (message("fetch_page", good, "extra"), "exactly one argument"),
            "a string, not a job": (message("fetch_page", run_id), "job is not a JSON object: str"),
            "missing field": (
                message("fetch_page", {k: v for k, v in good.items() if k != "url"}),
                "misses field(s): url",
            ),
            "schema v2": (job(v=2), "unknown job schema version 2"),
            "../ path": (job(path=f"{run_id}/../../outside/escape.html"), "escapes OUTPUT_DIR"),
            "absolute path": (job(path=str(outside / "abs.html")), "escapes OUTPUT_DIR"),
            "symlink path": (job(path=f"{run_id}/link/through.html"), "symlink leads outside"),
            "file scheme": (job(url="file:///etc/passwd"), "scheme 'file' is not http or https"),
            "ftp scheme": (job(url="ftp://good0.example/"), "scheme 'ftp' is not http or https"),
            "domain with a space": (job(domain="not a host"), "domain is not a hostname"),
            "domain is an IP": (job(domain="127.0.0.1"), "domain is not a hostname"),
            "summarize with junk": (
                message("summarize", run_id, "../etc", queue="summary"),
                "bad country slug",
            ),
        }
        # Interleaved: bad, good, bad, good... all queued before the worker starts, so a fetch
        # batch (prefetch 2 x threads) holds both kinds.
        quarantine_ids, dead_ids = {}, {}
        bad = [("q", k) for k in undecodable] + [("d", k) for k in invalid]
        for i, job_ in enumerate(jobs):
            for kind, name in bad[i * 2 : i * 2 + 2]:
                if kind == "q":
                    quarantine_ids[name] = push(client, "fetch", undecodable[name])
                else:
                    m, _ = invalid[name]
                    dead_ids[name] = push(client, m.queue_name, m)
            push_job(client, job_)
        assert len(quarantine_ids) + len(dead_ids) == len(bad)
        log_dir = tmp_path / "logs"
        with fleet(settings, 1, log_dir, threads=2) as f:
            wait_finished(client, run_id, 60)
            restarts = f.restarts

    # Good neighbours: all saved, byte-identical; the worker never restarted.
    outcomes = {k: json.loads(v) for k, v in client.hgetall(f"wp:run:{run_id}:outcomes").items()}
    assert {k: o["outcome"] for k, o in outcomes.items()} == {j.key: "saved" for j in jobs}
    for j in jobs:
        assert (settings.output_dir / j.path).read_bytes() == site_body(j.domain)
    assert restarts == 0
    records = log_records(*log_files(log_dir))
    assert not [r for r in records if "unexpected error" in r.get("message", "")]

    # Undecodable: quarantined with the raw bytes, out of the queue.
    kept = {_raw(r): r for r in quarantined(client).values()}
    assert set(kept) == set(undecodable.values())
    assert client.zcard("wp:quarantine") == len(undecodable)
    for name, payload in undecodable.items():
        assert kept[payload]["reason"], name
        assert not client.hexists(f"{NS}:fetch.msgs", quarantine_ids[name]), name
    assert "exceeds MAX_MESSAGE_BYTES" in kept[undecodable["oversized"]]["reason"]
    assert "redis_message_id" in kept[undecodable["not enqueued by Dramatiq"]]["reason"]

    # Decodable but invalid: in the DLQ, with the reason in wp:deadletters and in the logs.
    letters = dead_letters(client)
    logged = [r.get("error") or "" for r in records if r.get("message") == "dead-lettered a message"]
    for name, (m, reason) in invalid.items():
        assert client.zscore(f"{NS}:{m.queue_name}.XQ", dead_ids[name]) is not None, name
        assert reason in letters[dead_ids[name]]["reason"], (name, letters[dead_ids[name]])
        assert any(reason in line for line in logged), name

    # The run summary lists every rejected message that named the run.
    summary = json.loads((settings.output_dir / run_id / "summary.json").read_text())
    rejected = summary["rejected_messages"]
    named = [p for p in undecodable.values() if run_id.encode() in p]
    assert len([r for r in rejected if r["kind"] == "quarantined"]) == len(named)
    dead_reasons = [r["reason"] for r in rejected if r["kind"] == "dead_lettered"]
    for name, (_, reason) in invalid.items():
        assert any(reason in r for r in dead_reasons), name
    assert summary["totals"]["saved"] == len(jobs) and not summary["failures"]

    # Nothing was written outside OUTPUT_DIR, not even through the symlink.
    assert not list(outside.iterdir())
    assert files_outside(tmp_path, [settings.output_dir, tmp_path / "redis", log_dir]) == []


def test_private_addresses_are_dead_lettered_when_not_allowed(tmp_path, redis_server):
    """ALLOW_PRIVATE_ADDRESSES=false: URLs whose host is loopback, private or link-local never
    reach the network; a public-looking job next to them is still processed."""
    with DemoWorld(serve_any_domain=True) as world:
        settings = _settings(tmp_path, redis_server, world, allow_private_addresses=False).with_overrides(
            site_url_template="http://{domain}/"
        )
        client = redis_server.client()
        # A job with a public-looking name that cannot resolve: it is downloaded (and fails).
        run_id, jobs = synthetic_run(client, settings, ["public.invalid"])
        body = jobs[0].to_body()
        hostile = [
            world.base_url + "/site/public.invalid/",  # 127.0.0.1:port
            "http://10.1.2.3/",
            "http://192.168.0.1/",
            "http://169.254.169.254/latest/meta-data/",
            "http://[::1]/",
            "http://localhost/",
            "http://0.0.0.0/",
        ]
        ids = {url: push(client, "fetch", message("fetch_page", {**body, "url": url})) for url in hostile}
        push_job(client, jobs[0])
        log_dir = tmp_path / "logs"
        with fleet(settings, 1, log_dir, threads=2):
            wait_finished(client, run_id, 30)
    assert world.request_counts == {}, "a private address was contacted"
    letters = dead_letters(client)
    for url, redis_id in ids.items():
        assert client.zscore(f"{NS}:fetch.XQ", redis_id) is not None, url
        assert "private or loopback" in letters[redis_id]["reason"], (url, letters[redis_id])
    summary = json.loads((settings.output_dir / run_id / "summary.json").read_text())
    assert len(summary["rejected_messages"]) == len(hostile)
    # The real job was not taken over by the hostile messages that named it: it ran, and failed.
    assert summary["failures"][0]["reason"].startswith("dns_error"), summary["failures"]
