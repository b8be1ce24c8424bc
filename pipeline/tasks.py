"""What each actor does. ``actors/__init__.py`` declares the actors; the work is here.

discover_country: one ranking page -> its jobs in the ledger -> a group of fetch_page messages
whose completion callback is summarize. fetch_page: one download -> one settled outcome.
summarize: when the ledger says the run is complete, the report, written once.
"""

from __future__ import annotations

import hashlib
import logging
import random
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from types import SimpleNamespace

import dramatiq
import requests
from dramatiq.middleware import CurrentMessage

from .broker import WorkerPoolBroker
from .errors import FetchError, InvalidJob, SemrushError
from .fetch import FetchLimits, download, session_for_thread
from .jobs import FetchJob
from .ledger import Start, now_ms
from .middleware import Defer
from .report import iso_now, write_report
from .semrush import fetch_ranking, parse_ranking, ranking_url
from .settings import Settings
from .storage import (
    link_or_copy,
    remove_partials,
    resolved_root,
    safe_join,
    write_bytes_atomic,
    write_json_atomic,
)
from .throttle import GateBusy, SemrushGate

logger = logging.getLogger("pipeline.tasks")

#: Set on a discover_country message deferred to its booked turn at Semrush.
TURN_BOOKED = "semrush_turn_booked"
#: How often a job polls for the result of the same domain's download by another job of the run.
PEER_POLL_S = 0.2


_semrush_sessions = threading.local()


def semrush_session() -> requests.Session:
    """A plain pooled session per thread for Semrush: the only host we are told to use."""
    session = getattr(_semrush_sessions, "session", None)
    if session is None:
        session = _semrush_sessions.session = requests.Session()
        session.trust_env = False
    return session


def current_attempt() -> int:
    """1 for the first delivery of the current message, 2 for its first retry, ..."""
    message = CurrentMessage.get_current_message()
    return (message.options.get("retries", 0) if message else 0) + 1


def backoff_ms(settings: Settings, attempt: int, retry_after: float | None = None) -> int:
    """Exponential backoff with jitter, or the server's Retry-After, capped by the settings."""
    if retry_after is not None:
        delay = retry_after * 1000
    else:
        delay = settings.retry_min_backoff_ms * 2 ** (attempt - 1) * random.uniform(1.0, 1.5)
    return int(min(max(delay, 0), settings.retry_max_backoff_ms))


@dataclass
class Context:
    """What the tasks of one worker process share."""

    settings: Settings
    broker: WorkerPoolBroker

    @property
    def output_root(self) -> Path:
        return resolved_root(self.settings.output_dir)

    @cached_property
    def limits(self) -> FetchLimits:
        return FetchLimits.from_settings(self.settings)

    @cached_property
    def gate(self) -> SemrushGate:
        return SemrushGate(
            self.broker.ledger_client,
            delay_s=self.settings.semrush_delay,
            hold_s=self.settings.connect_timeout + self.settings.read_timeout + 5,
        )


