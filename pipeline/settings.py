"""Every tunable of WorkerPool: its default, its environment name and what it does.

Precedence: command-line flags (passed as ``overrides``) > process environment > ``.env`` file
(in the current folder, or the file named by ``WORKERPOOL_ENV_FILE``) > the defaults below.
Nothing else in WorkerPool reads ``os.environ`` for a setting. ``.env.example`` lists them all;
a test keeps the two in step.
"""

from __future__ import annotations

import dataclasses
import functools
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import UsageError


def _setting(default: Any, doc: str) -> Any:
    return field(default=default, metadata={"doc": doc})


@dataclass(frozen=True)
class Settings:
    # --- where things are -------------------------------------------------------------------
    redis_url: str = _setting(
        "", "Redis shared by the master and the workers. Empty: kickoff starts an embedded Redis."
    )
    output_dir: Path = _setting(Path("./downloads"), "Folder that receives runs: {OUTPUT_DIR}/{run_id}/...")
    semrush_base_url: str = _setting("https://www.semrush.com", "Where the ranking pages are fetched from.")
    site_url_template: str = _setting("https://{domain}/", "How a domain becomes the URL that is downloaded.")
    top_n: int = _setting(20, "How many sites of each country's ranking are downloaded (1..20).")
    log_level: str = _setting("INFO", "DEBUG, INFO, WARNING or ERROR.")
    log_format: str = _setting("json", "json (one JSON object per line) or text.")

    # --- Semrush politeness ------------------------------------------------------------------
    semrush_delay: float = _setting(
        3.0,
        "Seconds between two Semrush requests, across the whole cluster (one at a time);"
        " 0: no pacing at all (a local mirror).",
    )
    semrush_max_attempts: int = _setting(5, "Attempts per ranking page on 403/429/5xx/network errors.")

    # --- one download --------------------------------------------------------------------------
    user_agent: str = _setting(
        "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0 Safari/537.36"
        " WorkerPool/0.1",
        "User-Agent header of every request.",
    )
    connect_timeout: float = _setting(5.0, "Seconds to open a connection.")
    read_timeout: float = _setting(10.0, "Seconds of silence allowed while reading an answer.")
    total_timeout: float = _setting(20.0, "Seconds one download may take in all (a trickling server is cut).")
    max_page_bytes: int = _setting(5_000_000, "Largest page saved, after content-encoding is removed.")
    max_redirects: int = _setting(5, "Redirects followed per download.")
    allow_private_addresses: bool = _setting(
        False, "Allow downloads from loopback/private/link-local addresses (the demo and tests need it)."
    )

    # --- retries and delivery guarantees ---------------------------------------------------------
    max_attempts: int = _setting(4, "Attempts per page before a transient failure is recorded as failed.")
    retry_min_backoff_ms: int = _setting(2_000, "First retry delay; doubles each attempt (with jitter).")
    retry_max_backoff_ms: int = _setting(60_000, "Longest retry delay (a Retry-After above it is capped).")
    heartbeat_timeout_ms: int = _setting(
        15_000, "A worker silent this long is dead: its unfinished messages go back to the queue."
    )
    reclaim_interval: float = _setting(2.0, "Seconds between two checks for dead workers (by every worker).")
    reaper_deadline: float = _setting(
        300.0, "Seconds a job may go without progress before the reaper enqueues it again."
    )
    reaper_interval: float = _setting(
        10.0, "Seconds between two reaper passes (one worker of the cluster runs it)."
    )
    reaper_lost_after: float = _setting(
        30.0, "Seconds after which an unsettled job that is in no queue is taken as lost and enqueued again."
    )
    redelivery_limit: int = _setting(
        3, "Times a message may take its worker down with it before it is dead-lettered as poison."
    )
    max_message_bytes: int = _setting(16_384, "Larger messages are malformed (quarantined, never run).")

    # --- workers started by kickoff --local ----------------------------------------------------
    worker_threads: int = _setting(16, "Threads per worker process started by --local.")
    worker_shutdown_timeout_ms: int = _setting(
        25_000, "How long a stopping worker lets running jobs finish (keep below the host's grace period)."
    )

    @staticmethod
    def env_name(name: str) -> str:
        return name.upper()

    @classmethod
    def describe(cls) -> list[tuple[str, str, str]]:
        """(ENV_NAME, default, doc) for every setting, in declaration order."""
        rows = []
        for f in dataclasses.fields(cls):
            default = f.default
            shown = str(default).lower() if isinstance(default, bool) else str(default)
            rows.append((cls.env_name(f.name), shown, f.metadata["doc"]))
        return rows

    @classmethod
    def load(
        cls,
        overrides: Mapping[str, Any] | None = None,
        *,
        environ: Mapping[str, str] | None = None,
        env_file: str | os.PathLike[str] | None = None,
    ) -> Settings:
        """Build settings from defaults, ``.env``, the environment and ``overrides`` (by field name).

        Raises:
            UsageError: a value does not parse or is out of range; the message names the setting.
        """
        environ = os.environ if environ is None else environ
        if env_file is None:
            env_file = environ.get("WORKERPOOL_ENV_FILE", ".env")
        raw: dict[str, str] = dict(read_env_file(Path(env_file)))
        raw.update(environ)
        values: dict[str, Any] = {}
        for f in dataclasses.fields(cls):
            name = cls.env_name(f.name)
            if name in raw:
                values[f.name] = _parse(name, raw[name], f.type)
        for key, value in (overrides or {}).items():
            if value is None:
                continue
            f = _field(cls, key)
            values[key] = _parse(cls.env_name(f.name), value, f.type) if isinstance(value, str) else value
        settings = cls(**values)
        settings.check()
        return settings

    def check(self) -> None:
        if not 1 <= self.top_n <= 20:
            raise UsageError(f"TOP_N must be between 1 and 20, not {self.top_n}")
        if self.log_format not in ("json", "text"):
            raise UsageError(f"LOG_FORMAT must be json or text, not {self.log_format!r}")
        if "{domain}" not in self.site_url_template:
            raise UsageError(f"SITE_URL_TEMPLATE must contain {{domain}}: {self.site_url_template!r}")
        for name in ("connect_timeout", "read_timeout", "total_timeout", "max_page_bytes", "max_attempts"):
            if getattr(self, name) <= 0:
                raise UsageError(f"{self.env_name(name)} must be positive")

    def with_overrides(self, **changes: Any) -> Settings:
        return dataclasses.replace(self, **changes)

    def to_environ(self) -> dict[str, str]:
        """These settings as environment variables, to hand to child processes."""
        env = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            env[self.env_name(f.name)] = str(value).lower() if isinstance(value, bool) else str(value)
        return env


