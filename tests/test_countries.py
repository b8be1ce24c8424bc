"""Country names, slugs, ISO codes and aliases become the slugs Semrush uses."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pipeline.countries import COUNTRIES, KNOWN_RANKED, resolve, resolve_many, slugify
from pipeline.errors import UnknownCountry

VALID_LINKS = Path("/work/shared/fixtures/semrush/semrush_valid_country_links.txt")


@pytest.mark.parametrize(
    ("token", "slug"),
    [
        ("germany", "germany"),
        ("united-kingdom", "united-kingdom"),
        ("United Kingdom", "united-kingdom"),
        ("  united   KINGDOM ", "united-kingdom"),
        ("UnitedKingdom", "united-kingdom"),
        ("de", "germany"),
        ("DE", "germany"),
        ("gb", "united-kingdom"),
        ("uk", "united-kingdom"),
        ("us", "united-states"),
        ("usa", "united-states"),
        ("USA", "united-states"),
        ("world", "global"),
        ("global", "global"),
        ("South Korea", "south-korea"),
        ("kr", "south-korea"),
        ("Hong Kong", "hong-kong"),
        ("UAE", "united-arab-emirates"),
        ("Côte d'Ivoire", "cote-divoire"),
        ("czechia", "czech-republic"),
    ],
)
def test_resolve(token: str, slug: str) -> None:
    assert resolve(token).slug == slug


def test_country_fields() -> None:
    germany = resolve("germany")
    assert (germany.name, germany.iso2) == ("Germany", "de")
    world = resolve("global")
    assert (world.name, world.iso2) == ("World", "")


def test_table_covers_iso_3166() -> None:
    assert len(COUNTRIES) >= 250  # 249 ISO 3166-1 entries + global
    assert len({c.slug for c in COUNTRIES}) == len(COUNTRIES)
    iso = [c.iso2 for c in COUNTRIES if c.iso2]
    assert len(set(iso)) == len(iso)
    assert all(re.fullmatch(r"[a-z]{2}", code) for code in iso)
    assert all(re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", c.slug) for c in COUNTRIES)


def test_every_known_ranked_slug_is_bundled() -> None:
    slugs = {c.slug for c in COUNTRIES}
    assert set(KNOWN_RANKED) <= slugs
    if VALID_LINKS.exists():
        from_fixture = re.findall(r"/website/top/([a-z-]+)/all/", VALID_LINKS.read_text())
        assert tuple(from_fixture) == KNOWN_RANKED
    assert len(KNOWN_RANKED) == 38


def test_slugify() -> None:
    assert slugify("Bosnia and Herzegovina") == "bosnia-and-herzegovina"
    assert slugify("Cocos (Keeling) Islands") == "cocos-keeling-islands"
    assert slugify("São Tomé and Príncipe") == "sao-tome-and-principe"


def test_unknown_gives_suggestions() -> None:
    with pytest.raises(UnknownCountry) as info:
        resolve("Germny")
    assert info.value.token == "Germny"
    assert info.value.suggestions[0] == "germany"
    assert len(info.value.suggestions) <= 3
    assert "germany" in info.value.describe()


def test_unknown_without_close_match() -> None:
    with pytest.raises(UnknownCountry) as info:
        resolve("qqqqqqqq")
    assert info.value.suggestions == []
    with pytest.raises(UnknownCountry):
        resolve("   ")


def test_resolve_many_dedups_in_order() -> None:
    found = resolve_many("de, Germany , fr,, germany,us ,")
    assert [c.slug for c in found] == ["germany", "france", "united-states"]
    assert [c.slug for c in resolve_many(["uk", "gb", "world"])] == ["united-kingdom", "global"]


def test_resolve_many_all_known() -> None:
    found = resolve_many("germany,all-known")
    assert [c.slug for c in found] == ["germany"] + [s for s in KNOWN_RANKED if s != "germany"]


def test_resolve_many_names_every_unknown() -> None:
    with pytest.raises(UnknownCountry) as info:
        resolve_many("de, Germny, Frnace, qqqqqqqq")
    message = str(info.value)
    assert "'Germny'" in message and "'Frnace'" in message and "'qqqqqqqq'" in message
    assert info.value.token == "Germny"
    assert {"germany", "france"} <= set(info.value.suggestions)


def test_resolve_many_single_unknown_is_plain() -> None:
    with pytest.raises(UnknownCountry) as info:
        resolve_many("de,Germny")
    assert str(info.value) == "unknown country 'Germny'"
