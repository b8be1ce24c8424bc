"""Lua scripts, registered once per Redis client so the hot path sends EVALSHA, not the source."""

from __future__ import annotations

import threading

import redis
from redis.commands.core import Script

_lock = threading.Lock()
_registered: dict[tuple[int, str], Script] = {}


def script(client: redis.Redis, source: str) -> Script:
    key = (id(client), source)
    found = _registered.get(key)
    if found is None:
        with _lock:
            found = _registered.setdefault(key, client.register_script(source))
    return found
