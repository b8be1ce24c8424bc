"""WorkerPool's exception hierarchy and the exit codes the commands map it to.

Every error a user can cause is a :class:`WorkerPoolError`: the commands print its one-line
message and its hint (what to do next) and exit with its ``exit_code``, never with a traceback.
"""

from __future__ import annotations

#: Exit codes of ``python -m pipeline.kickoff``, ``status`` and ``dlq`` (documented in the README).
EXIT_OK = 0
EXIT_INTERNAL = 1
EXIT_USAGE = 2
EXIT_REDIS = 3
EXIT_OUTPUT = 4
EXIT_COUNTRY = 5
EXIT_SEMRUSH = 6
EXIT_NOT_FOUND = 7
EXIT_INTERRUPTED = 130


class WorkerPoolError(Exception):
    """Base of every error WorkerPool raises on purpose."""

    exit_code = EXIT_INTERNAL
    hint = ""

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        if hint is not None:
            self.hint = hint

    def describe(self) -> str:
        """The message and the hint, as shown to a user."""
        text = str(self)
        return f"{text}\n  hint: {self.hint}" if self.hint else text


class UsageError(WorkerPoolError):
    """A bad flag or setting value."""

    exit_code = EXIT_USAGE


class RedisUnavailable(WorkerPoolError):
    """Redis cannot be reached, or is not usable as a queue."""

    exit_code = EXIT_REDIS
    hint = "check REDIS_URL (unset it to use the embedded Redis) and that the server is running"


class OutputNotWritable(WorkerPoolError):
    """OUTPUT_DIR cannot be created or written."""

    exit_code = EXIT_OUTPUT
    hint = "set OUTPUT_DIR to a folder you can write to"


class UnknownCountry(WorkerPoolError):
    """A country name, slug or code that WorkerPool does not know."""

    exit_code = EXIT_COUNTRY

    def __init__(self, token: str, suggestions: list[str] | tuple[str, ...] = ()) -> None:
        self.token = token
        self.suggestions = list(suggestions)
        hint = (
            "did you mean: " + ", ".join(self.suggestions) + "?"
            if self.suggestions
            else "use an English name, a slug such as united-states, an ISO code such as de, or global"
        )
        super().__init__(f"unknown country {token!r}", hint=hint)


class RunNotFound(WorkerPoolError):
    """No run with that id (or no run at all) in this Redis."""

    exit_code = EXIT_NOT_FOUND
    hint = "list runs with `python -m pipeline.status --list`; check REDIS_URL and OUTPUT_DIR"


class EntryNotFound(WorkerPoolError):
    """No dead-lettered or quarantined message with that id."""

    exit_code = EXIT_NOT_FOUND
    hint = "list the entries with `python -m pipeline.dlq list --all`; check REDIS_URL and OUTPUT_DIR"


class SemrushError(WorkerPoolError):
    """A Semrush ranking page could not be used."""

    exit_code = EXIT_SEMRUSH
    #: Whether trying again later may succeed (network trouble, 403/429/5xx).
    transient = False

    def __init__(self, message: str, *, retry_after: float | None = None, hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.retry_after = retry_after


class SemrushUnavailable(SemrushError):
    """Semrush did not answer usefully (connection error, timeout, 403/429/5xx)."""

    transient = True
    hint = "check SEMRUSH_BASE_URL and the network; on 403/429 raise SEMRUSH_DELAY"


class CountryNotRanked(SemrushError):
    """Semrush has no ranking page for the country (HTTP 404)."""


class NoRankingTable(SemrushError):
    """The page is not a ranking (block page, challenge, redesign): kept on disk for diagnosis."""


class FetchError(WorkerPoolError):
    """A page download failed. ``reason`` is a short stable code (``http_404``, ``timeout`` ...)."""

    transient = False

    def __init__(self, reason: str, detail: str = "", *, retry_after: float | None = None) -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.detail = detail
        self.retry_after = retry_after


class TransientFetchError(FetchError):
    """Worth retrying: timeouts, connection errors, 5xx, 429, 408."""

    transient = True


class PermanentFetchError(FetchError):
    """Not worth retrying: other 4xx, DNS, TLS, too large, redirect trouble, blocked address."""


class InvalidJob(WorkerPoolError):
    """A message that does not match its actor's schema, or carries a hostile value."""

    exit_code = EXIT_USAGE


class UnsafePath(InvalidJob):
    """A storage path that would land outside OUTPUT_DIR."""
