"""pipeline.fetch against local servers that misbehave (tests/hostile_servers.py).

Every failure must come out as the right error class and reason, within the total deadline,
with nothing left on disk and bounded memory.
"""

from __future__ import annotations

import dataclasses
import email.utils
import hashlib
import ipaddress
import socket
import threading
import time
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import pytest
from hostile_servers import (
    HostileServer,
    banner,
    endless,
    gzip_bomb,
    gzip_page,
    oversized,
    page,
    redirect,
    reset_mid_body,
    respond,
    silent,
    trickle,
    trickle_tls_handshake,
)

from pipeline.errors import FetchError, PermanentFetchError, TransientFetchError
from pipeline.fetch import FetchLimits, FetchResult, download, parse_retry_after, session_for_thread
from pipeline.settings import Settings

LIMITS = dataclasses.replace(
    FetchLimits.from_settings(Settings()),
    connect_timeout=1.0,
    read_timeout=1.0,
    total_timeout=2.0,
    max_bytes=1_000_000,
    max_redirects=3,
    allow_private_addresses=False,
    # Only the test servers' address: every other non-public address must still be blocked.
    allowed_networks=(ipaddress.ip_network("127.0.0.1/32"),),
)
MARGIN = 1.0  # seconds allowed past total_timeout (watchdog tick, scheduling)
MEMORY_CAP = 20 * 1024 * 1024
HTML = b"<!doctype html><title>ok</title><p>hello</p>"


@pytest.fixture
def dest(tmp_path: Path) -> Path:
    return tmp_path / "out" / "site" / "index.html"


def serve(**routes: object) -> HostileServer:
    """A server with routes given as keyword arguments: ``root`` is "/", ``a`` is "/a"."""
    return HostileServer({("/" if name == "root" else f"/{name}"): h for name, h in routes.items()})  # type: ignore[misc]


def assert_clean(dest: Path) -> None:
    """Nothing at dest, and no temporary file anywhere near it."""
    assert not dest.exists()
    root = dest.parents[1]
    assert not root.exists() or [p for p in root.rglob("*") if p.is_file()] == []


def fails(
    url: str, dest: Path, kind: type[FetchError], reason: str, limits: FetchLimits = LIMITS
) -> FetchError:
    """Download ``url`` expecting ``kind``/``reason``; check time, disk and memory."""
    tracemalloc.start()
    started = time.monotonic()
    try:
        with pytest.raises(kind) as caught:
            download(url, dest, limits)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    elapsed = time.monotonic() - started
    error = caught.value
    assert error.reason == reason, str(error)
    assert elapsed < limits.total_timeout + MARGIN, f"took {elapsed:.2f}s"
    assert peak < MEMORY_CAP, f"peak memory {peak / 1e6:.1f} MB"
    assert "\n" not in error.detail and error.detail
    assert_clean(dest)
    return error


@pytest.fixture
def connects(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[object]]:
    """Every address a socket connects to during the test."""
    seen: list[object] = []
    original = socket.socket.connect

    def spy(sock: socket.socket, address: object) -> None:
        seen.append(address)
        original(sock, address)

    monkeypatch.setattr(socket.socket, "connect", spy)
    yield seen


# --- pages that work --------------------------------------------------------------------------


def test_normal_page(dest: Path) -> None:
    with serve(root=page(HTML)) as server:
        result = download(server.url("/"), dest, LIMITS)
    assert isinstance(result, FetchResult)
    assert dest.read_bytes() == HTML
    assert result.url == result.final_url == server.url("/")
    assert (result.status, result.bytes, result.redirects) == (200, len(HTML), 0)
    assert result.sha256 == hashlib.sha256(HTML).hexdigest()
    assert result.content_type == "text/html; charset=utf-8"
    assert 0 <= result.elapsed_ms < 2000
    headers = server.requests[0].headers
    assert headers["user-agent"] == LIMITS.user_agent
    assert "gzip" in headers["accept-encoding"] and "text/html" in headers["accept"]
    assert_no_part_files(dest.parent)


def assert_no_part_files(folder: Path) -> None:
    assert [p.name for p in folder.iterdir() if p.name.endswith(".part")] == []


