"""Download one page to disk, bounded in time, size and reach, and say why when it fails.

:func:`download` is the hot path of every worker thread. What it guarantees:

* **reach**: only ``http``/``https``, and only public addresses unless the limits allow more.
  Every connection is opened here, not by urllib3: the host is resolved once, *every* address
  it resolves to is checked, and the socket connects to a checked address (a rebinding DNS gets
  no second answer). Redirects are followed by hand, so each hop is checked the same way.
* **time**: a server that trickles a byte now and then never trips a read timeout (it resets on
  every byte), so one watchdog thread per process shuts down the socket of any download past
  its ``total_timeout``; connect and read timeouts are also clamped to the time left. A download
  thus ends within ``total_timeout`` plus a tick (50 ms), name resolution aside: the system
  resolver has no timeout of ours.
* **size**: the body is streamed, content-encoding removed, in 64 KiB pieces and cut as soon as
  it passes ``max_bytes``: memory stays bounded, gzip bombs included.
* **disk**: the page is written through :func:`storage.atomic_write`: on any failure nothing is
  left at ``dest``.

Failures are :class:`TransientFetchError` (worth retrying) or :class:`PermanentFetchError`, with a
stable ``reason`` code: ``timeout``, ``connection_error``, ``http_<status>``, ``dns_error``,
``tls_error``, ``blocked_address``, ``bad_scheme``, ``bad_url``, ``too_many_redirects``,
``not_html``, ``too_large``, ``decode_error``.
"""

from __future__ import annotations

import email.utils
import hashlib
import heapq
import ipaddress
import itertools
import os
import socket
import threading
import time
from contextlib import suppress
from dataclasses import dataclass
from datetime import timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urljoin, urlsplit

import requests
import urllib3.exceptions
from requests.adapters import HTTPAdapter
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool

from . import storage
from .errors import FetchError, PermanentFetchError, TransientFetchError

if TYPE_CHECKING:
    from .settings import Settings

_Network = ipaddress.IPv4Network | ipaddress.IPv6Network

_CHUNK = 64 * 1024
_HTML_TYPES = frozenset({"text/html", "application/xhtml+xml"})
#: The watchdog wakes at most this often: deadlines are honoured to within this many seconds.
_WATCHDOG_TICK = 0.05


@dataclass(frozen=True)
class FetchLimits:
    """What one download may do. Build it once (``from_settings``) and share it: it is hashable.

    Address policy: a connection may go to a public address, or anywhere if
    ``allow_private_addresses`` (the demo), or to an address inside one of ``allowed_networks``
    (tests allow ``127.0.0.1/32`` only, so that every other non-public address, ``10.0.0.1`` or
    ``169.254.169.254``, is still seen blocked). Non-public means private, loopback, link-local,
    multicast, reserved, unspecified or shared (CGNAT) space, IPv4-mapped IPv6 included.
    """

    connect_timeout: float
    read_timeout: float
    total_timeout: float
    max_bytes: int
    max_redirects: int
    allow_private_addresses: bool
    user_agent: str
    allowed_networks: tuple[_Network, ...] = ()

    @classmethod
    def from_settings(cls, settings: Settings) -> FetchLimits:
        return cls(
            connect_timeout=settings.connect_timeout,
            read_timeout=settings.read_timeout,
            total_timeout=settings.total_timeout,
            max_bytes=settings.max_page_bytes,
            max_redirects=settings.max_redirects,
            allow_private_addresses=settings.allow_private_addresses,
            user_agent=settings.user_agent,
        )


@dataclass(frozen=True)
class FetchResult:
    url: str
    final_url: str
    status: int
    bytes: int
    sha256: str  # of the bytes saved: the decoded body
    elapsed_ms: int
    content_type: str  # the header as sent, "" when missing
    redirects: int


def download(
    url: str, dest: Path, limits: FetchLimits, *, session: requests.Session | None = None
) -> FetchResult:
    """GET ``url`` (following redirects) and save the decoded body at ``dest``.

    ``session`` defaults to this thread's :func:`session_for_thread`; its cookies are cleared
    first, so one site's cookies never reach another (they do last along one redirect chain).

    Raises:
        TransientFetchError: timeout, connection_error, http_5xx, http_408, http_429 (these carry
            ``retry_after`` when the server sent Retry-After).
        PermanentFetchError: any other reason of the module docstring.
        OSError: ``dest`` cannot be written (a disk problem, not a fetch failure).
    """
    if session is None:
        session = session_for_thread(limits)
    session.cookies.clear()
    started = time.monotonic()
    job = _Job(limits, started + limits.total_timeout)
    _state.job = job
    _watchdog.watch(job)
    try:
        current = url
        for redirects in range(limits.max_redirects + 1):
            _check_url(current)
            response = _send(session, current, job, first=redirects == 0)
            try:
                location = session.get_redirect_target(response)
                if location:
                    current = urljoin(current, location).partition("#")[0]
                    continue
                _check_response(response, current, limits)
                size, sha256 = _save_body(response, dest, current, job)
                return FetchResult(
                    url=url,
                    final_url=current,
                    status=response.status_code,
                    bytes=size,
                    sha256=sha256,
                    elapsed_ms=int((time.monotonic() - started) * 1000),
                    content_type=response.headers.get("content-type", ""),
                    redirects=redirects,
                )
            finally:
                response.close()
        raise PermanentFetchError(
            "too_many_redirects", f"more than {limits.max_redirects} redirects from {url} (last: {current})"
        )
    finally:
        job.finish()
        _state.job = None


