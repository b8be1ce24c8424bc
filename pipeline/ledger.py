"""Run state in Redis: what a run expects, what has settled, and when it is complete.

The ledger, not Dramatiq's group barrier, is the truth about a run. Barriers never fire when a
member is dead-lettered and fire twice on a redelivered member; the ledger settles every job
exactly once (``HSETNX``), so duplicates are harmless, and it decides completion from counts.

Keys, all under ``wp:run:{run_id}:``:

=============  ======  ===================================================================
``meta``       hash    run_id, started_at, countries, top_n, status, finished_at, summary
``countries``  set     the country slugs the run asked for
``discovered`` hash    slug -> JSON of its discovery (jobs count, source URL and sha256, or failure)
``jobs``       hash    job key (``country/rank``) -> job body JSON: what the reaper re-enqueues
``outcomes``   hash    job key -> outcome JSON (one manifest line); written once
``counts``     hash    expected, settled, saved, failed, dead_lettered, bytes, per-country fields
``touched``    zset    job key or ``discover:{slug}`` -> last sign of progress (ms), for the reaper
``rejected``   hash    message id -> JSON of a malformed or quarantined message that named this run
=============  ======  ===================================================================

plus ``wp:runs`` (zset run_id -> start ms) and ``wp:runs:active`` (set).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import redis

from .errors import RunNotFound
from .jobs import FetchJob
from .scripts import script

RUNS = "wp:runs"
ACTIVE_RUNS = "wp:runs:active"
OUTCOMES = ("saved", "failed", "dead_lettered")

# A run is complete when every country it asked for is discovered and every discovered job settled.
_COMPLETE = """
local function complete(discovered, countries, counts)
  if redis.call('hlen', discovered) < redis.call('scard', countries) then return 0 end
  local c = redis.call('hmget', counts, 'expected', 'settled')
  if tonumber(c[2] or '0') >= tonumber(c[1] or '0') then return 1 end
  return 0
end
"""

# KEYS: discovered, jobs, counts, touched, countries.  ARGV: country, discovery, now, key1, job1, ...
_DISCOVER = (
    _COMPLETE
    + """
if redis.call('sismember', KEYS[5], ARGV[1]) == 0 then return {-1, 0} end
if redis.call('hsetnx', KEYS[1], ARGV[1], ARGV[2]) == 0 then return {0, 0} end
local n = 0
for i = 4, #ARGV, 2 do
  redis.call('hset', KEYS[2], ARGV[i], ARGV[i + 1])
  redis.call('zadd', KEYS[4], ARGV[3], ARGV[i])
  n = n + 1
end
redis.call('zrem', KEYS[4], 'discover:' .. ARGV[1])
redis.call('hincrby', KEYS[3], 'expected', n)
redis.call('hincrby', KEYS[3], 'expected:' .. ARGV[1], n)
return {1, complete(KEYS[1], KEYS[5], KEYS[3])}
"""
)

# KEYS: outcomes, counts, touched, discovered, countries, jobs, fetched, claim.
# ARGV: key, outcome JSON, outcome kind, bytes, country, domain, fetch record JSON or '', token, reused.
_SETTLE = (
    _COMPLETE
    + """
