"""What the offline demo world serves: rankings, site pages and deliberately broken sites.

Everything is deterministic (seeded by country slug or domain), so a test or a benchmark can compute
what a run against the demo must produce. The angola, argentina and australia rankings are real:
``semrush_top20.json`` is a verbatim copy of ``fixtures/semrush/semrush_top20_results.excerpt.json``
(values a crawler extracted from the live Semrush pages in late 2025; upstream: github.com/
iancustefan26/Distributed-Worker-Pool, commit bc16e16f, MIT). The other countries are synthesized:
mostly the same global domains (as on the real pages) plus a few local ones.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import random
from dataclasses import dataclass
from importlib import resources

from ..countries import KNOWN_RANKED
from ..semrush import RankedSite
from ..settings import Settings

#: Seconds a ``timeout`` site stays silent before answering (DemoWorld(slow_seconds=...) overrides).
DEFAULT_SLOW_SECONDS = 30.0

#: Sites that misbehave on purpose: domain -> kind.
#:  http_404      answers 404 (permanent failure)
#:  http_500_once answers 500 the first time it is asked, 200 afterwards (recovers on retry)
#:  timeout       says nothing for ``slow_seconds`` (longer than any sane read timeout)
INJECTED_FAILURES: dict[str, str] = {
    "broken-portal.de": "http_404",
    "flaky-news.fr": "http_500_once",
    "slow-tube.jp": "timeout",
}
#: Where each injected domain sits: domain -> (country slug, position).
INJECTED_PLACEMENTS: dict[str, tuple[str, int]] = {
    "broken-portal.de": ("germany", 18),
    "flaky-news.fr": ("france", 19),
    "slow-tube.jp": ("japan", 20),
}

_REAL_COUNTRIES = ("angola", "argentina", "australia")
#: Countries served beyond KNOWN_RANKED: Semrush probably ranks them too (the list is incomplete).
_EXTRA_COUNTRIES = ("poland", "denmark", "chile")


def _words(text: str) -> tuple[str, ...]:
    """The words of a compact table written as one string."""
    return tuple(text.split())


# The World ranking, in order. Row 1's values are those of the saved World page (October 2025).
_GLOBAL_TOP = _words(
    "google.com youtube.com facebook.com instagram.com whatsapp.com wikipedia.org chatgpt.com x.com "
    "reddit.com bing.com yahoo.co.jp yandex.ru tiktok.com yahoo.com baidu.com amazon.com netflix.com "
    "linkedin.com live.com temu.com"
)
_GOOGLE_WORLD = RankedSite(1, "google.com", 105_639_948_420, 5.38, 37.58, 0)

# Global domains a country's ranking draws from: (domain, how likely it is in a country's top 20).
_GLOBAL_POOL = (
    ("google.com", 1.0), ("youtube.com", 1.0), ("facebook.com", 0.97), ("instagram.com", 0.95),
    ("whatsapp.com", 0.9), ("chatgpt.com", 0.9), ("wikipedia.org", 0.85), ("x.com", 0.7),
    ("bing.com", 0.7), ("msn.com", 0.6), ("reddit.com", 0.6), ("tiktok.com", 0.6), ("netflix.com", 0.55),
    ("yahoo.com", 0.5), ("live.com", 0.5), ("linkedin.com", 0.45), ("microsoft.com", 0.4),
    ("office.com", 0.4), ("temu.com", 0.4), ("canva.com", 0.35), ("pinterest.com", 0.35),
    ("microsoftonline.com", 0.3), ("aliexpress.com", 0.3), ("spotify.com", 0.3), ("twitch.tv", 0.3),
    ("amazon.com", 0.3), ("duckduckgo.com", 0.25), ("discord.com", 0.25), ("telegram.org", 0.25),
    ("github.com", 0.2), ("roblox.com", 0.2), ("zoom.us", 0.15),
)  # fmt: skip

# A few local domains per synthesized country.
_LOCAL = {
    "austria": "google.at orf.at willhaben.at derstandard.at krone.at amazon.de",
    "belgium": "google.be hln.be nieuwsblad.be bol.com 2dehands.be",
    "brazil": "google.com.br globo.com uol.com.br mercadolivre.com.br gov.br",
    "canada": "google.ca amazon.ca cbc.ca kijiji.ca canada.ca",
    "chile": "google.cl mercadolibre.cl emol.com biobiochile.cl latercera.com",
    "denmark": "google.dk dr.dk tv2.dk dba.dk ekstrabladet.dk",
    "france": "google.fr leboncoin.fr orange.fr lemonde.fr amazon.fr",
    "germany": "google.de amazon.de web.de spiegel.de t-online.de ebay.de bild.de",
    "greece": "google.gr skroutz.gr in.gr protothema.gr gov.gr",
    "hong-kong": "google.com.hk yahoo.com.hk hk01.com baidu.com mingpao.com",
    "india": "google.co.in flipkart.com amazon.in hotstar.com indiatimes.com",
    "indonesia": "google.co.id detik.com kompas.com tokopedia.com shopee.co.id",
    "ireland": "google.ie rte.ie independent.ie donedeal.ie irishtimes.com",
    "israel": "google.co.il ynet.co.il walla.co.il mako.co.il haaretz.co.il",
    "italy": "google.it libero.it repubblica.it corriere.it amazon.it",
    "japan": "google.co.jp yahoo.co.jp amazon.co.jp rakuten.co.jp nicovideo.jp",
    "malaysia": "google.com.my shopee.com.my lazada.com.my mudah.my thestar.com.my",
    "mexico": "google.com.mx mercadolibre.com.mx amazon.com.mx milenio.com eluniversal.com.mx",
    "netherlands": "google.nl marktplaats.nl nu.nl bol.com nos.nl",
    "norway": "google.no vg.no finn.no nrk.no dagbladet.no",
    "philippines": "google.com.ph shopee.ph lazada.com.ph inquirer.net gmanetwork.com",
    "poland": "google.pl allegro.pl onet.pl wp.pl olx.pl",
    "portugal": "google.pt sapo.pt olx.pt record.pt publico.pt",
    "saudi-arabia": "google.com.sa haraj.com.sa sabq.org absher.sa noon.com",
    "serbia": "google.rs kupujemprodajem.com blic.rs kurir.rs b92.net",
    "singapore": "google.com.sg shopee.sg straitstimes.com lazada.sg carousell.sg",
    "south-africa": "google.co.za news24.com takealot.com iol.co.za gumtree.co.za",
    "south-korea": "naver.com daum.net google.co.kr coupang.com tistory.com",
    "spain": "google.es marca.com elmundo.es amazon.es elpais.com",
    "sweden": "google.se aftonbladet.se expressen.se blocket.se svt.se",
    "switzerland": "google.ch 20min.ch srf.ch blick.ch ricardo.ch",
    "thailand": "google.co.th shopee.co.th pantip.com lazada.co.th sanook.com",
    "turkey": "google.com.tr trendyol.com hepsiburada.com sahibinden.com hurriyet.com.tr",
    "united-arab-emirates": "google.ae dubizzle.com noon.com khaleejtimes.com gulfnews.com",
    "united-kingdom": "google.co.uk bbc.co.uk amazon.co.uk dailymail.co.uk ebay.co.uk theguardian.com",
    "united-states": "amazon.com weather.com espn.com cnn.com nytimes.com walmart.com",
    "vietnam": "google.com.vn zalo.me vnexpress.net shopee.vn dantri.com.vn",
}

DEMO_COUNTRIES: tuple[str, ...] = (*KNOWN_RANKED, *_EXTRA_COUNTRIES)


# --- rankings --------------------------------------------------------------------------------------


def demo_rankings() -> dict[str, list[RankedSite]]:
    """Every demo country's top 20 (slug -> rows by position); a fresh dict on every call."""
    return {slug: list(rows) for slug, rows in _rankings().items()}


