"""Semrush "Top Websites" ranking pages: their URL, one GET, and the parse of the table.

The markup contract is ``docs/semrush-markup.md``. Only ``data-test``, ``itemprop`` and
``data-ui-name`` attributes are relied on: the class names are generated and change between builds.
Pacing, retries and the cluster-wide rate limit belong to the caller; this module does one request.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import requests
from bs4 import BeautifulSoup, SoupStrainer, Tag

from .errors import CountryNotRanked, NoRankingTable, SemrushError, SemrushUnavailable
from .fetch import parse_retry_after

log = logging.getLogger(__name__)

MAX_PUBLIC_ROWS = 20


@dataclass(frozen=True)
class RankedSite:
    """One row of a country's ranking."""

    position: int
    domain: str  # lowercase hostname, no scheme
    visits: int | None
    pages_per_visit: float | None
    bounce_rate: float | None  # percent: 37.58 means 37.58 %
    change: int | None  # +N moved up, -N moved down, 0 unchanged ("–"), None unknown

    def to_dict(self) -> dict[str, Any]:
        # Not dataclasses.asdict, which deep-copies each field: all are scalars.
        return dict(vars(self))


def ranking_url(base_url: str, slug: str) -> str:
    """The ranking page of a country slug (``global`` is the World index page)."""
    base = base_url.rstrip("/")
    return f"{base}/website/top/" if slug == "global" else f"{base}/website/top/{slug}/all/"


# --- parsing ---------------------------------------------------------------------------------------

_HOSTNAME = re.compile(r"^(?=.{1,253}$)(?!-)[a-z0-9-]{1,63}(?<!-)(\.(?!-)[a-z0-9-]{1,63}(?<!-))+$")
_OVERVIEW_HREF = re.compile(r"/website/([^/?#]+)/overview/?")
_UNCHANGED = {"–", "—", "-", "0"}
# Column of each value when the header cannot be read (the order of late 2025).
_DEFAULT_COLUMNS = {"change": 2, "visits": 3, "pages_per_visit": 4, "bounce_rate": 5}
_HEADER_WORDS = (
    ("bounce", "bounce_rate"),
    ("pages", "pages_per_visit"),
    ("change", "change"),
    ("visit", "visits"),
)


def normalize_domain(text: str) -> str | None:
    """``text`` as a lowercase ASCII hostname, or None when it does not look like one."""
    domain = text.strip().lower().rstrip(".")
    if not domain.isascii():
        try:
            domain = domain.encode("idna").decode("ascii")
        except UnicodeError:
            return None
    return domain if _HOSTNAME.match(domain) else None


#: The parts of a ranking page that the parser reads: the table's head and body.
_TABLE_ONLY = SoupStrainer(attrs={"data-test": ["Head", "Body"]})


def parse_ranking(html: str | bytes, top_n: int = MAX_PUBLIC_ROWS) -> list[RankedSite]:
    """The rows of a ranking page with positions 1..``top_n``, sorted by position.

    A malformed row is skipped (and logged); fewer rows than ``top_n`` is not an error.

    Raises:
        NoRankingTable: the page has no ranking table (block page, challenge, redesign), or the
            table has no usable row. Never an empty list: an empty country must not pass silently.
    """
    if top_n < 1:
        raise ValueError(f"top_n must be at least 1, not {top_n}")
    try:
        # The standard library's parser, keeping only the table, reads a well-formed page in a
        # fifth of html5lib's time.
        return _parse_soup(BeautifulSoup(html, "html.parser", parse_only=_TABLE_ONLY), top_n)
    except NoRankingTable:
        # html5lib builds the tree as a browser does: it reads broken markup the other cannot.
        return _parse_soup(BeautifulSoup(html, "html5lib"), top_n)


def _tags(node: Tag) -> Iterator[Tag]:
    """The elements under ``node``, in document order.

    Plain walks: bs4's find() and find_all() build a matcher per call, which cost more than the
    walk itself on a ranking page's 20 rows (3 ms of a page's 9).
    """
    return (element for element in node.descendants if isinstance(element, Tag))


def _is_row(tag: Tag) -> bool:
    return tag.name == "tr" and (tag.get("data-test") == "Row" or tag.get("itemprop") == "itemListElement")


def _parse_soup(soup: BeautifulSoup, top_n: int) -> list[RankedSite]:
    body = soup.find("tbody", attrs={"data-test": "Body"})
    if body is None:
        raise NoRankingTable(
            f"no ranking table on the page (block page? challenge?); title: {_title(soup)!r}"
        )
    rows = [tag for tag in _tags(body) if _is_row(tag)]
    if not rows:
        raise NoRankingTable("the ranking table has no rows")
    columns = _columns(soup)
    sites: dict[int, RankedSite] = {}
    for index, row in enumerate(rows, start=1):
        site = _parse_row(row, columns)
        if site is None:
            log.warning("skipping malformed ranking row %d: %.200s", index, row.get_text(" ", strip=True))
        elif site.position <= top_n:
            sites.setdefault(site.position, site)
    if not sites:
        raise NoRankingTable(f"the ranking table has {len(rows)} rows but none is usable")
    return [sites[p] for p in sorted(sites)]


