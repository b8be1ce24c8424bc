"""The offline demo world serves what the pipeline expects, failures included."""

from __future__ import annotations

import collections
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import requests

from pipeline.countries import KNOWN_RANKED
from pipeline.demo import (
    INJECTED_FAILURES,
    INJECTED_PLACEMENTS,
    DemoWorld,
    ExpectedOutcome,
    demo_rankings,
    expected_outcome,
    expected_outcomes,
    site_body,
    site_profile,
)
from pipeline.errors import CountryNotRanked
from pipeline.semrush import fetch_ranking, parse_ranking, ranking_url
from pipeline.settings import Settings

SLOW = 2.0
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def world() -> Iterator[DemoWorld]:
    with DemoWorld(slow_seconds=SLOW, latency_scale=0.1) as w:
        yield w


@pytest.fixture()
def session() -> Iterator[requests.Session]:
    with requests.Session() as s:
        yield s


def site_url(world: DemoWorld, domain: str) -> str:
    return world.site_url_template.format(domain=domain)


# --- the data ----------------------------------------------------------------------------------------


def test_rankings_are_deterministic_and_complete() -> None:
    rankings = demo_rankings()
    assert rankings == demo_rankings()
    assert set(KNOWN_RANKED) <= set(rankings)
    for slug, rows in rankings.items():
        assert [s.position for s in rows] == list(range(1, 21)), slug
        assert len({s.domain for s in rows}) == 20, slug
        visits = [s.visits for s in rows]
        assert visits == sorted(visits, reverse=True), slug


def test_injected_failures_are_placed() -> None:
    rankings = demo_rankings()
    assert set(INJECTED_FAILURES.values()) == {"http_404", "http_500_once", "timeout"}
    for domain, (slug, position) in INJECTED_PLACEMENTS.items():
        assert rankings[slug][position - 1].domain == domain


def test_expected_outcomes() -> None:
    settings = Settings(max_attempts=3, read_timeout=0.5)
    assert expected_outcome("google.com", settings).status == "saved"
    assert expected_outcome("broken-portal.de", settings) == ExpectedOutcome("failed", "http_404", 1)
    flaky = expected_outcome("flaky-news.fr", settings)
    assert (flaky.status, flaky.attempts) == ("saved", 2)
    assert expected_outcome("flaky-news.fr", Settings(max_attempts=1)).status == "failed"
    slow = expected_outcome("slow-tube.jp", settings, slow_seconds=SLOW)
    assert (slow.status, slow.reason, slow.attempts) == ("failed", "timeout", 3)
    assert expected_outcome("slow-tube.jp", Settings(read_timeout=5.0), slow_seconds=1.0).status == "saved"
    outcomes = expected_outcomes(["germany", "france", "japan"], settings, slow_seconds=SLOW)
    assert len(outcomes) == 60
    failed = {domain for (_, domain), o in outcomes.items() if o.status == "failed"}
    assert failed == {"broken-portal.de", "slow-tube.jp"}


def test_site_profiles_vary() -> None:
    domains = {s.domain for rows in demo_rankings().values() for s in rows}
    profiles = [site_profile(d) for d in domains]
    sizes = [p.size for p in profiles]
    assert min(sizes) >= 5_000 and max(sizes) <= 200_000 and max(sizes) > 100_000
    latencies = [p.latency_ms for p in profiles]
    assert min(latencies) >= 5 and max(latencies) <= 150
    assert 0.1 < sum(p.gzip for p in profiles) / len(profiles) < 0.35
    assert any(p.redirect for p in profiles)
    assert all(len(site_body(d)) == site_profile(d).size for d in list(domains)[:50])


# --- the server --------------------------------------------------------------------------------------


def test_serves_every_country(world: DemoWorld, session: requests.Session) -> None:
    assert len(world.countries) >= 38
    assert set(KNOWN_RANKED) <= set(world.countries)
    seen: collections.Counter[str] = collections.Counter()
    for slug in world.countries:
        body = fetch_ranking(
            session, ranking_url(world.semrush_base_url, slug), timeout=(2, 5), user_agent="t"
        )
        rows = parse_ranking(body)
        assert rows == world.rankings[slug], slug
        seen.update(s.domain for s in rows)
    assert seen["google.com"] > 30 and seen["youtube.com"] > 30  # the same sites recur across countries
    assert sum(1 for n in seen.values() if n > 1) > 20


def test_global_aliases(world: DemoWorld, session: requests.Session) -> None:
    index = session.get(world.base_url + "/website/top/")
    explicit = session.get(world.base_url + "/website/top/global/all/")
    assert index.status_code == explicit.status_code == 200
    assert index.content == explicit.content


def test_unknown_country_is_404(world: DemoWorld, session: requests.Session) -> None:
    with pytest.raises(CountryNotRanked):
        fetch_ranking(
            session, ranking_url(world.semrush_base_url, "antarctica"), timeout=(2, 5), user_agent="t"
        )
    assert session.get(world.base_url + "/nowhere").status_code == 404
    assert session.get(site_url(world, "not-ranked.example")).status_code == 404