@functools.lru_cache(maxsize=1)
def _rankings() -> dict[str, tuple[RankedSite, ...]]:
    real = _real_rankings()
    result = {}
    for slug in DEMO_COUNTRIES:
        if slug in real:
            result[slug] = real[slug]
        elif slug == "global":
            result[slug] = _with_values(_GLOBAL_TOP, random.Random("workerpool-demo:global"), _GOOGLE_WORLD)
        else:
            result[slug] = _synthesize(slug)
    return result


def _real_rankings() -> dict[str, tuple[RankedSite, ...]]:
    text = resources.files(__package__).joinpath("semrush_top20.json").read_text(encoding="utf-8")
    rankings = {}
    for entry in json.loads(text):
        slug = entry["source_url"].rstrip("/").split("/")[-2]
        rankings[slug] = tuple(
            RankedSite(
                position=r["position"],
                domain=r["domain"],
                visits=r["traffic"],
                pages_per_visit=r["pages_per_visit"],
                bounce_rate=float(r["bounce_rate"].rstrip("%")),
                change=_real_change(r["rank_change"]),
            )
            for r in entry["results"]
        )
    assert set(rankings) == set(_REAL_COUNTRIES), sorted(rankings)
    return rankings


def _real_change(text: str | None) -> int:
    """Semrush's "up 2" -> +2, "down 1" -> -1; null is what that crawler wrote for "–" (unchanged)."""
    if text is None:
        return 0
    direction, amount = text.split()
    return int(amount) if direction == "up" else -int(amount)


