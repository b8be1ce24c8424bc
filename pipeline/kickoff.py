"""``python -m pipeline.kickoff``: start a run, and optionally do it all on this machine.

Resolves the countries, checks the output folder, Semrush and Redis, records the run in the
ledger and enqueues one ``discover_country | summarize`` pipeline per country. With ``--wait``
it shows progress until the summary is written. With REDIS_URL unset it starts the embedded
Redis and (``--local``, 2 by default then) worker processes, so one command does the whole job.
"""

from __future__ import annotations

import json
import logging
import secrets
import sys
import time
from contextlib import ExitStack
from datetime import datetime, timezone
from pathlib import Path
from typing import TextIO

import requests

from . import logs
from .broker import WorkerPoolBroker, install
from .cli import Parser, add_common_arguments, ensure_output_dir, open_redis, run, settings_from
from .countries import Country, resolve_many
from .errors import EXIT_OK, SemrushUnavailable, UsageError
from .ledger import RunLedger
from .progress import Progress, RateMeter
from .settings import Settings
from .workers import WorkerFleet

logger = logging.getLogger("pipeline.kickoff")

#: Worker processes started with the embedded Redis when --local is not given.
DEFAULT_LOCAL_WORKERS = 2


def new_run_id() -> str:
    return datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ") + "-" + secrets.token_hex(2)


def demo_settings(settings: Settings, world: object, explicit: dict[str, object]) -> Settings:
    """Point the run at the demo world, with timeouts short enough for a demo to end quickly."""
    quick = {
        "semrush_delay": 0.05,
        "read_timeout": 2.0,
        "total_timeout": 8.0,
        "max_attempts": 3,
        "retry_min_backoff_ms": 500,
    }
    return settings.with_overrides(
        semrush_base_url=world.semrush_base_url,
        site_url_template=world.site_url_template,
        allow_private_addresses=True,
        **{k: v for k, v in quick.items() if explicit.get(k) is None},
    )


def check_semrush(settings: Settings) -> None:
    """Any HTTP answer will do: this only proves the host can be reached before jobs are queued."""
    try:
        requests.head(settings.semrush_base_url, timeout=(settings.connect_timeout, settings.read_timeout))
    except requests.RequestException as e:
        raise SemrushUnavailable(
            f"Semrush is unreachable at {settings.semrush_base_url}: {type(e).__name__}"
        ) from None


def enqueue_run(broker: WorkerPoolBroker, run_id: str, countries: list[Country], settings: Settings) -> None:
    ledger = broker.ledger(run_id)
    ledger.create(
        [c.slug for c in countries],
        {
            "started_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "top_n": str(settings.top_n),
            "semrush_base_url": settings.semrush_base_url,
            "site_url_template": settings.site_url_template,
            "output_dir": str(settings.output_dir.resolve()),
        },
    )
    for country in countries:
        try:
            broker.discovery_pipeline(run_id, country.slug).run()
        except Exception as e:
            # The country stays in the ledger: the reaper enqueues it once Redis is back.
            logger.error(
                "enqueue failed", extra={"run_id": run_id, "country": country.slug, "error": repr(e)}
            )
            continue
        logger.info(
            "enqueued", extra={"run_id": run_id, "country": country.slug, "actor": "discover_country"}
        )


def follow(ledger: RunLedger, top_n: int, *, stream: TextIO, timeout: float | None = None) -> Progress:
    """Show progress until the run's summary is written (or ``timeout`` seconds pass)."""
    tty = stream.isatty()
    interval = 1.0 if tty else 5.0
    meter = RateMeter()
    drawn = 0
    deadline = time.monotonic() + timeout if timeout else None
    while True:
        snapshot = ledger.snapshot()
        progress = Progress(snapshot, top_n, meter.add(snapshot.settled))
        if tty:
            text = progress.render()
            stream.write((f"\x1b[{drawn}F\x1b[J" if drawn else "") + text + "\n")
            drawn = text.count("\n") + 1
        else:
            stream.write(progress.render().splitlines()[0] + "\n")
        stream.flush()
        if snapshot.finished:
            return progress
        if deadline and time.monotonic() > deadline:
            raise TimeoutError
        time.sleep(interval)


def main(argv: list[str] | None = None) -> int:
    parser = Parser(prog="python -m pipeline.kickoff", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--countries",
        help="comma-separated names, slugs or ISO codes; 'global'; 'all-known' (the default: 38 countries)",
    )
    parser.add_argument(
        "--top", type=int, dest="top_n", help="pages per country, 1..20 (default: TOP_N or 20)"
    )
    parser.add_argument("--demo", action="store_true", help="run against the offline demo world on 127.0.0.1")
    parser.add_argument(
        "--local", type=int, metavar="N", help="also run N worker processes here until the run ends"
    )
    parser.add_argument("--threads", type=int, help="threads per local worker (default: WORKER_THREADS)")
    parser.add_argument(
        "--wait", action="store_true", help="show progress and exit when the summary is written"
    )
    parser.add_argument("--timeout", type=float, help="with --wait: stop waiting after this many seconds")
    parser.add_argument("--semrush-delay", type=float, help="seconds between Semrush requests (default: 3)")
    add_common_arguments(parser)
    args = parser.parse_args(argv)
    if args.local is not None and args.local < 1:
        raise UsageError("--local needs a number of worker processes of at least 1")

    explicit = {"semrush_delay": args.semrush_delay}
    settings = settings_from(args, top_n=args.top_n, semrush_delay=args.semrush_delay)
    logs.setup(settings)
    with ExitStack() as stack:
        if args.demo:
            from .demo.world import DemoWorld  # noqa: PLC0415 - only the demo needs it

            world = stack.enter_context(DemoWorld())
            settings = demo_settings(settings, world, explicit)
            default_countries = world.countries
        else:
            default_countries = ["all-known"]
        countries = resolve_many(args.countries or default_countries)
        ensure_output_dir(settings.output_dir)
        check_semrush(settings)
        settings, embedded = stack.enter_context(open_redis(settings))
        local = args.local
        if embedded is not None and local is None:
            local = DEFAULT_LOCAL_WORKERS
            logger.info("embedded Redis: starting local workers", extra={"count": local})
        wait = args.wait or embedded is not None or bool(local)
        broker = install(settings)
        import actors  # noqa: F401, PLC0415 - declares the actors on the broker installed above

        run_id = new_run_id()
        if local:
            log_dir = settings.output_dir / run_id / "_logs"
            stack.enter_context(WorkerFleet(settings, local, threads=args.threads, log_dir=log_dir))
        enqueue_run(broker, run_id, countries, settings)
        print(f"run_id: {run_id}", flush=True)
        if not wait:
            print(f"follow it with: python -m pipeline.status {run_id}", flush=True)
            return EXIT_OK
        ledger = broker.ledger(run_id)
        try:
            follow(ledger, settings.top_n, stream=sys.stderr, timeout=args.timeout)
        except TimeoutError:
            print(f"stopped waiting after {args.timeout:.0f}s; the run is not finished", file=sys.stderr)
            return 1
        except KeyboardInterrupt:
            print(
                f"\nstopped waiting; follow the run with: python -m pipeline.status {run_id}", file=sys.stderr
            )
            raise
        summary_path = Path(ledger.snapshot().meta["summary"])
        print((summary_path.parent / "summary.md").read_text(encoding="utf-8"))
        totals = json.loads(summary_path.read_text(encoding="utf-8"))["totals"]
        print(f"run_id: {run_id}\nsummary: {summary_path}\ntotals: {json.dumps(totals)}", flush=True)
    return EXIT_OK


if __name__ == "__main__":
    run(main)
