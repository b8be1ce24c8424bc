"""The run ledger on a real Redis: discovery once, settlement once, completion from counts."""

from __future__ import annotations

import time

import pytest

from pipeline.errors import RunNotFound
from pipeline.jobs import FetchJob
from pipeline.ledger import RunLedger, active_runs, latest_run_id

RUN = "20261121T101500Z-3fa2"


def jobs(country: str, n: int) -> list[FetchJob]:
    return [
        FetchJob.create(RUN, country, r, f"site{r}.{country}.com", "https://{domain}/")
        for r in range(1, n + 1)
    ]


@pytest.fixture
def ledger(redis_server) -> RunLedger:
    ledger = RunLedger(redis_server.client(), RUN)
    ledger.create(["germany", "france"], {"started_at": "2026-11-21T10:15:00+00:00"})
    return ledger


def test_a_run_completes_when_every_country_is_discovered_and_every_job_settled(ledger):
    assert latest_run_id(ledger.client) == RUN and active_runs(ledger.client) == [RUN]
    germany = jobs("germany", 2)
    assert ledger.record_discovery("germany", germany, {"status": "ok", "jobs": 2}) == (True, False)
    assert ledger.record_discovery("germany", germany, {"status": "ok", "jobs": 2}) == (False, False)
    assert not ledger.begin(germany[0], "token", 10_000).settled
    first = ledger.settle(germany[0], germany[0].outcome("saved", attempts=1))
    assert first.recorded and not first.run_complete
    duplicate = ledger.settle(germany[0], germany[0].outcome("failed", reason="late duplicate"))
    assert not duplicate.recorded
    assert ledger.begin(germany[0], "token", 10_000).settled, "a settled job must not run again"
    assert ledger.settle(germany[1], germany[1].outcome("failed", reason="http_404")).recorded
    # France has no ranking: its discovery fails, and that completes the run.
    recorded, complete = ledger.record_discovery(
        "france", [], {"status": "failed", "reason": "404", "jobs": 0}
    )
    assert recorded and complete
    snap = ledger.snapshot()
    assert snap.complete and snap.counts["saved"] == 1 and snap.counts["failed"] == 1
    assert snap.counts["settled:germany"] == 2 and snap.counts["expected:germany"] == 2
    assert ledger.outcomes()["germany/01"]["outcome"] == "saved"
    assert ledger.unsettled() == {}


def test_unknown_jobs_and_countries_are_not_counted(ledger):
    stranger = FetchJob.create(RUN, "germany", 9, "x.com", "https://{domain}/")
    assert not ledger.settle(stranger, stranger.outcome("saved")).recorded
    assert ledger.record_discovery("japan", [], {"status": "ok"}) == (False, False)
    assert ledger.snapshot().settled == 0


def test_unsettle_reopens_a_job_and_the_summary_is_claimed_once(ledger):
    job = jobs("germany", 1)[0]
    ledger.record_discovery("germany", [job], {"status": "ok", "jobs": 1})
    ledger.record_discovery("france", [], {"status": "ok", "jobs": 0})
    assert ledger.settle(job, job.outcome("dead_lettered", reason="malformed")).run_complete
    assert ledger.unsettle(job.key)
    assert ledger.snapshot().settled == 0 and "germany/01" in ledger.unsettled()
    assert ledger.settle(job, job.outcome("saved")).run_complete
    token = ledger.claim_summary()
    assert token and ledger.claim_summary() is None and ledger.summary_claimed()
    ledger.finish("/out/summary.json", "2026-11-21T10:20:00+00:00")
    ledger.release_summary(token)
    assert ledger.claim_summary() is None, "a finished run is never summarized again"
    assert active_runs(ledger.client) == []


def test_unknown_run(redis_server):
    with pytest.raises(RunNotFound):
        RunLedger(redis_server.client(), RUN).snapshot()
    with pytest.raises(RunNotFound):
        latest_run_id(redis_server.client())


def test_a_domain_is_downloaded_once_per_run(ledger):
    """The first job of a domain claims it; the others see the claim, then the shared result."""
    de = FetchJob.create(RUN, "germany", 1, "google.com", "https://{domain}/")
    fr = FetchJob.create(RUN, "france", 1, "google.com", "https://{domain}/")
    ledger.record_discovery("germany", [de], {"status": "ok", "jobs": 1})
    ledger.record_discovery("france", [fr], {"status": "ok", "jobs": 1})
    first = ledger.begin(de, "de-token", 10_000)
    assert first.claimed and first.fetched is None
    waiting = ledger.begin(fr, "fr-token", 10_000)
    assert not waiting.claimed and waiting.fetched is None
    fetch = {
        "outcome": "saved",
        "path": de.path,
        "sha256": "ab",
        "bytes": 3,
        "final_url": de.url,
        "status": 200,
    }
    ledger.settle(de, de.outcome("saved"), fetch=fetch, token="de-token")
    assert not ledger.client.exists(ledger.claim_prefix + "google.com"), "the claim is released"
    reuse = ledger.begin(fr, "fr-token", 10_000)
    assert reuse.fetched == fetch and not reuse.claimed
    assert ledger.settle(fr, {**fr.outcome("saved"), "reused": True}).run_complete
    assert ledger.snapshot().counts["reused"] == 1


def test_a_released_or_lapsed_claim_passes_to_the_next_job(ledger):
    de = FetchJob.create(RUN, "germany", 1, "google.com", "https://{domain}/")
    fr = FetchJob.create(RUN, "france", 1, "google.com", "https://{domain}/")
    assert ledger.begin(de, "de-token", 10_000).claimed
    ledger.release_claim("google.com", "de-token")  # a transient failure: let others try
    assert ledger.begin(fr, "fr-token", 50).claimed
    time.sleep(0.1)  # fr's worker died: its claim lapses
    assert ledger.begin(de, "de-token-2", 10_000).claimed