def _synthesize(slug: str) -> tuple[RankedSite, ...]:
    """A plausible top 20: likely global domains and the local ones, shuffled by a seeded strength."""
    rng = random.Random(f"workerpool-demo:{slug}")
    local = _words(_LOCAL[slug])
    injected = [(d, pos) for d, (s, pos) in INJECTED_PLACEMENTS.items() if s == slug]
    wanted = 20 - len(local) - len(injected)
    chosen = [d for d, p in _GLOBAL_POOL if d not in local and rng.random() < p][:wanted]
    chosen += [d for d, _ in _GLOBAL_POOL if d not in chosen and d not in local][: wanted - len(chosen)]
    strength = {d: -i + rng.gauss(0, 2) for i, d in enumerate(chosen)}
    strength.update({d: -rng.uniform(2, 18) for d in local[1:]})
    strength[local[0]] = -rng.uniform(0, 5)  # the local Google (or Naver...) ranks high
    order = sorted(strength, key=strength.__getitem__, reverse=True)
    for domain, position in sorted(injected, key=lambda x: x[1]):
        order.insert(position - 1, domain)
    return _with_values(order, rng)


def _with_values(
    domains: list[str] | tuple[str, ...], rng: random.Random, first: RankedSite | None = None
) -> tuple[RankedSite, ...]:
    """Rows for ``domains`` in order, with visits decreasing and plausible other values."""
    visits = rng.uniform(2e7, 2e9)
    rows = []
    for position, domain in enumerate(domains, start=1):
        roll = rng.random()
        change = 0 if roll < 0.6 else rng.randint(1, 7) if roll < 0.8 else -rng.randint(1, 5)
        rows.append(
            RankedSite(
                position=position,
                domain=domain,
                visits=int(visits),
                pages_per_visit=round(rng.uniform(2.5, 20.0), 2),
                bounce_rate=round(rng.uniform(20.0, 60.0), 2),
                change=change,
            )
        )
        visits *= rng.uniform(0.6, 0.95)
    if first is not None:
        rows[0] = first
    return tuple(rows)


# --- expected outcomes -----------------------------------------------------------------------------


@dataclass(frozen=True)
class ExpectedOutcome:
    """What a correct crawler ends with for one site of the demo world."""

    status: str  # "saved" or "failed"
    reason: str | None  # failure reason code (http_404, http_500, timeout), None when saved
    attempts: int  # requests the site receives (at least; a crash-and-redeliver may add some)


