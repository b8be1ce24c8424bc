"""WorkerPool's Dramatiq actors: ``dramatiq actors`` runs them.

    kickoff -> discover_country | summarize          (one pipeline per country)
    discover_country -> group(fetch_page x N) -> summarize   (the group's completion callback)

The broker is installed before the actors are declared: they bind to it at import. The work
itself lives in :mod:`pipeline.tasks`; here are only the declarations and their options.
"""

from __future__ import annotations

import sys

import dramatiq

from pipeline import logs, tasks
from pipeline.broker import install
from pipeline.errors import WorkerPoolError
from pipeline.jobs import discover_country_schema, fetch_page_schema, summarize_schema
from pipeline.settings import get_settings

settings = get_settings()
logs.setup(settings)
try:
    broker = install(settings)
except WorkerPoolError as e:  # `dramatiq actors` would show it as a traceback
    print(f"error: {e.describe()}", file=sys.stderr)
    sys.exit(e.exit_code)
context = tasks.Context(settings=settings, broker=broker)


@dramatiq.actor(
    queue_name="discover",
    schema=discover_country_schema,
    max_retries=settings.semrush_max_attempts + 2,  # the task records the failure itself before that
    priority=0,
)
def discover_country(run_id: str, country: str) -> None:
    """Read one country's ranking page and fan out its download jobs."""
    tasks.discover_country(context, run_id, country)


@dramatiq.actor(
    queue_name="fetch",
    schema=fetch_page_schema,
    max_retries=settings.max_attempts + 2,  # the task records the failure itself before that
    priority=10,
)
def fetch_page(job: dict) -> None:
    """Download one page to the path its job names, and settle the job."""
    tasks.fetch_page(context, job)


@dramatiq.actor(queue_name="summary", schema=summarize_schema, max_retries=10, priority=20)
def summarize(run_id: str, country: str | None = None) -> None:
    """Write the run's manifest and summary once its last job has settled."""
    tasks.summarize(context, run_id, country)


__all__ = ["broker", "discover_country", "fetch_page", "summarize"]
