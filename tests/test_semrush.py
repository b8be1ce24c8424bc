"""Parsing Semrush ranking pages (in the real markup) and fetching them."""

from __future__ import annotations

import email.utils
import re
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import requests

from pipeline.demo.data import demo_rankings
from pipeline.demo.mirror import render_block_page, render_ranking_page
from pipeline.errors import CountryNotRanked, NoRankingTable, SemrushError, SemrushUnavailable
from pipeline.semrush import (
    RankedSite,
    fetch_ranking,
    normalize_domain,
    parse_ranking,
    parse_retry_after,
    ranking_url,
)

ROWS = [
    RankedSite(1, "google.com", 105_639_948_420, 5.38, 37.58, 0),
    RankedSite(2, "youtube.com", 9_878_417, 16.02, 22.71, 2),
    RankedSite(3, "search.yahoo.com", 1_234, 3.5, 48.5, -4),
    RankedSite(4, "google.com.ar", 999, 8.0, 29.0, None),
]


def page(rows: list[RankedSite] = ROWS) -> str:
    return render_ranking_page("Argentina", rows, related_slug="australia")


# --- URLs --------------------------------------------------------------------------------------------


def test_ranking_url() -> None:
    assert (
        ranking_url("https://www.semrush.com/", "germany")
        == "https://www.semrush.com/website/top/germany/all/"
    )
    assert ranking_url("https://www.semrush.com", "global") == "https://www.semrush.com/website/top/"
    assert (
        ranking_url("http://127.0.0.1:8000", "hong-kong")
        == "http://127.0.0.1:8000/website/top/hong-kong/all/"
    )


# --- parsing -----------------------------------------------------------------------------------------


def test_parse_roundtrip_small() -> None:
    assert parse_ranking(page()) == ROWS
    assert parse_ranking(page().encode("utf-8")) == ROWS


def test_parse_every_demo_country() -> None:
    for slug, rows in demo_rankings().items():
        assert parse_ranking(render_ranking_page(slug, rows, related_slug=None)) == rows, slug


def test_parse_values_of_real_country() -> None:
    angola = demo_rankings()["angola"]
    parsed = parse_ranking(page(angola))
    assert len(parsed) == 20
    assert parsed[2] == RankedSite(3, "chatgpt.com", 3_052_131, 5.22, 31.52, 2)
    assert parsed[3].change == -1
    assert parsed[6].bounce_rate == 48.5
    assert parsed[0].to_dict() == {
        "position": 1,
        "domain": "google.com",
        "visits": 9_878_417,
        "pages_per_visit": 8.63,
        "bounce_rate": 29.47,
        "change": 0,
    }


def test_top_n_truncates() -> None:
    rows = demo_rankings()["germany"]
    parsed = parse_ranking(page(rows), top_n=5)
    assert [s.position for s in parsed] == [1, 2, 3, 4, 5]
    assert parsed == rows[:5]
    with pytest.raises(ValueError):
        parse_ranking(page(rows), top_n=0)


def test_fewer_rows_than_top_n() -> None:
    assert parse_ranking(page(ROWS[:2]), top_n=20) == ROWS[:2]


def test_rows_sorted_by_position() -> None:
    assert parse_ranking(page(list(reversed(ROWS)))) == ROWS


def test_block_page() -> None:
    with pytest.raises(NoRankingTable, match=r"no ranking table.*block page.*Just a moment"):
        parse_ranking(render_block_page())


def test_empty_table() -> None:
    with pytest.raises(NoRankingTable, match="has no rows"):
        parse_ranking(page([]))


def test_class_names_changed_or_removed() -> None:
    html = page()
    renamed = re.sub(r'class="[^"]*"', lambda m: f'class="x{hash(m.group(0)) % 997}"', html)
    stripped = re.sub(r'\sclass="[^"]*"', "", html)
    assert renamed != html and stripped != html
    assert parse_ranking(renamed) == ROWS
    assert parse_ranking(stripped) == ROWS


def test_missing_name_span_falls_back_to_href() -> None:
    html = re.sub(r'<span [^>]*itemprop="name">google\.com\.ar</span>', "", page())
    assert "google.com.ar</span>" not in html
    assert parse_ranking(html) == ROWS


def test_malformed_row_is_skipped() -> None:
    html = page().replace(">youtube.com<", ">not a domain!<").replace("/website/youtube.com/", "/website/x/")
    parsed = parse_ranking(html)
    assert [s.domain for s in parsed] == ["google.com", "search.yahoo.com", "google.com.ar"]


def test_all_rows_malformed() -> None:
    html = re.sub(r'itemprop="position" content="\d+"', 'itemprop="position" content="?"', page())
    with pytest.raises(NoRankingTable, match="none is usable"):
        parse_ranking(html)


