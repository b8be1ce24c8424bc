"""The offline demo world: a Semrush mirror and every ranked site, on one port of 127.0.0.1.

``python -m pipeline.kickoff --demo``, the tests and the benchmark run the whole pipeline against it,
with no external network. Routes:

- ``/website/top/`` and ``/website/top/{slug}/all/``: ranking pages (unknown slug: 404)
- ``/site/{domain}/``: a site's home page, with its latency, gzip, redirect and injected failure
- ``/site/{domain}/home``: where redirecting sites send the client
"""

from __future__ import annotations

import collections
import contextlib
import functools
import gzip
import re
import socket
import socketserver
import threading
from collections.abc import Iterable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from urllib.parse import urlsplit

from ..countries import by_slug
from ..semrush import RankedSite
from . import data
from .mirror import render_ranking_page

_RANKING = re.compile(r"^/website/top/(?:([a-z0-9-]+)/all/)?$")
_SITE = re.compile(r"^/site/([a-z0-9.-]+)/(home)?$")


@functools.lru_cache(maxsize=4096)
def _gzipped(domain: str) -> bytes:
    return gzip.compress(data.site_body(domain), compresslevel=6, mtime=0)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(self, world: DemoWorld, port: int) -> None:
        self.world = world
        self.connections: set[socket.socket] = set()
        self.connections_lock = threading.Lock()
        super().__init__(("127.0.0.1", port), _Handler)

    def server_bind(self) -> None:
        # HTTPServer.server_bind looks the host name up (getfqdn): not needed, and it may touch DNS.
        socketserver.TCPServer.server_bind(self)
        self.server_name, self.server_port = self.server_address[:2]

    def process_request(self, request, client_address) -> None:  # type: ignore[override]
        with self.connections_lock:
            self.connections.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request) -> None:  # type: ignore[override]
        with self.connections_lock:
            self.connections.discard(request)
        super().shutdown_request(request)

    def close_connections(self) -> None:
        """Hang up on kept-alive clients, so no handler thread outlives the world."""
        with self.connections_lock:
            connections = list(self.connections)
        for sock in connections:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def handle_error(self, request, client_address) -> None:  # type: ignore[override]
        pass  # a client hanging up (timeouts are part of the demo) is not news


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "DemoWorld/1.0"
    server: _Server

    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_HEAD(self) -> None:
        self._route(send_body=False)

    def do_GET(self) -> None:
        self._route(send_body=True)

    def _route(self, *, send_body: bool) -> None:
        world = self.server.world
        path = urlsplit(self.path).path
        world._count(path)
        try:
            if match := _RANKING.match(path):
                self._ranking(match.group(1) or "global", send_body)
            elif (match := _SITE.match(path)) and world._serves(match.group(1)):
                self._site(match.group(1), landing=bool(match.group(2)), send_body=send_body)
            else:
                self._send(404, b"<h1>Not Found</h1>", send_body=send_body)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def _ranking(self, slug: str, send_body: bool) -> None:
        page = self.server.world._ranking_page(slug)
        if page is None:
            self._send(404, b"<h1>404</h1><p>This page does not exist.</p>", send_body=send_body)
        else:
            self._send(200, page, send_body=send_body)

    def _site(self, domain: str, *, landing: bool, send_body: bool) -> None:
        world = self.server.world
        kind = data.INJECTED_FAILURES.get(domain)
        profile = data.site_profile(domain)
        if kind == "timeout":
            if world._stopping.wait(world.slow_seconds):
                self.close_connection = True
                return
        elif world._stopping.wait(profile.latency_ms * world.latency_scale / 1000):
            self.close_connection = True
            return
        if kind == "http_404":
            self._send(404, b"<h1>Not Found</h1>", send_body=send_body)
        elif (kind == "http_500_once" or domain in world.flaky_domains) and world._first_request(domain):
            self._send(500, b"<h1>Internal Server Error</h1>", send_body=send_body)
        elif profile.redirect and not landing:
            self._send(
                302, b"", send_body=send_body, headers={"Location": f"{world.base_url}/site/{domain}/home"}
            )
        elif profile.gzip and "gzip" in self.headers.get("Accept-Encoding", ""):
            self._send(200, _gzipped(domain), send_body=send_body, headers={"Content-Encoding": "gzip"})
        else:
            self._send(200, data.site_body(domain), send_body=send_body)

    def _send(
        self, status: int, body: bytes, *, send_body: bool, headers: Mapping[str, str] | None = None
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        if send_body:
            self.wfile.write(body)


class DemoWorld:
    """A local Semrush mirror plus the sites it ranks, served from a background thread.

    ``slow_seconds``: how long the ``timeout`` site stays silent. ``latency_scale``: multiplies
    every site's latency (0 for a benchmark of the crawler alone). ``serve_any_domain``: serve a
    page for any hostname, not only the ranked ones. ``flaky_domains``: more domains that answer
    500 to their first request, like ``http_500_once`` (tests put many jobs in retry backoff).
    ``port``: 0 picks a free one.
    """

    def __init__(
        self,
        *,
        slow_seconds: float = data.DEFAULT_SLOW_SECONDS,
        latency_scale: float = 1.0,
        serve_any_domain: bool = False,
        flaky_domains: Iterable[str] = (),
        port: int = 0,
    ) -> None:
        self.port = port
        self.slow_seconds = slow_seconds
        self.latency_scale = latency_scale
        self.serve_any_domain = serve_any_domain
        self.flaky_domains = frozenset(flaky_domains)
        self._rankings = data.demo_rankings()
        self._domains = {site.domain for rows in self._rankings.values() for site in rows}
        self._pages: dict[str, bytes] = {}
        self._counts: collections.Counter[str] = collections.Counter()
        self._asked: set[str] = set()
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    # --- lifecycle ------------------------------------------------------------------------------

    def start(self) -> DemoWorld:
        if self._server is not None:
            return self
        self._stopping.clear()
        self._server = _Server(self, self.port)
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.1}, name="demo-world", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        server, thread = self._server, self._thread
        if server is None:
            return
        self._stopping.set()  # wakes sleeping handlers
        server.shutdown()
        server.server_close()
        server.close_connections()
        if thread is not None:
            thread.join(timeout=5)
        self._server = self._thread = None

    def __enter__(self) -> DemoWorld:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # --- what tests and kickoff read -------------------------------------------------------------

    @property
    def base_url(self) -> str:
        if self._server is None:
            raise RuntimeError("the demo world is not running: call start() or use it as a context manager")
        return f"http://127.0.0.1:{self._server.server_port}"

    @property
    def semrush_base_url(self) -> str:
        return self.base_url

    @property
    def site_url_template(self) -> str:
        return self.base_url + "/site/{domain}/"

    @property
    def countries(self) -> list[str]:
        return list(self._rankings)

    @property
    def rankings(self) -> dict[str, list[RankedSite]]:
        return {slug: list(rows) for slug, rows in self._rankings.items()}

    @property
    def injected_failures(self) -> dict[str, str]:
        return dict(data.INJECTED_FAILURES)

    @property
    def request_counts(self) -> dict[str, int]:
        """Requests received so far, per path (a snapshot)."""
        with self._lock:
            return dict(self._counts)

    def site_requests(self, domain: str) -> int:
        """Requests received so far for ``domain``'s home page (redirect landings not included)."""
        with self._lock:
            return self._counts[f"/site/{domain}/"]

    def served_body(self, domain: str) -> bytes:
        """The decoded bytes of ``domain``'s page, as a crawler must save them."""
        return data.site_body(domain)

    # --- used by the handler ---------------------------------------------------------------------

    def _count(self, path: str) -> None:
        with self._lock:
            self._counts[path] += 1

    def _first_request(self, domain: str) -> bool:
        with self._lock:
            first = domain not in self._asked
            self._asked.add(domain)
            return first

    def _serves(self, domain: str) -> bool:
        return domain in self._domains or self.serve_any_domain

    def _ranking_page(self, slug: str) -> bytes | None:
        rows = self._rankings.get(slug)
        if rows is None:
            return None
        with self._lock:
            page = self._pages.get(slug)
        if page is None:
            slugs = list(self._rankings)
            related = slugs[(slugs.index(slug) + 1) % len(slugs)]
            page = render_ranking_page(by_slug(slug).name, rows, related_slug=related).encode("utf-8")
            with self._lock:
                self._pages[slug] = page
        return page