def expected_outcome(
    domain: str, settings: Settings, *, slow_seconds: float = DEFAULT_SLOW_SECONDS
) -> ExpectedOutcome:
    """The final outcome of downloading ``domain`` once from a fresh DemoWorld with ``settings``.

    ``http_500_once`` depends on the world's memory: it recovers only for the first job that asks.
    """
    kind = INJECTED_FAILURES.get(domain)
    if kind == "http_404":
        return ExpectedOutcome("failed", "http_404", 1)
    if kind == "http_500_once":
        if settings.max_attempts >= 2:
            return ExpectedOutcome("saved", None, 2)
        return ExpectedOutcome("failed", "http_500", 1)
    if kind == "timeout" and slow_seconds >= min(settings.read_timeout, settings.total_timeout):
        return ExpectedOutcome("failed", "timeout", settings.max_attempts)
    return ExpectedOutcome("saved", None, 1)


def expected_outcomes(
    slugs: list[str] | tuple[str, ...], settings: Settings, *, slow_seconds: float = DEFAULT_SLOW_SECONDS
) -> dict[tuple[str, str], ExpectedOutcome]:
    """(slug, domain) -> outcome for the top ``settings.top_n`` of each country in ``slugs``."""
    rankings = _rankings()
    return {
        (slug, site.domain): expected_outcome(site.domain, settings, slow_seconds=slow_seconds)
        for slug in slugs
        for site in rankings[slug][: settings.top_n]
    }


# --- site pages ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SiteProfile:
    """How the demo serves one domain's home page."""

    domain: str
    size: int  # bytes of the (decoded) page, ~5 KB to 200 KB, long-tailed
    latency_ms: float  # time before the answer, ~5 to 150 ms, long-tailed
    gzip: bool  # sent with Content-Encoding: gzip (to clients that accept it)
    redirect: bool  # /site/{domain}/ answers 302 to /site/{domain}/home


def _domain_seed(domain: str) -> int:
    return int.from_bytes(hashlib.sha256(domain.encode("utf-8")).digest()[:8], "big")


@functools.lru_cache(maxsize=8192)
def site_profile(domain: str) -> SiteProfile:
    """The deterministic profile of ``domain`` (any hostname, ranked or not)."""
    seed = _domain_seed(domain)
    rng = random.Random(seed)
    plain = domain in INJECTED_FAILURES  # failures stay failures, without other twists
    return SiteProfile(
        domain=domain,
        size=int(min(200_000, max(5_000, rng.lognormvariate(math.log(25_000), 0.9)))),
        latency_ms=round(min(150.0, max(5.0, rng.lognormvariate(math.log(25), 0.8))), 1),
        gzip=not plain and seed % 5 == 0,
        redirect=not plain and (seed // 5) % 10 == 0,
    )


_WORDS = _words(
    "news home sign in search account shop deals weather sport video music live watch latest top "
    "trending today world local business tech science health travel food style culture games mail "
    "photos maps help privacy terms cookies settings language download app free new best guide "
    "review more about contact careers press store cart offers city market daily report update"
)


@functools.lru_cache(maxsize=4096)
def site_body(domain: str) -> bytes:
    """The exact (decoded) bytes of ``domain``'s home page: HTML of ``site_profile(domain).size`` bytes."""
    size = site_profile(domain).size
    rng = random.Random(_domain_seed(domain) ^ 0x5EED)
    head = (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{domain} - home</title>"
        f'<link rel="canonical" href="https://{domain}/"></head>\n'
        f"<body><header><h1>{domain}</h1><nav>"
        + "".join(f'<a href="/{w}/">{w}</a>' for w in rng.sample(_WORDS, 6))
        + "</nav></header><main>\n"
    )
    tail = f"</main><footer>&copy; {domain}</footer></body></html>\n"
    paragraphs = []
    remaining = size - len(head) - len(tail)
    while remaining > 0:
        length = min(remaining, rng.randint(300, 1500))
        if remaining - length < 64:
            length = remaining
        words = " ".join(rng.choice(_WORDS) for _ in range(length // 4))
        paragraphs.append("<p>" + words.ljust(length - 8, ".")[: length - 8] + "</p>\n")
        remaining -= length
    body = (head + "".join(paragraphs) + tail).encode("ascii")
    assert len(body) == size, (domain, len(body), size)
    return body
