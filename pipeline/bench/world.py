"""The benchmark's simulated web: which countries, which jobs, what each site serves, and the check.

Everything is a pure function of (profile, pages, overlap, seed), so the web server, the yardstick,
the WorkerPool master and the verifier each rebuild the same world in their own process from a few
command-line arguments, and the verifier knows byte for byte what every saved file must contain.

Profiles:

- ``clean``: every site answers after exactly 50 ms with exactly 50,000 bytes, keep-alive on.
  The setting of the issue's reference measurement.
- ``realistic``: latency per site long-tailed around 80 ms (log-normal, 5 ms..2 s), size long-tailed
  around 60 KB (log-normal, 2 KB..1 MB), about 2 % permanent failures (404) and 2 % transient ones
  (500 on the first request, 200 on the retry), a quarter of the ranking slots taken by a pool of
  popular domains shared between countries (as google.com is everywhere), and no keep-alive: in
  reality every site is its own host, so every page costs a new connection.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import hashlib
import json
import math
import random
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..countries import COUNTRIES
from ..demo.mirror import render_ranking_page
from ..jobs import storage_path
from ..semrush import MAX_PUBLIC_ROWS, RankedSite

PROFILES = ("clean", "realistic")
TOP_N = MAX_PUBLIC_ROWS
MAX_PAGES = len(COUNTRIES) * TOP_N

#: Failure kinds a site may have, and the reason prefix a crawler must record for it.
HTTP_404 = "http_404"
HTTP_500_ONCE = "http_500_once"

_MAX_SIZE = 1_000_000
_WORDS = [
    "news",
    "home",
    "sign",
    "in",
    "search",
    "account",
    "shop",
    "deals",
    "weather",
    "sport",
    "video",
    "music",
    "live",
    "watch",
    "latest",
    "top",
    "trending",
    "today",
    "world",
    "local",
    "business",
    "tech",
    "science",
    "health",
    "travel",
    "food",
    "style",
    "culture",
    "games",
    "mail",
    "photos",
    "maps",
    "help",
    "privacy",
    "terms",
    "cookies",
    "settings",
    "language",
    "download",
    "app",
    "free",
    "new",
    "best",
    "guide",
    "review",
    "more",
    "about",
    "contact",
    "careers",
    "press",
    "store",
    "cart",
    "offers",
    "city",
    "market",
    "daily",
    "report",
    "update",
]


@dataclass(frozen=True)
class Site:
    domain: str
    latency_s: float
    size: int  # bytes of the body
    failure: str | None = None  # HTTP_404, HTTP_500_ONCE or None


@dataclass(frozen=True)
class Job:
    country: str
    rank: int
    domain: str

    @property
    def key(self) -> tuple[str, int]:
        return (self.country, self.rank)

    def storage_path(self, run_id: str) -> str:
        """Where a crawler saves this job's page, relative to its output folder (WorkerPool's layout)."""
        return storage_path(run_id, self.country, self.rank, self.domain)


@dataclass(frozen=True)
class Expected:
    outcome: str  # "saved" or "failed"
    reason: str  # prefix of the recorded reason; "" when saved
    attempts: int


def _seed(text: str) -> int:
    return int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:8], "big")


@functools.lru_cache(maxsize=1)
def _blob() -> bytes:
    """2 MB of word soup that page bodies are cut from: cheap to serve, unique per domain by offset."""
    rng = random.Random(0x5EED)
    text = " ".join(rng.choices(_WORDS, k=2 * _MAX_SIZE // 5))
    while len(text) < 2 * _MAX_SIZE:
        text += " " + text
    return text.encode("ascii")


def render_body(domain: str, size: int) -> bytes:
    """The exact bytes of ``domain``'s page: its name in the head, a slice of the blob chosen by it."""
    head = (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{domain}</title></head>'
        f"<body><h1>{domain}</h1><p>"
    ).encode("ascii")
    tail = b"</p></body></html>\n"
    blob = _blob()
    fill = size - len(head) - len(tail)
    start = _seed(domain) % (len(blob) - fill)
    return head + blob[start : start + fill] + tail