if ARGV[7] ~= '' then redis.call('hsetnx', KEYS[7], ARGV[6], ARGV[7]) end
if redis.call('get', KEYS[8]) == ARGV[8] then redis.call('del', KEYS[8]) end
if redis.call('hexists', KEYS[6], ARGV[1]) == 0 then return {-1, 0} end
if redis.call('hsetnx', KEYS[1], ARGV[1], ARGV[2]) == 0 then return {0, 0} end
redis.call('zrem', KEYS[3], ARGV[1])
redis.call('hincrby', KEYS[2], 'settled', 1)
redis.call('hincrby', KEYS[2], ARGV[3], 1)
redis.call('hincrby', KEYS[2], 'bytes', ARGV[4])
redis.call('hincrby', KEYS[2], 'settled:' .. ARGV[5], 1)
if ARGV[9] == '1' then redis.call('hincrby', KEYS[2], 'reused', 1) end
return {1, complete(KEYS[4], KEYS[5], KEYS[2])}
"""
)

# KEYS: outcomes, touched, fetched, claim.  ARGV: key, now, domain, token, claim ms.
# Returns {settled, the domain's earlier fetch or false, 1 when this job now holds the domain}.
_BEGIN = """
if redis.call('hexists', KEYS[1], ARGV[1]) == 1 then return {1, false, 0} end
redis.call('zadd', KEYS[2], ARGV[2], ARGV[1])
local fetched = redis.call('hget', KEYS[3], ARGV[3])
if fetched then return {0, fetched, 0} end
if redis.call('set', KEYS[4], ARGV[4], 'NX', 'PX', ARGV[5]) then return {0, false, 1} end
if redis.call('get', KEYS[4]) == ARGV[4] then return {0, false, 1} end
return {0, false, 0}
"""

# KEYS: outcomes, counts, touched.  ARGV: key, now.  Undo a settlement so the job can run again.
_UNSETTLE = """
local raw = redis.call('hget', KEYS[1], ARGV[1])
if not raw then return 0 end
local o = cjson.decode(raw)
redis.call('hdel', KEYS[1], ARGV[1])
redis.call('hincrby', KEYS[2], 'settled', -1)
redis.call('hincrby', KEYS[2], o['outcome'], -1)
redis.call('hincrby', KEYS[2], 'bytes', 0 - (tonumber(o['bytes']) or 0))
redis.call('hincrby', KEYS[2], 'settled:' .. o['country'], -1)
if o['reused'] == true then redis.call('hincrby', KEYS[2], 'reused', -1) end
redis.call('zadd', KEYS[3], ARGV[2], ARGV[1])
return 1
"""


# KEYS: meta, claim.  ARGV: token, ttl s.  The right to write the summary, unless it is written.
# One script: checked apart, a writer could finish and let go between another's check and claim,
# and the summary was written twice (the chaos test caught it).
_CLAIM_SUMMARY = """
if redis.call('hget', KEYS[1], 'status') == 'finished' then return 0 end
if redis.call('set', KEYS[2], ARGV[1], 'NX', 'EX', ARGV[2]) then return 1 end
return 0
"""

# KEYS: claim.  ARGV: owner prefix.  Compare-and-delete, so a newer claim is never dropped.
_DROP_CLAIM = """
local token = redis.call('get', KEYS[1])
if token and string.sub(token, 1, #ARGV[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end
return 0
"""


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass
class Settlement:
    """What :meth:`RunLedger.settle` did."""

    recorded: bool  #: False when the job had settled before (a duplicate) or is not a job of the run
    run_complete: bool


@dataclass
class Start:
    """What :meth:`RunLedger.begin` found."""

    settled: bool  #: the job has settled before: this delivery is a duplicate
    fetched: dict[str, Any] | None  #: the final result of the job that fetched this domain before
    claimed: bool  #: this job holds the domain: it downloads, the others of the run wait for it


@dataclass
class Snapshot:
    """Everything a progress view needs, read in one round trip."""

    run_id: str
    meta: dict[str, str]
    countries: list[str]
    counts: dict[str, int]
    discovered: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def expected(self) -> int:
        return self.counts.get("expected", 0)

    @property
    def settled(self) -> int:
        return self.counts.get("settled", 0)

    @property
    def complete(self) -> bool:
        return len(self.discovered) >= len(self.countries) and self.settled >= self.expected

    @property
    def finished(self) -> bool:
        return self.meta.get("status") == "finished"


class RunLedger:
    """The Redis-side record of one run."""

    def __init__(self, client: redis.Redis, run_id: str) -> None:
        self.client = client
        self.run_id = run_id
        prefix = f"wp:run:{run_id}:"
        self.k_meta = prefix + "meta"
        self.k_countries = prefix + "countries"
        self.k_discovered = prefix + "discovered"
        self.k_jobs = prefix + "jobs"
        self.k_outcomes = prefix + "outcomes"
        self.k_counts = prefix + "counts"
        self.k_touched = prefix + "touched"
        self.k_rejected = prefix + "rejected"
        self.k_summary_claim = prefix + "summary-claim"
        self.k_fetched = prefix + "fetched"
        self.claim_prefix = prefix + "claim:"

    # --- the master ---------------------------------------------------------------------------
    def create(self, countries: Iterable[str], meta: dict[str, Any]) -> None:
        countries = list(countries)
        started = now_ms()
        record = {k: v if isinstance(v, str) else json.dumps(v) for k, v in meta.items()}
        record.update(run_id=self.run_id, status="running", countries=json.dumps(countries))
        with self.client.pipeline() as pipe:
            pipe.hset(self.k_meta, mapping=record)
            pipe.sadd(self.k_countries, *countries)
            pipe.hset(self.k_counts, mapping={"expected": 0, "settled": 0})
            pipe.zadd(self.k_touched, {f"discover:{c}": started for c in countries})
            pipe.zadd(RUNS, {self.run_id: started})
            pipe.sadd(ACTIVE_RUNS, self.run_id)
            pipe.execute()

    def exists(self) -> bool:
        return bool(self.client.exists(self.k_meta))

    # --- discover_country ----------------------------------------------------------------------
    def record_discovery(
        self, country: str, jobs: list[FetchJob], discovery: dict[str, Any]
    ) -> tuple[bool, bool]:
        """Record a country's jobs, once. Returns (newly recorded, run complete now)."""
        args: list[Any] = [country, json.dumps(discovery), now_ms()]
        for job in jobs:
            args += [job.key, json.dumps(job.to_body())]
        keys = [self.k_discovered, self.k_jobs, self.k_counts, self.k_touched, self.k_countries]
        recorded, complete = script(self.client, _DISCOVER)(keys, args)
        return recorded == 1, complete == 1

    def discovery(self, country: str) -> dict[str, Any] | None:
        raw = self.client.hget(self.k_discovered, country)
        return json.loads(raw) if raw else None

    # --- fetch_page -------------------------------------------------------------------------------
    def begin(self, job: FetchJob, token: str, claim_ms: int) -> Start:
        """Note that the job is running; find or claim its domain's one download of the run.

        A domain that several countries rank is downloaded once per run: the first job claims it
        (for ``claim_ms``, so that a dead worker's claim lapses), the others reuse its result.
        """
        keys = [self.k_outcomes, self.k_touched, self.k_fetched, self.claim_prefix + job.domain]
        settled, fetched, claimed = script(self.client, _BEGIN)(
            keys, [job.key, now_ms(), job.domain, token, claim_ms]
        )
        return Start(settled == 1, json.loads(fetched) if fetched else None, claimed == 1)

    def release_claim(self, domain: str, token: str) -> None:
        """Let another job of the run download the domain (after a transient failure)."""
        key = self.claim_prefix + domain
        if self.client.get(key) == token:
            self.client.delete(key)

    def settle(
        self,
        job: FetchJob,
        outcome: dict[str, Any],
        *,
        fetch: dict[str, Any] | None = None,
        token: str = "",
    ) -> Settlement:
        """Record a job's final outcome, exactly once; ``fetch`` is shared with the domain's other jobs."""
        keys = [
            self.k_outcomes,
            self.k_counts,
            self.k_touched,
            self.k_discovered,
            self.k_countries,
            self.k_jobs,
            self.k_fetched,
            self.claim_prefix + job.domain,
        ]
        args = [
            job.key,
            json.dumps(outcome, separators=(",", ":")),
            outcome["outcome"],
            int(outcome.get("bytes") or 0),
            job.country,
            job.domain,
            json.dumps(fetch, separators=(",", ":")) if fetch else "",
            token,
            "1" if outcome.get("reused") else "0",
        ]
        recorded, complete = script(self.client, _SETTLE)(keys, args)
        return Settlement(recorded == 1, complete == 1)

    def job_body(self, key: str) -> dict[str, Any] | None:
        """The body the run recorded for a job (what its fetch_page message carries)."""
        raw = self.client.hget(self.k_jobs, key)
        return json.loads(raw) if raw else None

    def touch(self, key: str, *, at_ms: int | None = None) -> None:
        """Note progress on a job or discovery; ``at_ms`` in the future: it is scheduled for then."""
        self.client.zadd(self.k_touched, {key: now_ms() if at_ms is None else at_ms})

    def unsettle(self, job_key: str) -> bool:
        """Forget a job's outcome so that a requeued message can settle it again."""
        keys = [self.k_outcomes, self.k_counts, self.k_touched]
        return script(self.client, _UNSETTLE)(keys, [job_key, now_ms()]) == 1

    def reject(self, message_id: str, record: dict[str, Any]) -> None:
        """Keep a malformed message that named this run, for the summary."""
        self.client.hset(self.k_rejected, message_id, json.dumps(record))

    # --- summarize ------------------------------------------------------------------------------
    def claim_summary(self, ttl_s: int = 120, *, owner: str = "") -> str | None:
        """Take the right to write the summary; None when another worker has it or it is written.

        ``owner`` (the worker's broker id) goes into the claim, so that the reaper can drop the
        claim of a worker that died while writing instead of waiting ``ttl_s`` for it to lapse.
        """
        token = f"{owner}/{uuid.uuid4().hex}" if owner else uuid.uuid4().hex
        claimed = script(self.client, _CLAIM_SUMMARY)([self.k_meta, self.k_summary_claim], [token, ttl_s])
        return token if claimed == 1 else None

    def needs_summary(self) -> bool:
        """Complete and not finished: four small reads, where :meth:`snapshot` decodes everything."""
        with self.client.pipeline(transaction=False) as pipe:
            pipe.hget(self.k_meta, "status")
            pipe.hlen(self.k_discovered)
            pipe.scard(self.k_countries)
            pipe.hmget(self.k_counts, "expected", "settled")
            status, discovered, countries, (expected, settled) = pipe.execute()
        return status == "running" and discovered >= countries and int(settled or 0) >= int(expected or 0)

    def summary_claimed(self) -> bool:
        return bool(self.client.exists(self.k_summary_claim))

    def summary_claim_owner(self) -> str | None:
        """The broker id that holds the summary claim, when it said so; None otherwise."""
        token = self.client.get(self.k_summary_claim)
        return token.partition("/")[0] if token and "/" in token else None

    def drop_summary_claim(self, owner: str) -> bool:
        """Drop the claim if ``owner`` still holds it (its worker is dead)."""
        return script(self.client, _DROP_CLAIM)([self.k_summary_claim], [owner + "/"]) == 1

    def finish(self, summary_path: str, finished_at: str) -> None:
        with self.client.pipeline() as pipe:
            pipe.hset(
                self.k_meta,
                mapping={"status": "finished", "summary": summary_path, "finished_at": finished_at},
            )
            pipe.srem(ACTIVE_RUNS, self.run_id)
            pipe.delete(self.k_touched)
            pipe.execute()

    def release_summary(self, token: str) -> None:
        if self.client.get(self.k_summary_claim) == token:
            self.client.delete(self.k_summary_claim)

    # --- readers --------------------------------------------------------------------------------
    def snapshot(self, *, with_discovered: bool = True) -> Snapshot:
        with self.client.pipeline(transaction=False) as pipe:
            pipe.hgetall(self.k_meta)
            pipe.smembers(self.k_countries)
            pipe.hgetall(self.k_counts)
            if with_discovered:
                pipe.hgetall(self.k_discovered)
            replies = pipe.execute()
        meta = replies[0]
        if not meta:
            raise RunNotFound(f"no run {self.run_id!r} in this Redis")
        try:
            order = json.loads(meta.get("countries", "[]"))
        except ValueError:
            order = []
        countries = [c for c in order if c in replies[1]] + sorted(set(replies[1]) - set(order))
        counts = {k: int(v) for k, v in replies[2].items()}
        discovered = {k: json.loads(v) for k, v in replies[3].items()} if with_discovered else {}
        return Snapshot(self.run_id, meta, countries, counts, discovered)

    def outcomes(self) -> dict[str, dict[str, Any]]:
        return {k: json.loads(v) for k, v in self.outcome_lines().items()}

    def outcome_lines(self) -> dict[str, str]:
        """Job key -> its outcome as JSON, undecoded: the job's line of the manifest."""
        return self.client.hgetall(self.k_outcomes)

    def jobs(self) -> dict[str, dict[str, Any]]:
        return {k: json.loads(v) for k, v in self.client.hgetall(self.k_jobs).items()}

    def rejected(self) -> dict[str, dict[str, Any]]:
        return {k: json.loads(v) for k, v in self.client.hgetall(self.k_rejected).items()}

    def unsettled(self) -> dict[str, int]:
        """Job keys (and ``discover:{slug}`` entries) not settled yet -> last progress (ms)."""
        return {k: int(score) for k, score in self.client.zrange(self.k_touched, 0, -1, withscores=True)}


def latest_run_id(client: redis.Redis) -> str:
    ids = client.zrevrange(RUNS, 0, 0)
    if not ids:
        raise RunNotFound("no run has been started with this Redis yet")
    return ids[0]


def list_runs(client: redis.Redis, limit: int = 20) -> list[str]:
    return list(client.zrevrange(RUNS, 0, limit - 1))


def active_runs(client: redis.Redis) -> list[str]:
    return sorted(client.smembers(ACTIVE_RUNS))