def test_connections_are_reused_across_downloads(tmp_path: Path) -> None:
    with serve(root=page(HTML)) as server:
        for i in range(5):
            download(server.url("/"), tmp_path / f"{i}.html", LIMITS)
        assert server.connections == 1
    assert session_for_thread(LIMITS) is session_for_thread(LIMITS)


def test_gzip_page_is_saved_decoded(dest: Path) -> None:
    body = HTML * 1000
    with serve(root=gzip_page(body)) as server:
        result = download(server.url("/"), dest, LIMITS)
    assert dest.read_bytes() == body
    assert result.bytes == len(body)
    assert result.sha256 == hashlib.sha256(body).hexdigest()


@pytest.mark.parametrize(
    "content_type",
    ["", "text/html; charset=bogus-42", "text/html", "TEXT/HTML;charset=", "application/xhtml+xml"],
)
def test_missing_or_wrong_charset_is_saved_as_sent(dest: Path, content_type: str) -> None:
    body = "<p>caf\xe9 \u20ac</p>".encode("latin-1", "replace")
    with serve(root=page(body, content_type)) as server:
        result = download(server.url("/"), dest, LIMITS)
    assert dest.read_bytes() == body
    assert result.content_type == content_type


def test_redirects_are_followed_and_counted(dest: Path) -> None:
    with serve(root=redirect("/a", 301), a=redirect("b?x=1"), b=page(HTML)) as server:
        result = download(server.url("/"), dest, LIMITS)
    assert result.redirects == 2
    assert result.final_url == server.url("/b?x=1")
    assert dest.read_bytes() == HTML


def test_allow_private_addresses_allows_loopback(dest: Path) -> None:
    limits = dataclasses.replace(LIMITS, allow_private_addresses=True, allowed_networks=())
    with serve(root=page(HTML)) as server:
        download(server.url("/"), dest, limits)
    assert dest.read_bytes() == HTML


def test_download_replaces_an_older_copy(dest: Path) -> None:
    dest.parent.mkdir(parents=True)
    dest.write_bytes(b"old")
    with serve(root=page(HTML)) as server:
        download(server.url("/"), dest, LIMITS)
    assert dest.read_bytes() == HTML


# --- time -------------------------------------------------------------------------------------


def test_server_that_never_answers(dest: Path) -> None:
    with serve(root=silent()) as server:
        error = fails(server.url("/"), dest, TransientFetchError, "timeout")
    assert "read timed out after 1.0s" in error.detail


@pytest.mark.parametrize("headers_too", [False, True], ids=["body", "status-line"])
def test_trickling_server_is_cut_at_the_total_deadline(dest: Path, headers_too: bool) -> None:
    # One byte every 0.3 s never trips the 1 s read timeout: only the total deadline stops it.
    with serve(root=trickle(0.3, headers_too=headers_too)) as server:
        started = time.monotonic()
        error = fails(server.url("/"), dest, TransientFetchError, "timeout")
        assert time.monotonic() - started >= LIMITS.total_timeout - 0.1
    assert "in all" in error.detail


def test_thread_downloads_normally_after_a_cut(tmp_path: Path) -> None:
    # The connection the watchdog shut down must not poison the thread's next downloads.
    with serve(root=page(HTML), slow=trickle(0.3)) as server:
        fails(server.url("/slow"), tmp_path / "a" / "x" / "slow.html", TransientFetchError, "timeout")
        for i in range(3):
            assert download(server.url("/"), tmp_path / f"{i}.html", LIMITS).bytes == len(HTML)
        time.sleep(LIMITS.total_timeout + 0.2)  # the finished downloads' deadlines pass harmlessly
        assert download(server.url("/"), tmp_path / "last.html", LIMITS).bytes == len(HTML)


# --- size -------------------------------------------------------------------------------------


@pytest.mark.parametrize("chunked", [True, False], ids=["chunked", "until-close"])
def test_endless_body(dest: Path, chunked: bool) -> None:
    with serve(root=endless(chunked=chunked)) as server:
        fails(server.url("/"), dest, PermanentFetchError, "too_large")


@pytest.mark.parametrize("content_length", [True, False], ids=["with-length", "without-length"])
def test_body_far_over_the_cap(dest: Path, content_length: bool) -> None:
    with serve(root=oversized(50_000_000, content_length=content_length)) as server:
        error = fails(server.url("/"), dest, PermanentFetchError, "too_large")
    assert ("Content-Length" in error.detail) == content_length


