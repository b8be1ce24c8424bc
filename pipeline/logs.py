"""Logging setup: JSON lines (python-json-logger) by default, plain text on request.

Context goes in ``extra=``: run_id, actor, message_id, country, rank, domain, url, attempt,
duration_ms, outcome, error. Worker processes started by the ``dramatiq`` CLI already have a
handler (a pipe to their parent); only its formatter is replaced.
"""

from __future__ import annotations

import logging
import sys

try:  # python-json-logger 3.1+ moved the formatter
    from pythonjsonlogger.json import JsonFormatter
except ImportError:  # pragma: no cover
    from pythonjsonlogger.jsonlogger import JsonFormatter  # type: ignore[no-redef]

from .settings import Settings

_TEXT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def formatter(log_format: str) -> logging.Formatter:
    if log_format == "text":
        return logging.Formatter(_TEXT)
    return JsonFormatter(
        "%(asctime)s %(levelname)s %(name)s %(process)d %(message)s",
        rename_fields={"asctime": "time", "levelname": "level", "name": "logger", "process": "pid"},
        timestamp=False,
    )


def setup(settings: Settings, *, stream=None) -> None:
    """Configure the root logger once for this process."""
    root = logging.getLogger()
    level = getattr(logging, settings.log_level.upper(), logging.INFO)
    if not root.handlers:
        root.addHandler(logging.StreamHandler(stream or sys.stderr))
    for handler in root.handlers:
        handler.setFormatter(formatter(settings.log_format))
    root.setLevel(level)
    # Per-request chatter from the HTTP stack is noise at INFO.
    for noisy in ("urllib3", "requests"):
        logging.getLogger(noisy).setLevel(max(level, logging.WARNING))