def test_domains_are_lowercased() -> None:
    html = page().replace(">google.com<", ">Google.COM<")
    assert parse_ranking(html)[0].domain == "google.com"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("google.com", "google.com"),
        ("News.com.AU.", "news.com.au"),
        ("bücher.de", "xn--bcher-kva.de"),
        ("localhost", None),
        ("-bad.com", None),
        ("a b.com", None),
        ("", None),
    ],
)
def test_normalize_domain(text: str, expected: str | None) -> None:
    assert normalize_domain(text) == expected


def test_unknown_values_are_none() -> None:
    html = page().replace("105,639,948,420", "n/a").replace("37.58%", "")
    first = parse_ranking(html)[0]
    assert first.visits is None and first.bounce_rate is None and first.pages_per_visit == 5.38


# --- fetching ----------------------------------------------------------------------------------------

RETRY_DATE = email.utils.formatdate(time.time() + 3600, usegmt=True)
ROUTES = {
    "/ok": (200, {}, b"<html>ranking</html>"),
    "/missing": (404, {}, b"nope"),
    "/throttled": (429, {"Retry-After": "17"}, b"slow down"),
    "/throttled-date": (429, {"Retry-After": RETRY_DATE}, b"slow down"),
    "/forbidden": (403, {}, b"blocked"),
    "/down": (503, {}, b"maintenance"),
    "/teapot": (418, {}, b"teapot"),
}


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        status, headers, body = ROUTES[self.path]
        self.server.seen_headers = dict(self.headers)  # type: ignore[attr-defined]
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture(scope="module")
def server() -> Iterator[ThreadingHTTPServer]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd
    httpd.shutdown()
    httpd.server_close()


def fetch(server: ThreadingHTTPServer, path: str) -> bytes:
    url = f"http://127.0.0.1:{server.server_address[1]}{path}"
    with requests.Session() as session:
        return fetch_ranking(session, url, timeout=(2.0, 2.0), user_agent="Mozilla/5.0 test")


def test_fetch_200(server: ThreadingHTTPServer) -> None:
    assert fetch(server, "/ok") == b"<html>ranking</html>"
    seen = server.seen_headers  # type: ignore[attr-defined]
    assert seen["User-Agent"] == "Mozilla/5.0 test"
    assert "text/html" in seen["Accept"]


def test_fetch_404(server: ThreadingHTTPServer) -> None:
    with pytest.raises(CountryNotRanked, match="/missing"):
        fetch(server, "/missing")


def test_fetch_429_retry_after_seconds(server: ThreadingHTTPServer) -> None:
    with pytest.raises(SemrushUnavailable, match="429.*/throttled") as info:
        fetch(server, "/throttled")
    assert info.value.retry_after == 17.0
    assert info.value.transient


def test_fetch_429_retry_after_date(server: ThreadingHTTPServer) -> None:
    with pytest.raises(SemrushUnavailable) as info:
        fetch(server, "/throttled-date")
    # The date was fixed when the module was imported: compare with what is left of it now.
    left = email.utils.parsedate_to_datetime(RETRY_DATE).timestamp() - time.time()
    assert info.value.retry_after is not None and abs(info.value.retry_after - left) < 2


@pytest.mark.parametrize("path", ["/forbidden", "/down"])
def test_fetch_403_and_5xx(server: ThreadingHTTPServer, path: str) -> None:
    with pytest.raises(SemrushUnavailable, match=path) as info:
        fetch(server, path)
    assert info.value.retry_after is None


def test_fetch_other_status(server: ThreadingHTTPServer) -> None:
    with pytest.raises(SemrushError, match="418.*/teapot") as info:
        fetch(server, "/teapot")
    assert not isinstance(info.value, SemrushUnavailable)


def test_fetch_connection_refused() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    url = f"http://127.0.0.1:{port}/website/top/"
    with requests.Session() as session, pytest.raises(SemrushUnavailable, match=re.escape(url)):
        fetch_ranking(session, url, timeout=(1.0, 1.0), user_agent="x")


def test_fetch_read_timeout() -> None:
    with socket.socket() as listener:  # accepts, never answers
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        url = f"http://127.0.0.1:{listener.getsockname()[1]}/website/top/"
        with requests.Session() as session, pytest.raises(SemrushUnavailable, match="Timeout"):
            fetch_ranking(session, url, timeout=(1.0, 0.3), user_agent="x")


@pytest.mark.parametrize(
    ("value", "expected"),
    [(None, None), ("", None), ("5", 5.0), (" 0 ", 0.0), ("soon", None), ("-3", None)],
)
def test_parse_retry_after(value: str | None, expected: float | None) -> None:
    assert parse_retry_after(value) == expected


def test_parse_retry_after_past_date_is_zero() -> None:
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT") == 0.0
