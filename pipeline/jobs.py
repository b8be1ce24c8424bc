"""The download job: the JSON body of every ``fetch_page`` message.

A job names one page of one country's ranking and where to save it::

    {"v": 1, "run_id": "20261121T101500Z-3fa2", "country": "germany", "rank": 3,
     "domain": "amazon.de", "url": "https://amazon.de/",
     "path": "20261121T101500Z-3fa2/germany/03-amazon.de.html"}

``path`` is relative to OUTPUT_DIR, never absolute. :func:`FetchJob.from_body` is the one
validator; the malformed-message middleware runs it before the actor sees the message.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from .errors import InvalidJob
from .settings import Settings
from .storage import safe_join

SCHEMA_VERSION = 1

_RUN_ID = re.compile(r"^[0-9]{8}T[0-9]{6}Z-[0-9a-f]{4,12}$")
_SLUG = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")
_LABEL = re.compile(r"^(?!-)[a-z0-9-]{1,63}(?<!-)$")
_FIELDS = ("v", "run_id", "country", "rank", "domain", "url", "path")


def check_run_id(run_id: Any) -> str:
    if not isinstance(run_id, str) or not _RUN_ID.match(run_id):
        raise InvalidJob(f"bad run_id {run_id!r}")
    return run_id


def check_slug(slug: Any) -> str:
    if not isinstance(slug, str) or len(slug) > 64 or not _SLUG.match(slug):
        raise InvalidJob(f"bad country slug {slug!r}")
    return slug


def check_domain(domain: Any) -> str:
    """A lowercase DNS hostname with at least two labels (no IP literals, no ports)."""
    if not isinstance(domain, str) or not 3 <= len(domain) <= 253:
        raise InvalidJob(f"domain is not a hostname: {domain!r}")
    labels = domain.split(".")
    if len(labels) < 2 or not all(_LABEL.match(label) for label in labels) or labels[-1].isdigit():
        raise InvalidJob(f"domain is not a hostname: {domain!r}")
    return domain


def check_url(url: Any, *, allow_private: bool) -> str:
    """http(s) only; a literal private, loopback or link-local host only when ``allow_private``.

    Names that resolve to such addresses are stopped at download time, hop by hop (fetch.py).
    """
    if not isinstance(url, str) or len(url) > 2048:
        raise InvalidJob(f"bad url {url!r}")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        raise InvalidJob(f"url scheme {parts.scheme!r} is not http or https: {url!r}")
    host = parts.hostname
    if not host:
        raise InvalidJob(f"url has no host: {url!r}")
    if not allow_private:
        if host == "localhost" or host.endswith(".localhost"):
            raise InvalidJob(f"url host is private or loopback: {url!r}")
        try:
            address = ipaddress.ip_address(host)
        except ValueError:
            address = None
        if address is not None and not address.is_global:
            raise InvalidJob(f"url host is private or loopback: {url!r}")
    return url


def storage_path(run_id: str, country: str, rank: int, domain: str) -> str:
    """Where a page is saved, relative to OUTPUT_DIR."""
    return f"{run_id}/{country}/{rank:02d}-{domain}.html"


def job_key(country: str, rank: int) -> str:
    """A job's identity within its run: ``country/rank``."""
    return f"{country}/{rank:02d}"


def split_job_key(key: str) -> tuple[str, int]:
    """(country, rank) of a :func:`job_key`."""
    country, _, rank = key.rpartition("/")
    return country, int(rank)


def check_path(path: Any, run_id: str) -> str:
    """Relative, normalised and inside the run's folder; symlinks are checked when writing."""
    if not isinstance(path, str) or not path or len(path) > 512 or "\x00" in path or "\\" in path:
        raise InvalidJob(f"bad path {path!r}")
    parts = path.split("/")
    if path.startswith("/") or any(p in ("", ".", "..") for p in parts):
        raise InvalidJob(f"path escapes OUTPUT_DIR or is not normalised: {path!r}")
    if parts[0] != run_id or len(parts) < 2:
        raise InvalidJob(f"path is not inside the run's folder {run_id}/: {path!r}")
    return path