def session_for_thread(limits: FetchLimits) -> requests.Session:
    """This thread's pooled Session for ``limits`` (created on first use, then reused)."""
    session = _state.sessions.get(limits)
    if session is None:
        session = _state.sessions[limits] = _new_session(limits)
    return session


# --- one download: request, checks, body -------------------------------------------------------


def _check_url(url: str) -> None:
    try:
        parts = urlsplit(url)
        host = parts.hostname
    except ValueError:
        raise PermanentFetchError("bad_url", f"cannot parse {url!r}") from None
    if parts.scheme.lower() not in ("http", "https"):
        raise PermanentFetchError("bad_scheme", f"{parts.scheme or 'no'} scheme in {url!r}")
    if not host:
        raise PermanentFetchError("bad_url", f"no host in {url!r}")


def _send(session: requests.Session, url: str, job: _Job, *, first: bool) -> requests.Response:
    remaining = job.deadline - time.monotonic()
    if remaining <= 0:
        raise _total_timeout(job)
    limits = job.limits
    try:
        # Session.get() merges the session's settings into every request anew: a quarter of
        # requests' CPU per page. They never change, so the first request of a session is
        # prepared that way and copied; requests documents prepared requests for this.
        if first:  # no cookies yet: the session's request, with this URL
            request = _state.templates.get(session)
            if request is None:
                request = _state.templates[session] = session.prepare_request(requests.Request("GET", url))
            request = request.copy()
            request.prepare_url(url, None)
        else:  # along a redirect chain, with the cookies its hops set
            request = session.prepare_request(requests.Request("GET", url))
        return session.send(
            request,
            stream=True,
            allow_redirects=False,
            timeout=(min(limits.connect_timeout, remaining), min(limits.read_timeout, remaining)),
        )
    except FetchError:
        raise  # decided while connecting (DNS, address policy)
    except requests.RequestException as e:
        raise _classify(e, job, url) from e


def _check_response(response: requests.Response, url: str, limits: FetchLimits) -> None:
    status = response.status_code
    if not 200 <= status < 300:
        reason, detail = f"http_{status}", f"HTTP {status} from {url}"
        if 500 <= status < 600 or status in (408, 429):
            retry_after = parse_retry_after(response.headers.get("retry-after"))
            raise TransientFetchError(reason, detail, retry_after=retry_after)
        raise PermanentFetchError(reason, detail)
    mime = response.headers.get("content-type", "").partition(";")[0].strip().lower()
    if mime and mime not in _HTML_TYPES:
        raise PermanentFetchError("not_html", f"{mime} from {url}")
    length = response.headers.get("content-length", "").strip()
    if length.isdigit() and int(length) > limits.max_bytes:
        raise PermanentFetchError("too_large", f"Content-Length {length} above {limits.max_bytes} bytes")


def _save_body(response: requests.Response, dest: Path, url: str, job: _Job) -> tuple[int, str]:
    """Stream the decoded body into ``dest``: (bytes, sha256)."""
    max_bytes, deadline = job.limits.max_bytes, job.deadline
    digest = hashlib.sha256()
    size = 0
    with storage.atomic_write(dest) as out:
        try:
            for chunk in response.raw.stream(_CHUNK, decode_content=True):
                size += len(chunk)
                if size > max_bytes:
                    raise PermanentFetchError("too_large", f"body above {max_bytes} bytes from {url}")
                if time.monotonic() > deadline:
                    raise _total_timeout(job)
                digest.update(chunk)
                out.write(chunk)
        except urllib3.exceptions.HTTPError as e:
            raise _classify(e, job, url) from e
        if job.expired:
            # The watchdog cut the socket: a body without Content-Length then just looks short.
            raise _total_timeout(job)
    return size, digest.hexdigest()


def parse_retry_after(value: str | None, *, now: float | None = None) -> float | None:
    """Seconds to wait from a Retry-After header (delta-seconds or an HTTP date); None if unusable.

    Used for sites and for Semrush alike.
    """
    if not value or not value.strip():
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:  # "-0000": UTC by RFC 5322
        when = when.replace(tzinfo=timezone.utc)
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