def test_site_page(world: DemoWorld, session: requests.Session) -> None:
    domain = next(d for d in ("google.com", "youtube.com", "wikipedia.org") if not site_profile(d).redirect)
    response = session.get(site_url(world, domain))
    assert response.status_code == 200
    assert response.content == world.served_body(domain)
    assert response.headers["Content-Type"].startswith("text/html")


def test_keep_alive(world: DemoWorld) -> None:
    with requests.Session() as s:
        first = s.get(world.base_url + "/website/top/")
        second = s.get(world.base_url + "/website/top/germany/all/")
    assert first.headers.get("Connection", "keep-alive").lower() != "close"
    assert "Content-Length" in second.headers


def test_404_site(world: DemoWorld, session: requests.Session) -> None:
    before = world.site_requests("broken-portal.de")
    assert session.get(site_url(world, "broken-portal.de")).status_code == 404
    assert session.get(site_url(world, "broken-portal.de")).status_code == 404
    assert world.site_requests("broken-portal.de") == before + 2


def test_500_once_then_200() -> None:
    with DemoWorld(slow_seconds=SLOW) as fresh, requests.Session() as s:
        url = site_url(fresh, "flaky-news.fr")
        assert s.get(url).status_code == 500
        second = s.get(url)
        assert second.status_code == 200 and second.content == fresh.served_body("flaky-news.fr")
        assert fresh.request_counts["/site/flaky-news.fr/"] == 2


def test_slow_site_times_out(world: DemoWorld, session: requests.Session) -> None:
    started = time.monotonic()
    with pytest.raises(requests.ReadTimeout):
        session.get(site_url(world, "slow-tube.jp"), timeout=(1, 0.3))
    assert time.monotonic() - started < SLOW


def test_slow_site_answers_eventually() -> None:
    with DemoWorld(slow_seconds=0.3) as quick, requests.Session() as s:
        response = s.get(site_url(quick, "slow-tube.jp"), timeout=(1, 3))
        assert response.status_code == 200


def test_gzip_sites_decode_to_served_body(world: DemoWorld, session: requests.Session) -> None:
    gzipped = [d for d in sorted({s.domain for rows in world.rankings.values() for s in rows})
               if site_profile(d).gzip and not site_profile(d).redirect][:5]  # fmt: skip
    assert gzipped
    for domain in gzipped:
        response = session.get(site_url(world, domain))
        assert response.headers["Content-Encoding"] == "gzip"
        assert int(response.headers["Content-Length"]) < len(world.served_body(domain))
        assert response.content == world.served_body(domain)
    plain = session.get(site_url(world, gzipped[0]), headers={"Accept-Encoding": "identity"})
    assert "Content-Encoding" not in plain.headers and plain.content == world.served_body(gzipped[0])


def test_redirects(world: DemoWorld, session: requests.Session) -> None:
    domain = next(d for rows in world.rankings.values() for s in rows if site_profile(d := s.domain).redirect)
    response = session.get(site_url(world, domain))
    assert response.status_code == 200
    assert [r.status_code for r in response.history] == [302]
    assert response.url == f"{world.base_url}/site/{domain}/home"
    assert response.content == world.served_body(domain)


def test_concurrent_requests(world: DemoWorld) -> None:
    domains = [s.domain for s in world.rankings["united-states"]]

    def get(domain: str) -> bool:
        with requests.Session() as s:
            return s.get(site_url(world, domain), timeout=(2, 5)).content == world.served_body(domain)

    with ThreadPoolExecutor(16) as pool:
        assert all(pool.map(get, domains * 3))


def test_stop_is_prompt_with_sleeping_handler() -> None:
    w = DemoWorld(slow_seconds=30).start()
    base = w.base_url
    with ThreadPoolExecutor(1) as pool:
        pending = pool.submit(requests.get, base + "/site/slow-tube.jp/", timeout=(1, 10))
        time.sleep(0.2)
        started = time.monotonic()
        w.stop()
        assert time.monotonic() - started < 2
        with pytest.raises(requests.ConnectionError):
            pending.result()
    with pytest.raises(RuntimeError):
        _ = w.base_url


def test_main_serves_until_ctrl_c() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "pipeline.demo"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=ROOT,
    )
    try:
        lines = []
        while not any(line.startswith("Ctrl-C") for line in lines):
            line = proc.stdout.readline()  # type: ignore[union-attr]
            assert line, proc.stderr.read()  # type: ignore[union-attr]
            lines.append(line)
        template = next(line for line in lines if "SITE_URL_TEMPLATE" in line)
        base = next(line for line in lines if "SEMRUSH_BASE_URL" in line).split("=", 1)[1].strip()
        assert "/site/{domain}/" in template
        assert requests.get(base + "/website/top/", timeout=5).status_code == 200
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0
    assert "Traceback" not in err


def test_serve_any_domain() -> None:
    with DemoWorld(serve_any_domain=True, latency_scale=0) as w, requests.Session() as s:
        response = s.get(site_url(w, "unranked.example.org"))
        assert response.status_code == 200 and response.content == site_body("unranked.example.org")
