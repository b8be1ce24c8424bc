"""HTML of a Semrush "Top Websites" page, in the real late-2025 markup (docs/semrush-markup.md).

The demo world serves these pages and the parser's tests read them, so the parser is exercised
against the structure it meets in production: the attributes it relies on, plus the generated class
names, scripts and navigation it must ignore.
"""

from __future__ import annotations

from html import escape

from ..semrush import RankedSite

DATA_MONTH = "October 2025"
LAST_UPDATED = "November 13, 2025"

# Generated-looking class names, as a Semrush build emits them (they mean nothing to the parser).
_C_TEXT = "___SText_1ohi6_gg_ __size_1ohi6_gg_ __color_1ohi6_gg_"
_C_CELL = "___SCell_12yy4_gg_ p_14px_8px_1x8ao_gg_ __fixed_12yy4_gg_"
_C_ROW = "___SRow_12yy4_gg_ __theme_12yy4_gg_"
_C_HEAD = "___SColumn_12yy4_gg_ __sortable_12yy4_gg_ p_12px_8px_1x8ao_gg_"
_C_LINK = "___SLink_1unq5_gg_ __noWrap_1unq5_gg_"
_C_ICON = "___SIcon_19e2x_gg_ __interactive_19e2x_gg_"

_COLUMNS = ("Position", "Website", "Change", "Visits", "Pages / Visit", "Bounce rate")
_ARROW_PATHS = {
    "ArrowUp": "M8 3.5 12.5 8l-1 1L8.7 6.2V13H7.3V6.2L4.5 9l-1-1L8 3.5Z",
    "ArrowDown": "M8 12.5 3.5 8l1-1 2.8 2.8V3h1.4v6.8L11.5 7l1 1L8 12.5Z",
}


def _num(value: float) -> str:
    """2 decimals at most, no trailing zeros: 37.58, 48.5, 29 (as the live page prints them)."""
    return f"{value:.2f}".rstrip("0").rstrip(".")


def _change_cell(change: int | None) -> str:
    if change is None:
        return ""
    if change == 0:
        return f'<span class="{_C_TEXT}">–</span>'
    name = "ArrowUp" if change > 0 else "ArrowDown"
    return (
        f'<svg class="{_C_ICON}" data-ui-name="{name}" width="16" height="16" viewBox="0 0 16 16" '
        f'aria-hidden="true"><path fill="currentColor" d="{_ARROW_PATHS[name]}"></path></svg>'
        f'<span class="{_C_TEXT}">{abs(change)}</span>'
    )


def _row(site: RankedSite) -> str:
    domain = escape(site.domain)
    cells = (
        f'<span class="{_C_TEXT}" itemprop="position" content="{site.position}">{site.position}</span>',
        f'<a class="{_C_LINK}" itemprop="url" href="/website/{domain}/overview/">'
        f'<span class="{_C_TEXT}" itemprop="name">{domain}</span></a>',
        _change_cell(site.change),
        f"{site.visits:,}" if site.visits is not None else "n/a",
        _num(site.pages_per_visit) if site.pages_per_visit is not None else "n/a",
        f"{_num(site.bounce_rate)}%" if site.bounce_rate is not None else "n/a",
    )
    tds = "".join(f'<td class="{_C_CELL}">{c}</td>' for c in cells)
    return (
        f'<tr class="{_C_ROW}" data-test="Row" itemprop="itemListElement" itemscope '
        f'itemtype="https://schema.org/ListItem">{tds}</tr>'
    )


def _page(title: str, main: str) -> str:
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{escape(title)}</title>
<link rel="stylesheet" href="/static/top-websites.3f9a1c.css">
<script>window.__SM_BUILD__={{"app":"top-websites","rev":"3f9a1c"}};</script>
</head><body>
<header class="___SHeader_a81f2_gg_"><nav class="___SNav_a81f2_gg_">
<a href="/">Semrush</a><a href="/features/">Features</a><a href="/prices/">Pricing</a>
<a href="/login/">Log in</a><a href="/signup/">Sign up</a></nav></header>
{main}
<footer class="___SFooter_a81f2_gg_"><p>© 2008 - 2025 Semrush. All rights reserved.</p></footer>
<script src="/static/top-websites.3f9a1c.js" defer></script>
</body></html>
"""


def render_ranking_page(title_country: str, rows: list[RankedSite], *, related_slug: str | None) -> str:
    """A ranking page for ``title_country`` ("World" for the index) listing ``rows``."""
    place = "the World" if title_country == "World" else escape(title_country)
    heading = f"Most Visited  Websites in {place}, Updated {DATA_MONTH}"
    head = "".join(f'<th class="{_C_HEAD}" scope="col">{label}</th>' for label in _COLUMNS)
    body = "".join(_row(site) for site in rows)
    related = (
        f'<div data-test="RelatedLinks" class="___SBox_7kx1d_gg_">'
        f'<span class="{_C_TEXT}">Explore more:</span>'
        f'<a class="{_C_LINK}" href="/website/top/{escape(related_slug)}/all/">Next country</a></div>'
        if related_slug
        else ""
    )
    main = f"""<main class="___SMain_a81f2_gg_">
<div class="___SBox_7kx1d_gg_" itemscope itemtype="https://schema.org/ItemList">
<h1 class="{_C_TEXT}" itemprop="name">{heading}</h1>
<div class="___SBox_7kx1d_gg_" data-test="top-websites-table">
<table class="___STable_12yy4_gg_" data-test="Table">
<thead class="___SHead_12yy4_gg_" data-test="Head"><tr>{head}</tr></thead>
<tbody class="___SBody_12yy4_gg_" data-test="Body">{body}</tbody>
</table></div>
{related}
</div>
<p class="{_C_TEXT}" data-test="LastUpdatedDate">Last updated: {LAST_UPDATED}</p>
</main>"""
    return _page(f"Top Websites Ranking - Most Visited Websites in {DATA_MONTH} | Semrush", main)


def render_block_page() -> str:
    """What a blocked client gets instead of a ranking: a challenge page, no table."""
    main = """<main class="___SMain_a81f2_gg_"><div id="challenge-stage">
<h1>Access denied</h1>
<p>Checking your browser before accessing www.semrush.com. This process is automatic.</p>
<p>Your request was blocked because of unusual traffic from your network. Ray ID: 8f2c1a9b7d3e4f50</p>
<noscript>Please enable JavaScript and cookies to continue.</noscript>
</div></main>"""
    return _page("Just a moment...", main)