# --- classification of library exceptions ------------------------------------------------------


def _total_timeout(job: _Job) -> TransientFetchError:
    return TransientFetchError("timeout", f"gave up after {job.limits.total_timeout}s in all")


def _classify(error: Exception, job: _Job, url: str) -> FetchError:
    """The FetchError for an exception of requests (sending) or urllib3 (reading the body)."""
    limits = job.limits
    if job.expired or time.monotonic() >= job.deadline:
        return _total_timeout(job)  # whatever broke, it broke because the watchdog cut it
    if isinstance(error, requests.ConnectTimeout):
        return TransientFetchError("timeout", f"connect timed out after {limits.connect_timeout}s ({url})")
    if isinstance(error, (requests.ReadTimeout, urllib3.exceptions.ReadTimeoutError)):
        return TransientFetchError("timeout", f"read timed out after {limits.read_timeout}s ({url})")
    if isinstance(error, requests.exceptions.SSLError):  # only while connecting: handshake, certificate
        return PermanentFetchError("tls_error", f"{_cause(error)} ({url})")
    if isinstance(error, (requests.exceptions.InvalidURL, requests.exceptions.MissingSchema)):
        return PermanentFetchError("bad_url", f"{_cause(error)} ({url})")
    if isinstance(error, (requests.exceptions.ContentDecodingError, urllib3.exceptions.DecodeError)):
        return PermanentFetchError("decode_error", f"{_cause(error)} ({url})")
    # Refused, reset, closed early, broken chunking, TLS trouble mid-body (urllib3's SSLError):
    # the network's fault.
    return TransientFetchError("connection_error", f"{_cause(error)} ({url})")


def _cause(error: BaseException) -> str:
    """One readable line for the innermost exception that ``error`` wraps."""
    for _ in range(8):  # requests -> MaxRetryError -> urllib3 error -> OSError, at most
        inner = next(
            (
                e
                for e in (getattr(error, "reason", None), error.__cause__, *error.args)
                if isinstance(e, BaseException)
            ),
            None,
        )
        if inner is None:
            break
        error = inner
    if isinstance(error, OSError) and error.strerror:
        return error.strerror
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0][:200]}" if text else type(error).__name__


# --- per-thread state and sessions -------------------------------------------------------------


class _ThreadState(threading.local):
    def __init__(self) -> None:
        self.job: _Job | None = None  # the download this thread is running
        self.sessions: dict[FetchLimits, requests.Session] = {}
        #: Per session, its first prepared request: the pattern of every first hop (see _send).
        self.templates: dict[requests.Session, requests.PreparedRequest] = {}


_state = _ThreadState()


def _new_session(limits: FetchLimits) -> requests.Session:
    session = requests.Session()
    # No proxies, netrc or CA bundle from the environment: predictable, and skips per-request
    # environment lookups.
    session.trust_env = False
    # A thread runs one request at a time: a few idle connections per host are plenty, and a
    # bounded number of hosts keeps the file descriptors of a long crawl in check.
    adapter = _Adapter(pool_connections=32, pool_maxsize=4, max_retries=0)
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    session.headers.clear()
    session.headers.update(
        {
            "User-Agent": limits.user_agent,
            "Accept": "text/html,application/xhtml+xml;q=0.9,*/*;q=0.5",
            "Accept-Encoding": "gzip, deflate",
            "Connection": "keep-alive",
        }
    )
    return session


class _Adapter(HTTPAdapter):
    """An adapter whose connections are :class:`_CheckedConnection` s."""

    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        super().init_poolmanager(*args, **kwargs)
        self.poolmanager.pool_classes_by_scheme = {"http": _HTTPPool, "https": _HTTPSPool}


# --- connections: address policy and deadline --------------------------------------------------


def _address_allowed(ip: ipaddress.IPv4Address | ipaddress.IPv6Address, limits: FetchLimits | None) -> bool:
    if limits is not None and (
        limits.allow_private_addresses or any(ip in net for net in limits.allowed_networks)
    ):
        return True
    if ip.version == 6 and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped  # ::ffff:10.0.0.1 is 10.0.0.1
    # is_global leaves out private, loopback, link-local, reserved, unspecified and shared
    # space, but counts most multicast as global.
    return ip.is_global and not ip.is_multicast


