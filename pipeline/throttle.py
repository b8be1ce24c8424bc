"""One Semrush request at a time across the whole cluster, SEMRUSH_DELAY seconds apart.

SEMRUSH_DELAY=0 turns the gate off: no pacing and no turns (a local mirror, such as the demo's
or the benchmark's, has nobody to be polite to).

A lock and a "not before" time in Redis, both read with Redis's own clock so that hosts with
skewed clocks agree. A holder that dies lets go when the lock expires.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import redis

from .scripts import script

#: Longest a waiter blocks before it looks again, should the holder's wake-up be lost.
WAKE_TIMEOUT_S = 0.5

LOCK = "wp:semrush:lock"
NOT_BEFORE = "wp:semrush:not-before"
#: The start of the last turn handed out by :meth:`SemrushGate.reserve`, plus the delay.
NEXT_TURN = "wp:semrush:next-turn"
#: A list the holder pushes to when it lets go: one blocked waiter wakes at once (BLPOP).
WAKE = "wp:semrush:wake"

# Redis's own clock, in ms: hosts with skewed clocks agree on it.
_REDIS_NOW = """
local t = redis.call('time')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
"""

# KEYS: lock, not-before.  ARGV: token, hold ms.
# Returns 0 when acquired, -ms while another holds the gate, +ms until the delay has passed.
_ACQUIRE = (
    _REDIS_NOW
    + """
local ttl = redis.call('pttl', KEYS[1])
if ttl > 0 then return -ttl end
local not_before = tonumber(redis.call('get', KEYS[2]) or '0')
if not_before > now then return not_before - now end
redis.call('set', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 0
"""
)

# KEYS: lock, not-before, wake.  ARGV: token, delay ms.
_RELEASE = (
    _REDIS_NOW
    + """
redis.call('set', KEYS[2], now + tonumber(ARGV[2]), 'PX', tonumber(ARGV[2]) + 1000)
if redis.call('get', KEYS[1]) == ARGV[1] then redis.call('del', KEYS[1]) end
redis.call('lpush', KEYS[3], 1)
redis.call('ltrim', KEYS[3], 0, 0)
redis.call('pexpire', KEYS[3], 60000)
return 1
"""
)


# KEYS: not-before, next-turn.  ARGV: delay ms.  Returns ms until the turn reserved by this call.
_RESERVE = (
    _REDIS_NOW
    + """
local turn = math.max(now, tonumber(redis.call('get', KEYS[1]) or '0'),
                      tonumber(redis.call('get', KEYS[2]) or '0'))
local delay = tonumber(ARGV[1])
if delay > 0 then redis.call('set', KEYS[2], turn + delay, 'PX', turn - now + delay + 60000) end
return turn - now
"""
)


class GateBusy(Exception):
    """Waiting for the gate would take longer than allowed; ``wait_s`` says how long."""

    def __init__(self, wait_s: float) -> None:
        super().__init__(f"Semrush gate busy for {wait_s:.1f}s")
        self.wait_s = wait_s


class SemrushGate:
    def __init__(self, client: redis.Redis, *, delay_s: float, hold_s: float) -> None:
        self.client = client
        self.delay_ms = int(delay_s * 1000)
        self.hold_ms = int(hold_s * 1000)

    @property
    def patience_s(self) -> float:
        """How long a worker thread should wait for its turn: two turns, and at least a second."""
        return max(1.0, 2 * self.delay_ms / 1000)

    def reserve(self) -> float:
        """Book the next free turn, SEMRUSH_DELAY after the last one booked; seconds until it.

        A caller whose turn is far off comes back then instead of holding a worker thread in
        :meth:`turn` all that time (200 countries at 3 s apart is 10 minutes of waiting).
        Turns are a schedule, not a lock: :meth:`turn` still enforces one at a time.
        """
        if self.delay_ms <= 0:
            return 0.0
        return script(self.client, _RESERVE)([NOT_BEFORE, NEXT_TURN], [self.delay_ms]) / 1000

    @contextmanager
    def turn(self, *, max_wait_s: float = 30.0) -> Iterator[None]:
        """Wait for this process's turn (up to ``max_wait_s``), then hold it while inside.

        Raises:
            GateBusy: the wait would exceed ``max_wait_s``.
        """
        if self.delay_ms <= 0:
            yield
            return
        token = uuid.uuid4().hex
        deadline = time.monotonic() + max_wait_s
        while True:
            wait_ms = script(self.client, _ACQUIRE)([LOCK, NOT_BEFORE], [token, self.hold_ms])
            if not wait_ms:
                break
            left_s = deadline - time.monotonic()
            if wait_ms < 0:  # held: wake as soon as the holder lets go (its lock's TTL is a bound only)
                if left_s <= 0:
                    raise GateBusy(max_wait_s)
                self.client.blpop([WAKE], timeout=min(-wait_ms / 1000, left_s, WAKE_TIMEOUT_S))
            elif wait_ms / 1000 > left_s:
                raise GateBusy(wait_ms / 1000)
            else:
                time.sleep(wait_ms / 1000)
        try:
            yield
        finally:
            script(self.client, _RELEASE)([LOCK, NOT_BEFORE, WAKE], [token, self.delay_ms])
