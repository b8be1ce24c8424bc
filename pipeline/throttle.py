"""One Semrush request at a time across the whole cluster, SEMRUSH_DELAY seconds apart.

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
#: A list the holder pushes to when it lets go: one blocked waiter wakes at once (BLPOP).
WAKE = "wp:semrush:wake"

# KEYS: lock, not-before.  ARGV: token, hold ms.
# Returns 0 when acquired, -ms while another holds the gate, +ms until the delay has passed.
_ACQUIRE = """
local t = redis.call('time')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local ttl = redis.call('pttl', KEYS[1])
if ttl > 0 then return -ttl end
local not_before = tonumber(redis.call('get', KEYS[2]) or '0')
if not_before > now then return not_before - now end
redis.call('set', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 0
"""

# KEYS: lock, not-before, wake.  ARGV: token, delay ms.
_RELEASE = """
local t = redis.call('time')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
redis.call('set', KEYS[2], now + tonumber(ARGV[2]), 'PX', tonumber(ARGV[2]) + 1000)
if redis.call('get', KEYS[1]) == ARGV[1] then redis.call('del', KEYS[1]) end
redis.call('lpush', KEYS[3], 1)
redis.call('ltrim', KEYS[3], 0, 0)
redis.call('pexpire', KEYS[3], 60000)
return 1
"""


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

    @contextmanager
    def turn(self, *, max_wait_s: float = 30.0) -> Iterator[None]:
        """Wait for this process's turn (up to ``max_wait_s``), then hold it while inside.

        Raises:
            GateBusy: the wait would exceed ``max_wait_s``.
        """
        token = uuid.uuid4().hex
        deadline = time.monotonic() + max_wait_s
        while True:
            wait_ms = script(self.client, _ACQUIRE)([LOCK, NOT_BEFORE], [token, self.hold_ms])
            if not wait_ms:
                break
            wait_s = abs(wait_ms) / 1000
            if time.monotonic() + wait_s > deadline:
                raise GateBusy(wait_s)
            if wait_ms < 0:  # held: wake as soon as the holder lets go
                self.client.blpop([WAKE], timeout=min(wait_s, WAKE_TIMEOUT_S))
            else:
                time.sleep(wait_s)
        try:
            yield
        finally:
            script(self.client, _RELEASE)([LOCK, NOT_BEFORE, WAKE], [token, self.delay_ms])