def _title(soup: BeautifulSoup) -> str:
    title = soup.find("title")
    return title.get_text(" ", strip=True)[:120] if title else ""


def _columns(soup: BeautifulSoup) -> dict[str, int]:
    """Which cell holds which value, read from the header when it names them all."""
    head = soup.find("thead", attrs={"data-test": "Head"})
    if head is None:
        return _DEFAULT_COLUMNS
    found: dict[str, int] = {}
    for i, th in enumerate(tag for tag in _tags(head) if tag.name == "th"):
        label = th.get_text(" ", strip=True).lower()
        for word, key in _HEADER_WORDS:
            if word in label:
                found.setdefault(key, i)
                break
    return found if found.keys() == _DEFAULT_COLUMNS.keys() else _DEFAULT_COLUMNS


def _parse_row(row: Tag, columns: dict[str, int]) -> RankedSite | None:
    marked: dict[str, Tag] = {}
    for tag in _tags(row):
        if prop := tag.get("itemprop"):
            marked.setdefault(str(prop), tag)
    position = _position(marked.get("position"))
    domain = _domain(row, marked)
    if position is None or domain is None:
        return None
    cells = [child for child in row.children if isinstance(child, Tag) and child.name == "td"]

    def cell(key: str) -> Tag | None:
        i = columns[key]
        return cells[i] if i < len(cells) else None

    return RankedSite(
        position=position,
        domain=domain,
        visits=_number(cell("visits"), int),
        pages_per_visit=_number(cell("pages_per_visit"), float),
        bounce_rate=_number(cell("bounce_rate"), float),
        change=_change(cell("change")),
    )


def _position(span: Tag | None) -> int | None:
    if span is None:
        return None
    text = str(span.get("content") or span.get_text(strip=True))
    return int(text) if text.isdigit() and int(text) > 0 else None


def _domain(row: Tag, marked: dict[str, Tag]) -> str | None:
    name = marked.get("name")
    domain = normalize_domain(name.get_text(strip=True)) if name is not None else None
    if domain is not None:
        return domain
    link = marked.get("url")
    if link is None or link.name != "a":
        link = row.find("a", attrs={"itemprop": "url"}) or row.find("a", href=_OVERVIEW_HREF)
    match = _OVERVIEW_HREF.search(str(link.get("href", ""))) if link is not None else None
    return normalize_domain(match.group(1)) if match else None


def _number(cell: Tag | None, kind: type[int] | type[float]) -> Any:
    if cell is None:
        return None
    text = cell.get_text("", strip=True).replace(",", "").replace("\u00a0", "").rstrip("%").strip()
    try:
        return kind(text)
    except ValueError:
        return None


def _change(cell: Tag | None) -> int | None:
    if cell is None:
        return None
    text = cell.get_text("", strip=True)
    arrows = {tag.get("data-ui-name") for tag in _tags(cell)}
    if "ArrowUp" in arrows:
        sign = 1
    elif "ArrowDown" in arrows:
        sign = -1
    else:
        return 0 if text in _UNCHANGED else None
    digits = re.sub(r"\D", "", text)
    return sign * int(digits) if digits else None


# --- fetching --------------------------------------------------------------------------------------

_BROWSER_HEADERS = {
    "Accept": "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8",
    "Accept-Language": "en-US,en;q=0.9",
    "Accept-Encoding": "gzip, deflate",
    "Upgrade-Insecure-Requests": "1",
}


def fetch_ranking(
    session: requests.Session, url: str, *, timeout: tuple[float, float], user_agent: str
) -> bytes:
    """The body of one ranking page (one GET, redirects followed, no retry).

    Raises:
        CountryNotRanked: HTTP 404.
        SemrushUnavailable: connection error, timeout, 403, 429 or 5xx (``retry_after`` from the
            Retry-After header when there is one).
        SemrushError: any other status or request problem.
    """
    headers = {**_BROWSER_HEADERS, "User-Agent": user_agent}
    try:
        response = session.get(url, headers=headers, timeout=timeout)
        body = response.content
    except (requests.ConnectionError, requests.Timeout) as e:
        raise SemrushUnavailable(f"cannot fetch {url}: {type(e).__name__}: {e}") from e
    except requests.RequestException as e:
        raise SemrushError(f"cannot fetch {url}: {type(e).__name__}: {e}") from e
    status = response.status_code
    if status == 200:
        return body
    if status == 404:
        raise CountryNotRanked(f"no ranking page at {url} (HTTP 404)")
    if status in (403, 429) or 500 <= status <= 599:
        retry_after = parse_retry_after(response.headers.get("Retry-After"))
        waited = f", Retry-After {retry_after:g}s" if retry_after is not None else ""
        raise SemrushUnavailable(f"HTTP {status} from {url}{waited}", retry_after=retry_after)
    raise SemrushError(f"unexpected HTTP {status} from {url}")