def test_gzip_bomb(dest: Path) -> None:
    with serve(root=gzip_bomb()) as server:
        fails(server.url("/"), dest, PermanentFetchError, "too_large")


def test_corrupt_gzip(dest: Path) -> None:
    with serve(root=respond(200, b"\x1f\x8b\x08\x00garbage" * 100, {"Content-Encoding": "gzip"})) as server:
        fails(server.url("/"), dest, PermanentFetchError, "decode_error")


# --- reach ------------------------------------------------------------------------------------


def test_redirect_loop(dest: Path) -> None:
    with serve(a=redirect("/b"), b=redirect("/a")) as server:
        fails(server.url("/a"), dest, PermanentFetchError, "too_many_redirects")
        assert len(server.requests) == LIMITS.max_redirects + 1


@pytest.mark.parametrize(
    "target",
    [
        "http://10.0.0.1/",
        "http://169.254.169.254/latest/meta-data/",
        "http://0.0.0.0/",
        "http://224.0.0.1/",
        "http://100.64.0.1/",
        "http://[::1]/",
        "http://[::ffff:10.0.0.1]/",
        "http://[fe80::1]/",
    ],
)
def test_redirect_to_a_private_address_is_blocked_before_connecting(
    dest: Path, target: str, connects: list[object]
) -> None:
    with serve(root=redirect(target)) as server:
        error = fails(server.url("/"), dest, PermanentFetchError, "blocked_address")
    assert all(address[0] == "127.0.0.1" for address in connects), connects  # type: ignore[index]
    assert "not a public address" in error.detail


def test_loopback_is_blocked_by_default(dest: Path, connects: list[object]) -> None:
    limits = dataclasses.replace(LIMITS, allowed_networks=())
    with serve(root=page(HTML)) as server:
        fails(server.url("/"), dest, PermanentFetchError, "blocked_address", limits)
        assert server.connections == 0
    assert connects == []