@dataclass
class World:
    profile: str
    pages: int
    overlap: float = -1.0  # fraction of ranking slots given to shared domains; < 0: the profile's default
    seed: int = 1
    countries: list[str] = field(init=False)
    jobs: list[Job] = field(init=False)
    sites: dict[str, Site] = field(init=False)

    def __post_init__(self) -> None:
        if self.profile not in PROFILES:
            raise ValueError(f"unknown profile {self.profile!r}")
        if not 1 <= self.pages <= MAX_PAGES:
            raise ValueError(
                f"pages must be between 1 and {MAX_PAGES} ({len(COUNTRIES)} countries x {TOP_N})"
            )
        if self.overlap < 0:
            self.overlap = 0.25 if self.realistic else 0.0
        rng = random.Random(self.seed)
        # Real slugs: WorkerPool resolves countries through pipeline.countries.
        self.countries = [c.slug for c in COUNTRIES[: math.ceil(self.pages / TOP_N)]]
        shared_pool = [f"popular-{i:03d}.bench" for i in range(60)]
        self.jobs = []
        for slug in self.countries:
            shared = iter(rng.sample(shared_pool, TOP_N))
            for rank in range(1, TOP_N + 1):
                domain = next(shared) if rng.random() < self.overlap else f"r{rank:02d}.{slug}.bench"
                self.jobs.append(Job(slug, rank, domain))
        failures: dict[str, str] = {}
        if self.realistic:
            unique = sorted({j.domain for j in self.jobs} - set(shared_pool))
            n = max(1, round(len(self.jobs) * 0.02))
            picked = rng.sample(unique, min(len(unique), 2 * n))
            failures = {d: HTTP_404 for d in picked[:n]} | {d: HTTP_500_ONCE for d in picked[n:]}
        self.sites = {job.domain: self._site(job.domain, failures.get(job.domain)) for job in self.jobs}

    @property
    def realistic(self) -> bool:
        return self.profile == "realistic"

    @property
    def keep_alive(self) -> bool:
        return not self.realistic

    def _site(self, domain: str, failure: str | None) -> Site:
        if not self.realistic:
            return Site(domain, 0.050, 50_000)
        rng = random.Random(_seed(domain) ^ self.seed)
        latency = min(2.0, max(0.005, rng.lognormvariate(math.log(0.080), 0.7)))
        size = int(min(_MAX_SIZE, max(2_000, rng.lognormvariate(math.log(60_000), 0.8))))
        return Site(domain, round(latency, 4), size, failure)

    # --- what the server serves -------------------------------------------------------------------

    def body(self, domain: str) -> bytes:
        return render_body(domain, self.sites[domain].size)

    def ranking_pages(self) -> dict[str, bytes]:
        """Slug -> its Semrush-like ranking page (the markup WorkerPool's parser reads in production)."""
        by_country: dict[str, list[RankedSite]] = {slug: [] for slug in self.countries}
        for job in self.jobs:
            visits = 10_000_000 // job.rank
            by_country[job.country].append(RankedSite(job.rank, job.domain, visits, 4.5, 40.0, 0))
        names = {c.slug: c.name for c in COUNTRIES}
        return {
            slug: render_ranking_page(names[slug], rows, related_slug=None).encode("utf-8")
            for slug, rows in by_country.items()
        }

    # --- what a crawler must end with ---------------------------------------------------------------

    def expected(self, job: Job) -> Expected:
        failure = self.sites[job.domain].failure
        if failure == HTTP_404:
            return Expected("failed", HTTP_404, 1)
        return Expected("saved", "", 2 if failure == HTTP_500_ONCE else 1)

    def expected_site_requests(self) -> int:
        """Requests for site pages a crawler without duplicates or de-duplication makes."""
        return sum(2 if self.sites[j.domain].failure == HTTP_500_ONCE else 1 for j in self.jobs)

    def describe(self) -> dict[str, Any]:
        failures = Counter(s.failure for s in self.sites.values() if s.failure)
        sizes = sorted(self.sites[j.domain].size for j in self.jobs)
        latencies = sorted(self.sites[j.domain].latency_s for j in self.jobs)
        return {
            "profile": self.profile,
            "jobs": len(self.jobs),
            "countries": len(self.countries),
            "top_n": TOP_N,
            "domains": len(self.sites),
            "overlap": self.overlap,
            "keep_alive": self.keep_alive,
            "failures": dict(failures),
            "median_latency_ms": round(1000 * latencies[len(latencies) // 2], 1),
            "max_latency_ms": round(1000 * latencies[-1], 1),
            "median_bytes": sizes[len(sizes) // 2],
            "total_bytes": sum(sizes),
        }

    # --- rebuilding it in a child process ---------------------------------------------------------

    def cli_args(self) -> list[str]:
        return [
            "--profile", self.profile,
            "--pages", str(self.pages),
            "--overlap", str(self.overlap),
            "--seed", str(self.seed),
        ]  # fmt: skip

    @staticmethod
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--profile", choices=PROFILES, required=True)
        parser.add_argument("--pages", type=int, required=True)
        parser.add_argument("--overlap", type=float, default=-1.0)
        parser.add_argument("--seed", type=int, default=1)

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> World:
        return cls(args.profile, args.pages, overlap=args.overlap, seed=args.seed)


# --- verification ------------------------------------------------------------------------------


@dataclass
class Verification:
    ok: bool
    problems: list[str]
    saved: int
    failed: int
    outcomes: dict[tuple[str, int], str]  # job key -> "saved" or the failure reason code

    def as_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "problems": self.problems[:20], "saved": self.saved, "failed": self.failed}


def read_manifest(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def records_from_files(world: World, root: Path, run_id: str) -> list[dict[str, Any]]:
    """Manifest lines for a crawler that keeps none (the plain actor, the floor), made from its files.

    A job whose file exists is saved (at ``Job.storage_path(run_id)`` under ``root``), any other
    failed. Neither attempts nor failure reasons can be seen on disk (attempts are given as 1):
    only a world without failures, the clean profile, can be verified this way.
    """
    records = []
    for job in world.jobs:
        path = job.storage_path(run_id)
        record: dict[str, Any] = {
            "country": job.country, "rank": job.rank, "domain": job.domain, "attempts": 1,
            "path": None, "bytes": 0, "sha256": None, "outcome": "failed", "reason": "missing: no file",
        }  # fmt: skip
        with contextlib.suppress(FileNotFoundError):
            data = (root / path).read_bytes()
            sha256 = hashlib.sha256(data).hexdigest()
            record.update(path=path, bytes=len(data), sha256=sha256, outcome="saved", reason="")
        records.append(record)
    return records


def verify(world: World, records: Iterable[dict[str, Any]], root: Path) -> Verification:
    """Check a crawler's manifest lines against the world, and its files against what was served.

    Every job settled exactly once, with the expected outcome (reason and attempts included);
    every saved file has the served size and sha256; no temporary file is left behind.
    ``records`` use WorkerPool's manifest fields; ``path`` is relative to ``root``.
    """
    problems: list[str] = []
    by_key: dict[tuple[str, int], dict[str, Any]] = {}
    for record in records:
        key = (record["country"], record["rank"])
        if key in by_key:
            problems.append(f"job {key} settled twice")
        by_key[key] = record
    wanted = {job.key: job for job in world.jobs}
    if missing := sorted(set(wanted) - set(by_key)):
        problems.append(f"{len(missing)} jobs not settled, e.g. {missing[:3]}")
    if extra := sorted(set(by_key) - set(wanted)):
        problems.append(f"{len(extra)} unknown jobs settled, e.g. {extra[:3]}")
    outcomes: dict[tuple[str, int], str] = {}
    for key, record in by_key.items():
        job = wanted.get(key)
        if job is None:
            continue
        expected = world.expected(job)
        outcome, reason = record.get("outcome"), record.get("reason") or ""
        outcomes[key] = "saved" if outcome == "saved" else reason.split(":")[0]
        if record.get("domain") != job.domain:
            problems.append(f"{key}: domain {record.get('domain')!r}, not {job.domain!r}")
        if outcome != expected.outcome or not reason.startswith(expected.reason):
            problems.append(
                f"{key}: {outcome} ({reason[:60]}), expected {expected.outcome} {expected.reason}"
            )
            continue
        if record.get("attempts") != expected.attempts:
            problems.append(f"{key}: {record.get('attempts')} attempts, expected {expected.attempts}")
        if outcome == "saved":
            problems += _check_file(world, job, record, root)
    if leftovers := list(root.rglob("*.part")):
        problems.append(f"{len(leftovers)} temporary .part files left, e.g. {leftovers[0]}")
    saved = sum(1 for r in by_key.values() if r.get("outcome") == "saved")
    return Verification(not problems, problems, saved, len(by_key) - saved, outcomes)


def _check_file(world: World, job: Job, record: dict[str, Any], root: Path) -> list[str]:
    path = root / str(record.get("path"))
    try:
        data = path.read_bytes()
    except OSError as e:
        return [f"{job.key}: saved file unreadable: {e}"]
    body = world.body(job.domain)
    digest = hashlib.sha256(data).hexdigest()
    if data != body:
        return [f"{job.key}: {path.name} has {len(data)} bytes, not the {len(body)} served"]
    if record.get("bytes") != len(body) or record.get("sha256") != digest:
        return [f"{job.key}: manifest says {record.get('bytes')} bytes / {record.get('sha256')}"]
    return []