@dataclass(frozen=True)
class FetchJob:
    run_id: str
    country: str
    rank: int
    domain: str
    url: str
    path: str
    v: int = SCHEMA_VERSION

    @property
    def key(self) -> str:
        """The job's identity within its run: ``country/rank``."""
        return job_key(self.country, self.rank)

    def to_body(self) -> dict[str, Any]:
        # Not dataclasses.asdict: its deep copy of each field cost 40 % of it (all are scalars).
        return {name: getattr(self, name) for name in _FIELDS}

    @classmethod
    def create(cls, run_id: str, country: str, rank: int, domain: str, url_template: str) -> FetchJob:
        return cls(
            run_id=run_id,
            country=country,
            rank=rank,
            domain=domain,
            url=url_template.format(domain=domain),
            path=storage_path(run_id, country, rank, domain),
        )

    @classmethod
    def from_body(cls, body: Any, *, allow_private: bool = False) -> FetchJob:
        """Validate a message body.

        Raises:
            InvalidJob: with a reason naming the first thing wrong.
        """
        if not isinstance(body, Mapping):
            raise InvalidJob(f"job is not a JSON object: {type(body).__name__}")
        missing = [name for name in _FIELDS if name not in body]
        if missing:
            raise InvalidJob(f"job misses field(s): {', '.join(missing)}")
        extra = sorted(set(body) - set(_FIELDS))
        if extra:
            raise InvalidJob(f"job has unknown field(s): {', '.join(extra)}")
        if body["v"] != SCHEMA_VERSION:
            raise InvalidJob(f"unknown job schema version {body['v']!r} (this worker knows {SCHEMA_VERSION})")
        rank = body["rank"]
        if not isinstance(rank, int) or isinstance(rank, bool) or not 1 <= rank <= 100:
            raise InvalidJob(f"bad rank {rank!r}")
        run_id = check_run_id(body["run_id"])
        return cls(
            run_id=run_id,
            country=check_slug(body["country"]),
            rank=rank,
            domain=check_domain(body["domain"]),
            url=check_url(body["url"], allow_private=allow_private),
            path=check_path(body["path"], run_id),
        )

    def outcome(
        self,
        outcome: str,
        *,
        reason: str = "",
        result: Any = None,
        attempts: int = 1,
        elapsed_ms: int = 0,
        reused: bool = False,
    ) -> dict[str, Any]:
        """The job's manifest line. ``result`` is a :class:`pipeline.fetch.FetchResult` (or the
        record of the same domain's download earlier in the run) when saved; ``reused`` says the
        result is that earlier download's, not a download of this job's own."""
        return {
            "run_id": self.run_id,
            "country": self.country,
            "rank": self.rank,
            "domain": self.domain,
            "url": self.url,
            "final_url": getattr(result, "final_url", None),
            "status": getattr(result, "status", None),
            "path": self.path if outcome == "saved" else None,
            "bytes": getattr(result, "bytes", 0),
            "sha256": getattr(result, "sha256", None),
            "attempts": attempts,
            "elapsed_ms": elapsed_ms,
            "outcome": outcome,
            "reason": reason,
            "reused": reused,
        }


# --- the schemas of the actors' arguments, run by the malformed-message middleware ---------------


def fetch_page_schema(args: Any, kwargs: Any, settings: Settings) -> FetchJob:
    if kwargs or not isinstance(args, (list, tuple)) or len(args) != 1:
        raise InvalidJob("fetch_page takes exactly one argument, the job object")
    job = FetchJob.from_body(args[0], allow_private=settings.allow_private_addresses)
    safe_join(settings.output_dir, job.path)  # catches an escape through a symlink
    return job


def discover_country_schema(args: Any, kwargs: Any, settings: Settings) -> None:
    if kwargs or not isinstance(args, (list, tuple)) or len(args) != 2:
        raise InvalidJob("discover_country takes two arguments: run_id and country slug")
    check_run_id(args[0])
    check_slug(args[1])


def summarize_schema(args: Any, kwargs: Any, settings: Settings) -> None:
    if kwargs or not isinstance(args, (list, tuple)) or not 1 <= len(args) <= 2:
        raise InvalidJob("summarize takes run_id and, optionally, a country slug")
    check_run_id(args[0])
    if len(args) == 2 and args[1] is not None:
        check_slug(args[1])