def _field(cls: type, name: str) -> dataclasses.Field:
    for f in dataclasses.fields(cls):
        if f.name == name:
            return f
    raise KeyError(name)


_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def _parse(name: str, text: str, kind: Any) -> Any:
    text = text.strip()
    kind = kind if isinstance(kind, str) else kind.__name__
    try:
        if kind == "int":
            return int(text.replace("_", ""))
        if kind == "float":
            return float(text)
        if kind == "bool":
            if text.lower() in _TRUE:
                return True
            if text.lower() in _FALSE:
                return False
            raise ValueError(text)
        if kind == "Path":
            return Path(text).expanduser()
        return text
    except ValueError:
        raise UsageError(f"setting {name}={text!r} is not a valid {kind}") from None


def read_env_file(path: Path) -> dict[str, str]:
    """``KEY=value`` lines of a ``.env`` file; ``#`` comments, blank lines and ``export`` allowed."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (FileNotFoundError, IsADirectoryError):
        return {}
    except OSError as e:
        raise UsageError(f"cannot read {path}: {e.strerror}") from None
    values = {}
    for line in lines:
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, _, value = line.removeprefix("export ").partition("=")
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        values[key.strip()] = value
    return values


@functools.lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The settings of this process, loaded once (workers read them at import)."""
    return Settings.load()