def discover_country(ctx: Context, run_id: str, country: str) -> None:
    settings = ctx.settings
    ledger = ctx.broker.ledger(run_id)
    if ledger.discovery(country) is not None:
        logger.info("country already discovered", extra={"run_id": run_id, "country": country})
        return
    attempt = current_attempt()
    url = ranking_url(settings.semrush_base_url, country)
    source_path = f"{run_id}/_sources/{country}.html"
    discovery: dict = {"url": url, "path": None}
    log = {"run_id": run_id, "country": country, "url": url, "attempt": attempt}
    message = CurrentMessage.get_current_message()
    if message is not None and not message.options.get(TURN_BOOKED):
        wait_s = ctx.gate.reserve()
        if wait_s > ctx.gate.patience_s:  # a later turn: the thread downloads pages meanwhile
            # Not touched again before its turn, or the reaper would take it as stuck.
            ledger.touch(f"discover:{country}", at_ms=now_ms() + int(wait_s * 1000))
            logger.info("waiting for the Semrush turn booked", extra={**log, "wait_s": round(wait_s, 1)})
            raise Defer(
                f"Semrush turn in {wait_s:.1f}s", delay=int(wait_s * 1000), options={TURN_BOOKED: True}
            )
    try:
        with ctx.gate.turn(max_wait_s=ctx.gate.patience_s):
            body = fetch_ranking(
                semrush_session(),
                url,
                timeout=(settings.connect_timeout, settings.read_timeout),
                user_agent=settings.user_agent,
            )
        discovery.update(fetched_at=iso_now(), sha256=hashlib.sha256(body).hexdigest(), bytes=len(body))
        # Kept as fetched, before parsing: a block page is evidence too.
        write_bytes_atomic(safe_join(settings.output_dir, source_path), body)
        discovery["path"] = source_path
        sites = parse_ranking(body, top_n=settings.top_n)
    except GateBusy as e:  # the booked turn came late: come back when the gate is free
        raise Defer(str(e), delay=int(e.wait_s * 1000 * random.uniform(1.0, 1.5))) from None
    except SemrushError as e:
        if e.transient and attempt < settings.semrush_max_attempts:
            delay = backoff_ms(settings, attempt, e.retry_after)
            logger.warning(
                "ranking page unavailable, will retry", extra={**log, "error": str(e), "delay_ms": delay}
            )
            raise dramatiq.Retry(str(e), delay=delay) from None
        discovery.update(status="failed", reason=f"{type(e).__name__}: {e}", jobs=0)
        ledger.record_discovery(country, [], discovery)
        logger.error("no ranking for this country", extra={**log, "error": discovery["reason"]})
        return
    jobs = [FetchJob.create(run_id, country, s.position, s.domain, settings.site_url_template) for s in sites]
    # What was read from the page (position, domain, visits, pages per visit, bounce rate, change).
    ranking_path = f"{run_id}/_sources/{country}.json"
    write_json_atomic(safe_join(settings.output_dir, ranking_path), [site.to_dict() for site in sites])
    discovery.update(status="ok", jobs=len(jobs), ranking=ranking_path)
    recorded, _ = ledger.record_discovery(country, jobs, discovery)
    if not recorded:
        return
    logger.info("country discovered", extra={**log, "jobs": len(jobs)})
    if jobs:
        broker = ctx.broker
        fetch_page = broker.get_actor("fetch_page")
        group = dramatiq.group([fetch_page.message(job.to_body()) for job in jobs], broker=broker)
        group.add_completion_callback(broker.get_actor("summarize").message(run_id, country))
        with broker.batched_enqueues():
            group.run()


def fetch_page(ctx: Context, body: dict) -> None:
    settings = ctx.settings
    # The malformed-message middleware validated this body (fetch_page_schema) before the actor ran.
    job = FetchJob(**body)
    ledger = ctx.broker.ledger(job.run_id)
    log = {
        "run_id": job.run_id,
        "country": job.country,
        "rank": job.rank,
        "domain": job.domain,
        "url": job.url,
    }
    token = uuid.uuid4().hex
    claim_ms = int((settings.connect_timeout + settings.total_timeout + 5) * 1000)
    start = ledger.begin(job, token, claim_ms)
    if start.settled:
        logger.info("job already settled: duplicate delivery ignored", extra=log)
        return
    if start.fetched is None and not start.claimed:
        start = _wait_for_peer(ledger, job, token, claim_ms)
    attempt = current_attempt()
    outcome = _reuse(settings, job, start.fetched, attempt) if start.fetched else None
    fetch = None
    if outcome is None:
        outcome = _download(ctx, job, attempt, log, release=lambda: ledger.release_claim(job.domain, token))
        fetch = {k: outcome[k] for k in _FETCH_RECORD}
    settlement = ledger.settle(job, outcome, fetch=fetch, token=token)
    level = logging.INFO if outcome["outcome"] == "saved" else logging.WARNING
    logger.log(
        level,
        "page settled" if settlement.recorded else "page settled before: duplicate ignored",
        extra={
            **log,
            "attempt": attempt,
            "outcome": outcome["outcome"],
            "duration_ms": outcome["elapsed_ms"],
            "bytes": outcome["bytes"],
            "reused": outcome["reused"],
            "error": outcome["reason"] or None,
        },
    )
    if settlement.run_complete:
        ctx.broker.run_complete(job.run_id)