class _CheckedConnection:
    """Mixed into urllib3's connections: opens the socket under the address policy of the
    download in progress, and lets the watchdog cut it."""

    host: str
    port: int
    timeout: Any
    socket_options: Any
    sock: socket.socket | None
    _dns_host: str

    def _new_conn(self) -> socket.socket:
        job = _state.job
        try:
            infos = socket.getaddrinfo(self._dns_host, self.port, 0, socket.SOCK_STREAM)
        except (socket.gaierror, UnicodeError) as e:
            raise PermanentFetchError("dns_error", f"cannot resolve {self.host}: {e}") from None
        limits = job.limits if job is not None else None
        for info in infos:
            ip = ipaddress.ip_address(info[4][0])
            if not _address_allowed(ip, limits):
                what = f"{ip} is" if self._dns_host == info[4][0] else f"{self.host} resolves to {ip},"
                raise PermanentFetchError("blocked_address", f"{what} not a public address")
        error: OSError | None = None
        for family, kind, proto, _, address in infos:
            if job is not None and time.monotonic() >= job.deadline:
                break
            sock = socket.socket(family, kind, proto)
            try:
                for option in self.socket_options or ():
                    sock.setsockopt(*option)
                sock.settimeout(self.timeout)
                sock.connect(address)
            except OSError as e:
                sock.close()
                error = e
                continue
            if job is not None:
                job.attach(self)
            return sock
        if error is None or isinstance(error, TimeoutError):
            raise urllib3.exceptions.ConnectTimeoutError(self, f"connect to {self.host} timed out") from error
        raise urllib3.exceptions.NewConnectionError(self, f"cannot connect: {error}") from error

    def request(self, *args: Any, **kwargs: Any) -> None:
        # A connection reused from the pool is not opened again: attach it here.
        job = _state.job
        if job is not None:
            job.attach(self)
        super().request(*args, **kwargs)  # type: ignore[misc]

    def abort(self) -> None:
        """Shut the socket down (from the watchdog): a read blocked on it returns at once."""
        sock = self.sock
        if sock is not None:
            # socket.socket's own shutdown, also for a TLS socket: it wakes the reader without
            # touching TLS state that the reading thread is using.
            with suppress(OSError):
                socket.socket.shutdown(sock, socket.SHUT_RDWR)


class _HTTPConnection(_CheckedConnection, HTTPConnection):
    pass


class _HTTPSConnection(_CheckedConnection, HTTPSConnection):
    # No watchdog needed during the TLS handshake: CPython bounds a whole handshake by the
    # socket timeout (the connect timeout, clamped to the time left).
    pass


class _HTTPPool(HTTPConnectionPool):
    ConnectionCls = _HTTPConnection


class _HTTPSPool(HTTPSConnectionPool):
    ConnectionCls = _HTTPSConnection


class _Job:
    """The deadline of one download, and the connection it is using (for the watchdog)."""

    __slots__ = ("limits", "deadline", "expired", "_conn", "_done", "_lock")

    def __init__(self, limits: FetchLimits, deadline: float) -> None:
        self.limits = limits
        self.deadline = deadline
        self.expired = False
        self._conn: _CheckedConnection | None = None
        self._done = False
        self._lock = threading.Lock()

    def attach(self, conn: _CheckedConnection) -> None:
        self._conn = conn

    def expire(self) -> None:
        # Under the lock: once finish() has returned, the connection may serve the thread's next
        # download, which a late shutdown would break.
        with self._lock:
            if self._done:
                return
            self.expired = True
            if self._conn is not None:
                self._conn.abort()

    def finish(self) -> None:
        with self._lock:
            self._done = True
            self._conn = None


class _Watchdog:
    """One thread per process that expires the downloads past their deadline.

    Finished downloads are not removed (that would cost a heap search each); they are dropped
    when their deadline comes. Wake-ups are coalesced to one per ``_WATCHDOG_TICK`` at most.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._heap: list[tuple[float, int, _Job]] = []
        self._sequence = itertools.count()  # breaks ties: jobs do not compare
        self._thread: threading.Thread | None = None

    def watch(self, job: _Job) -> None:
        with self._cond:
            heapq.heappush(self._heap, (job.deadline, next(self._sequence), job))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="fetch-watchdog", daemon=True)
                self._thread.start()
            elif self._heap[0][2] is job:
                self._cond.notify()  # earlier than what the thread sleeps towards

    def _run(self) -> None:
        while True:
            with self._cond:
                now = time.monotonic()
                while not self._heap or self._heap[0][0] > now:
                    wait = max(self._heap[0][0] - now, _WATCHDOG_TICK) if self._heap else None
                    self._cond.wait(wait)
                    now = time.monotonic()
                expired = []
                while self._heap and self._heap[0][0] <= now:
                    expired.append(heapq.heappop(self._heap)[2])
            for job in expired:
                job.expire()


_watchdog = _Watchdog()


def _after_fork_in_child() -> None:
    # The child has no watchdog thread, and sockets it shares with its parent must not be reused.
    global _watchdog
    _watchdog = _Watchdog()
    _state.job = None
    _state.sessions = {}
    _state.templates = {}


os.register_at_fork(after_in_child=_after_fork_in_child)