def test_host_names_are_checked_on_every_address(dest: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A name with one allowed and one private address is blocked (no racing for the good one).
    def resolve(host: str, port: int, *args: object) -> list[tuple]:
        return [
            (socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", port)),
            (socket.AF_INET, socket.SOCK_STREAM, 6, "", ("10.1.2.3", port)),
        ]

    monkeypatch.setattr(socket, "getaddrinfo", resolve)
    fails("http://two-faced.test/", dest, PermanentFetchError, "blocked_address")


@pytest.mark.parametrize("location", ["file:///etc/passwd", "ftp://127.0.0.1/", "gopher://x/"])
def test_redirect_to_another_scheme(dest: Path, location: str) -> None:
    with serve(root=redirect(location)) as server:
        fails(server.url("/"), dest, PermanentFetchError, "bad_scheme")


@pytest.mark.parametrize("url", ["ftp://127.0.0.1/", "javascript:alert(1)", "127.0.0.1/"])
def test_bad_scheme(dest: Path, url: str) -> None:
    fails(url, dest, PermanentFetchError, "bad_scheme")


@pytest.mark.parametrize("url", ["http:///path", "http://[::1/"])
def test_bad_url(dest: Path, url: str) -> None:
    fails(url, dest, PermanentFetchError, "bad_url")


def test_dns_failure(dest: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def resolve(*args: object) -> list[tuple]:
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    monkeypatch.setattr(socket, "getaddrinfo", resolve)
    error = fails("http://no-such-host.invalid/", dest, PermanentFetchError, "dns_error")
    assert "no-such-host.invalid" in error.detail


def test_tls_failure(dest: Path) -> None:
    # A plain-HTTP answer where a TLS handshake is expected.
    with HostileServer({}, on_accept=banner(b"HTTP/1.1 400 Bad Request\r\n\r\n")) as server:
        fails(f"https://127.0.0.1:{server.port}/", dest, PermanentFetchError, "tls_error")


def test_trickling_tls_handshake_is_cut_at_the_total_deadline(dest: Path) -> None:
    with HostileServer({}, on_accept=trickle_tls_handshake(0.3)) as server:
        fails(f"https://127.0.0.1:{server.port}/", dest, TransientFetchError, "timeout")


# --- broken connections -----------------------------------------------------------------------


def test_connection_refused(dest: Path) -> None:
    with socket.create_server(("127.0.0.1", 0)) as probe:
        port = probe.getsockname()[1]
    error = fails(f"http://127.0.0.1:{port}/", dest, TransientFetchError, "connection_error")
    assert "refused" in error.detail.lower()


def test_connection_reset_mid_body(dest: Path) -> None:
    with serve(root=reset_mid_body()) as server:
        fails(server.url("/"), dest, TransientFetchError, "connection_error")


def test_body_shorter_than_announced(dest: Path) -> None:
    with serve(root=_short_body) as server:
        fails(server.url("/"), dest, TransientFetchError, "connection_error")


def _short_body(conn: socket.socket, request: object, server: HostileServer) -> bool:
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: 5000\r\n\r\n<p>only this")
    return False


# --- statuses and content types ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "kind"),
    [
        (404, PermanentFetchError),
        (403, PermanentFetchError),
        (410, PermanentFetchError),
        (500, TransientFetchError),
        (503, TransientFetchError),
        (408, TransientFetchError),
        (304, PermanentFetchError),
    ],
)
def test_http_errors(dest: Path, status: int, kind: type[FetchError]) -> None:
    with serve(root=respond(status, b"<h1>no</h1>")) as server:
        error = fails(server.url("/"), dest, kind, f"http_{status}")
    assert error.detail == f"HTTP {status} from {server.url('/')}"
    assert error.retry_after is None


def test_429_with_retry_after_seconds(dest: Path) -> None:
    with serve(root=respond(429, b"", {"Retry-After": "7"})) as server:
        error = fails(server.url("/"), dest, TransientFetchError, "http_429")
    assert error.retry_after == 7.0


def test_503_with_retry_after_date(dest: Path) -> None:
    when = email.utils.formatdate(time.time() + 120, usegmt=True)
    with serve(root=respond(503, b"", {"Retry-After": when})) as server:
        error = fails(server.url("/"), dest, TransientFetchError, "http_503")
    assert error.retry_after is not None and 100 < error.retry_after <= 120


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, None),
        ("", None),
        ("0", 0.0),
        (" 30 ", 30.0),
        ("soon", None),
        ("-5", None),
        ("Wed, 21 Oct 2015 07:28:00 GMT", 0.0),
    ],
)
def test_parse_retry_after(value: str | None, expected: float | None) -> None:
    assert parse_retry_after(value) == expected


@pytest.mark.parametrize("content_type", ["application/octet-stream", "image/png", "application/json"])
def test_not_html(dest: Path, content_type: str) -> None:
    with serve(root=page(b"\x00\x01", content_type)) as server:
        error = fails(server.url("/"), dest, PermanentFetchError, "not_html")
    assert content_type in error.detail


def test_limits_from_settings() -> None:
    settings = Settings(max_page_bytes=123, allow_private_addresses=True, user_agent="ua")
    limits = FetchLimits.from_settings(settings)
    assert (limits.max_bytes, limits.allow_private_addresses, limits.user_agent) == (123, True, "ua")
    assert limits.allowed_networks == ()
    assert hash(limits) == hash(FetchLimits.from_settings(settings))


def test_threads_do_not_disturb_each_other(tmp_path: Path) -> None:
    # Eight threads share the watchdog; the cut of some must not touch the others' connections.
    results: dict[str, list[str]] = {"ok": [], "timeout": [], "other": []}

    def work(n: int) -> None:
        for i in range(15):
            slow = n % 4 == 0 and i == 0
            try:
                download(server.url("/slow" if slow else "/"), tmp_path / f"{n}" / f"{i}.html", LIMITS)
                results["ok"].append(f"{n}/{i}")
            except TransientFetchError as e:
                results["timeout" if e.reason == "timeout" else "other"].append(f"{n}/{i}: {e}")

    with serve(root=page(HTML * 100), slow=trickle(0.3)) as server:
        threads = [threading.Thread(target=work, args=(n,)) for n in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert (len(results["ok"]), len(results["timeout"]), results["other"]) == (118, 2, [])