#: What one download leaves in the ledger for the other jobs of the run that want the same domain.
_FETCH_RECORD = ("outcome", "path", "final_url", "status", "bytes", "sha256", "reason")


def _wait_for_peer(ledger, job: FetchJob, token: str, claim_ms: int) -> Start:
    """Another job of the run is downloading this domain: wait for its result (or its claim to lapse)."""
    deadline = time.monotonic() + claim_ms / 1000
    while True:
        time.sleep(PEER_POLL_S)
        start = ledger.begin(job, token, claim_ms)
        if start.settled or start.fetched is not None or start.claimed or time.monotonic() > deadline:
            return start


def _reuse(settings: Settings, job: FetchJob, fetched: dict, attempt: int) -> dict | None:
    """The job's outcome from the run's earlier download of the same domain; None to download anyway."""
    if fetched["outcome"] != "saved":
        return job.outcome("failed", reason=fetched["reason"], attempts=attempt, reused=True)
    started = time.monotonic()
    try:
        link_or_copy(
            safe_join(settings.output_dir, fetched["path"]), safe_join(settings.output_dir, job.path)
        )
    except (OSError, InvalidJob):  # saved on another host, or moved: download it here
        return None
    elapsed = int((time.monotonic() - started) * 1000)
    result = SimpleNamespace(**{k: fetched[k] for k in ("final_url", "status", "bytes", "sha256")})
    return job.outcome("saved", result=result, attempts=attempt, elapsed_ms=elapsed, reused=True)


def _download(ctx: Context, job: FetchJob, attempt: int, log: dict, *, release: Callable[[], None]) -> dict:
    """Download the job's page; its outcome, or dramatiq.Retry for a transient failure."""
    settings = ctx.settings
    started = time.monotonic()
    try:
        result = download(
            job.url,
            # The malformed-message middleware resolved this path (symlinks included) moments ago.
            ctx.output_root / job.path,
            ctx.limits,
            session=session_for_thread(ctx.limits),
        )
        return job.outcome("saved", result=result, attempts=attempt, elapsed_ms=result.elapsed_ms)
    except FetchError as e:
        elapsed = int((time.monotonic() - started) * 1000)
        if e.transient and attempt < settings.max_attempts:
            delay = backoff_ms(settings, attempt, e.retry_after)
            logger.info(
                "transient failure, will retry",
                extra={**log, "attempt": attempt, "error": str(e), "delay_ms": delay, "duration_ms": elapsed},
            )
            release()
            raise dramatiq.Retry(str(e), delay=delay) from None
        return job.outcome("failed", reason=str(e), attempts=attempt, elapsed_ms=elapsed)
    except OSError as e:  # the disk, not the site: worth another attempt elsewhere
        if attempt < settings.max_attempts:
            release()
            raise
        return job.outcome("failed", reason=f"storage_error: {e}", attempts=attempt)
    except requests.RequestException as e:  # anything fetch.py did not classify
        return job.outcome("failed", reason=f"request_error: {e}", attempts=attempt)


def summarize(ctx: Context, run_id: str, country: str | None = None) -> None:
    ledger = ctx.broker.ledger(run_id)
    if not ledger.needs_summary():
        return
    snapshot = ledger.snapshot()
    token = ledger.claim_summary(owner=ctx.broker.broker_id)
    if token is None:
        return
    try:
        # The run is complete: a temporary file left now belongs to a writer that was killed.
        remove_partials(ctx.settings.output_dir / run_id)
        path, summary = write_report(
            ctx.settings.output_dir,
            snapshot,
            ledger.outcome_lines(),
            ledger.rejected(),
            reused_fetches=snapshot.counts.get("reused", 0),
        )
        ledger.finish(str(path), summary["finished_at"])
    finally:
        ledger.release_summary(token)
    logger.info(
        "run summary written",
        extra={"run_id": run_id, "path": str(path), "totals": summary["totals"], "outcome": "finished"},
    )
