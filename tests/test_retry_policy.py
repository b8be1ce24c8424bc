"""Which failures are retried, how long the backoff is, and how the last attempt is recorded.

fetch_page's logic with its collaborators replaced: no broker, no network.
"""

from __future__ import annotations

from types import SimpleNamespace

import dramatiq
import pytest
from conftest import make_settings

from pipeline import tasks
from pipeline.errors import PermanentFetchError, TransientFetchError
from pipeline.fetch import FetchResult
from pipeline.jobs import FetchJob

SETTINGS = make_settings(max_attempts=3, retry_min_backoff_ms=1000, retry_max_backoff_ms=8000)
JOB = FetchJob.create("20261121T101500Z-3fa2", "germany", 1, "amazon.de", "https://{domain}/")


class FakeLedger:
    def __init__(self) -> None:
        self.settled: list[dict] = []

    def begin(self, job, token, claim_ms):
        return SimpleNamespace(settled=bool(self.settled), fetched=None, claimed=True)

    def release_claim(self, domain, token):
        pass

    def settle(self, job, outcome, *, fetch=None, token=""):
        self.settled.append(outcome)
        return SimpleNamespace(recorded=True, run_complete=False)


def run_fetch(monkeypatch, tmp_path, *, attempt: int, outcome):
    ledger = FakeLedger()
    broker = SimpleNamespace(ledger=lambda run_id: ledger, run_complete=lambda run_id: None)
    ctx = SimpleNamespace(
        settings=SETTINGS.with_overrides(output_dir=tmp_path),
        broker=broker,
        limits=None,
        output_root=tmp_path,
    )

    def fake_download(url, dest, limits, session=None):
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    monkeypatch.setattr(tasks, "download", fake_download)
    monkeypatch.setattr(tasks, "session_for_thread", lambda limits: None)
    monkeypatch.setattr(tasks, "current_attempt", lambda: attempt)
    tasks.fetch_page(ctx, JOB.to_body())
    return ledger.settled


def test_backoff_doubles_and_is_capped():
    delays = [tasks.backoff_ms(SETTINGS, attempt) for attempt in (1, 2, 3, 4, 5)]
    assert 1000 <= delays[0] <= 1500 and 2000 <= delays[1] <= 3000
    assert delays[4] == 8000


def test_retry_after_wins_but_is_capped():
    assert tasks.backoff_ms(SETTINGS, 1, retry_after=3) == 3000
    assert tasks.backoff_ms(SETTINGS, 1, retry_after=3600) == 8000


def test_a_transient_failure_is_retried_with_the_servers_delay(monkeypatch, tmp_path):
    error = TransientFetchError("http_429", "HTTP 429", retry_after=2)
    with pytest.raises(dramatiq.Retry) as raised:
        run_fetch(monkeypatch, tmp_path, attempt=1, outcome=error)
    assert raised.value.delay == 2000


def test_the_last_attempt_records_the_failure_instead_of_retrying(monkeypatch, tmp_path):
    settled = run_fetch(
        monkeypatch, tmp_path, attempt=3, outcome=TransientFetchError("timeout", "read timed out")
    )
    assert settled[0]["outcome"] == "failed" and settled[0]["reason"].startswith("timeout")
    assert settled[0]["attempts"] == 3


def test_a_permanent_failure_is_recorded_at_once(monkeypatch, tmp_path):
    settled = run_fetch(monkeypatch, tmp_path, attempt=1, outcome=PermanentFetchError("http_404", "HTTP 404"))
    assert settled[0]["outcome"] == "failed" and settled[0]["reason"].startswith("http_404")


def test_a_download_is_saved_with_its_result(monkeypatch, tmp_path):
    result = FetchResult(JOB.url, JOB.url, 200, 10, "ab" * 32, 5, "text/html", 0)
    settled = run_fetch(monkeypatch, tmp_path, attempt=2, outcome=result)
    assert settled[0]["outcome"] == "saved" and settled[0]["path"] == JOB.path and settled[0]["attempts"] == 2
