"""The countries WorkerPool knows, and how a user's word for one becomes a Semrush slug.

Semrush's country chooser is a JavaScript widget, so its options are not in the static HTML: the
list has to be bundled here. Slugs follow Semrush's scheme (lowercase English short name, spaces to
hyphens, punctuation and accents dropped: ``united-states``, ``cote-divoire``). Whether Semrush
actually ranks a country is only known by asking it (a 404 there is "not ranked", not a typo here);
:data:`KNOWN_RANKED` lists the slugs known to answer.
"""

from __future__ import annotations

import difflib
import re
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass

from .errors import UnknownCountry


@dataclass(frozen=True)
class Country:
    """One ranking Semrush may have: a country, a territory, or ``global`` (the World)."""

    slug: str
    name: str
    iso2: str  # lowercase ISO 3166-1 alpha-2; "" for global


def slugify(text: str) -> str:
    """Semrush's slug of an English name: "Côte d'Ivoire" -> "cote-divoire"."""
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii").lower()
    text = text.replace("&", " and ")
    text = re.sub(r"[^a-z0-9\s-]", "", text)
    return re.sub(r"[\s-]+", "-", text).strip("-")


# iso2|English short name|slug if not slugify(name)|aliases (comma-separated, matched like names)
_TABLE = """
ad|Andorra
ae|United Arab Emirates||uae,emirates
af|Afghanistan
ag|Antigua and Barbuda
ai|Anguilla
al|Albania
am|Armenia
ao|Angola
aq|Antarctica
ar|Argentina
as|American Samoa
at|Austria
au|Australia
aw|Aruba
ax|Åland Islands
az|Azerbaijan
ba|Bosnia and Herzegovina||bosnia
bb|Barbados
bd|Bangladesh
be|Belgium
bf|Burkina Faso
bg|Bulgaria
bh|Bahrain
bi|Burundi
bj|Benin
bl|Saint Barthélemy
bm|Bermuda
bn|Brunei||brunei darussalam
bo|Bolivia
bq|Caribbean Netherlands||bonaire
br|Brazil
bs|Bahamas||the bahamas
bt|Bhutan
bv|Bouvet Island
bw|Botswana
by|Belarus
bz|Belize
ca|Canada
cc|Cocos (Keeling) Islands||cocos islands
cd|Democratic Republic of the Congo||drc,dr congo,congo kinshasa
cf|Central African Republic
cg|Republic of the Congo||congo,congo brazzaville
ch|Switzerland
ci|Côte d'Ivoire||ivory coast
ck|Cook Islands
cl|Chile
cm|Cameroon
cn|China
co|Colombia
cr|Costa Rica
cu|Cuba
cv|Cape Verde||cabo verde
cw|Curaçao
cx|Christmas Island
cy|Cyprus
cz|Czech Republic||czechia
de|Germany||deutschland
dj|Djibouti
dk|Denmark
dm|Dominica
do|Dominican Republic
dz|Algeria
ec|Ecuador
ee|Estonia
eg|Egypt
eh|Western Sahara
er|Eritrea
es|Spain||espana
et|Ethiopia
fi|Finland
fj|Fiji
fk|Falkland Islands
fm|Micronesia
fo|Faroe Islands
fr|France
ga|Gabon
gb|United Kingdom||uk,britain,great britain,england
gd|Grenada
ge|Georgia
gf|French Guiana
gg|Guernsey
gh|Ghana
gi|Gibraltar
gl|Greenland
gm|Gambia||the gambia
gn|Guinea
gp|Guadeloupe
gq|Equatorial Guinea
gr|Greece
gs|South Georgia and the South Sandwich Islands
gt|Guatemala
gu|Guam
gw|Guinea-Bissau
gy|Guyana
hk|Hong Kong
hm|Heard Island and McDonald Islands
hn|Honduras
hr|Croatia
ht|Haiti
hu|Hungary
id|Indonesia
ie|Ireland
il|Israel
im|Isle of Man
in|India
io|British Indian Ocean Territory
iq|Iraq
ir|Iran
is|Iceland
it|Italy
je|Jersey
jm|Jamaica
jo|Jordan
jp|Japan
ke|Kenya
kg|Kyrgyzstan
kh|Cambodia
ki|Kiribati
km|Comoros
kn|Saint Kitts and Nevis
kp|North Korea
kr|South Korea||korea,republic of korea
kw|Kuwait
ky|Cayman Islands
kz|Kazakhstan
la|Laos
lb|Lebanon
lc|Saint Lucia
li|Liechtenstein
lk|Sri Lanka
lr|Liberia
ls|Lesotho
lt|Lithuania
lu|Luxembourg
lv|Latvia
ly|Libya
ma|Morocco
mc|Monaco
md|Moldova
me|Montenegro
mf|Saint Martin
mg|Madagascar
mh|Marshall Islands
mk|North Macedonia||macedonia
ml|Mali
mm|Myanmar||burma
mn|Mongolia
mo|Macau||macao
mp|Northern Mariana Islands
mq|Martinique
mr|Mauritania
ms|Montserrat
mt|Malta
mu|Mauritius
mv|Maldives
mw|Malawi
mx|Mexico
my|Malaysia
mz|Mozambique
na|Namibia
nc|New Caledonia
ne|Niger
nf|Norfolk Island
ng|Nigeria
ni|Nicaragua
nl|Netherlands||holland,the netherlands
no|Norway
np|Nepal
nr|Nauru
nu|Niue
nz|New Zealand
om|Oman
pa|Panama
pe|Peru
pf|French Polynesia
pg|Papua New Guinea
ph|Philippines
pk|Pakistan
pl|Poland
pm|Saint Pierre and Miquelon
pn|Pitcairn Islands
pr|Puerto Rico
ps|Palestine
pt|Portugal
pw|Palau
py|Paraguay
qa|Qatar
re|Réunion
ro|Romania
rs|Serbia
ru|Russia||russian federation
rw|Rwanda
sa|Saudi Arabia||ksa
sb|Solomon Islands
sc|Seychelles
sd|Sudan
se|Sweden
sg|Singapore
sh|Saint Helena
si|Slovenia
sj|Svalbard and Jan Mayen
sk|Slovakia
sl|Sierra Leone
sm|San Marino
sn|Senegal
so|Somalia
sr|Suriname
ss|South Sudan
st|São Tomé and Príncipe
sv|El Salvador
sx|Sint Maarten
sy|Syria
sz|Eswatini||swaziland
tc|Turks and Caicos Islands
td|Chad
tf|French Southern Territories
tg|Togo
th|Thailand
tj|Tajikistan
tk|Tokelau
tl|Timor-Leste||east timor
tm|Turkmenistan
tn|Tunisia
to|Tonga
tr|Turkey||turkiye
tt|Trinidad and Tobago
tv|Tuvalu
tw|Taiwan
tz|Tanzania
ua|Ukraine
ug|Uganda
um|United States Minor Outlying Islands
us|United States||usa,america,united states of america
uy|Uruguay
uz|Uzbekistan
va|Vatican City||vatican,holy see
vc|Saint Vincent and the Grenadines
ve|Venezuela
vg|British Virgin Islands
vi|US Virgin Islands||us virgin islands,u.s. virgin islands
vn|Vietnam||viet nam
vu|Vanuatu
wf|Wallis and Futuna
ws|Samoa
ye|Yemen
yt|Mayotte
za|South Africa
zm|Zambia
zw|Zimbabwe
"""

GLOBAL = Country(slug="global", name="World", iso2="")
_GLOBAL_ALIASES = ("world", "worldwide", "ww", "all countries")


def _parse_table(table: str) -> tuple[tuple[Country, ...], dict[str, tuple[str, ...]]]:
    countries, aliases = [], {}
    for line in table.strip().splitlines():
        iso2, name, slug, alias_text = (line.split("|") + ["", ""])[:4]
        country = Country(slug=slug or slugify(name), name=name, iso2=iso2)
        countries.append(country)
        aliases[country.slug] = tuple(a for a in alias_text.split(",") if a)
    return tuple(countries), aliases


_COUNTRIES, _ALIASES = _parse_table(_TABLE)
_ALIASES[GLOBAL.slug] = _GLOBAL_ALIASES

#: Every country and territory of ISO 3166-1, then ``global``.
COUNTRIES: tuple[Country, ...] = (*_COUNTRIES, GLOBAL)

#: Slugs known to have a Semrush ranking page (late 2025; known-incomplete: poland, denmark, chile
#: ... were probably missed by rate limiting). Source: semrush_valid_country_links.txt.
KNOWN_RANKED: tuple[str, ...] = (
    "global", "angola", "argentina", "australia", "austria", "belgium", "brazil", "canada", "france",
    "germany", "greece", "hong-kong", "india", "indonesia", "ireland", "israel", "italy", "japan",
    "malaysia", "mexico", "netherlands", "norway", "philippines", "portugal", "saudi-arabia", "serbia",
    "singapore", "south-africa", "south-korea", "spain", "sweden", "switzerland", "thailand", "turkey",
    "united-arab-emirates", "united-kingdom", "united-states", "vietnam",
)  # fmt: skip

#: The special token of :func:`resolve_many` that stands for :data:`KNOWN_RANKED`.
ALL_KNOWN = "all-known"

_BY_SLUG = {c.slug: c for c in COUNTRIES}


def _key(text: str) -> str:
    """Case-, space-, hyphen- and punctuation-insensitive lookup key."""
    return slugify(text).replace("-", "")


def _build_index() -> dict[str, Country]:
    index: dict[str, Country] = {}
    for c in COUNTRIES:  # weakest first: later entries win
        for word in _ALIASES[c.slug]:
            index[_key(word)] = c
    for c in COUNTRIES:
        index[_key(c.name)] = c
        index[_key(c.slug)] = c
    for c in COUNTRIES:
        if c.iso2:  # a two-letter code beats any name (no name is two letters long)
            index[c.iso2] = c
    return index


_INDEX = _build_index()
# What a misspelling is compared with: slugs and names (lowercase), each pointing to a slug.
_SUGGESTABLE = {**{c.name.lower(): c.slug for c in COUNTRIES}, **{c.slug: c.slug for c in COUNTRIES}}


def suggest(token: str, limit: int = 3) -> list[str]:
    """Up to ``limit`` slugs whose name or slug looks like ``token`` (for "did you mean")."""
    probe = token.strip().lower()
    matches = difflib.get_close_matches(probe, list(_SUGGESTABLE), n=limit * 3, cutoff=0.6)
    matches += difflib.get_close_matches(slugify(probe), list(_SUGGESTABLE), n=limit * 3, cutoff=0.6)
    slugs = list(dict.fromkeys(_SUGGESTABLE[m] for m in matches))
    return slugs[:limit]


def resolve(token: str) -> Country:
    """The country a slug, English name, ISO alpha-2 code or common alias stands for.

    Raises:
        UnknownCountry: nothing matches; carries up to 3 suggestions.
    """
    country = _INDEX.get(_key(token)) if token.strip() else None
    if country is None:
        raise UnknownCountry(token.strip(), suggest(token))
    return country


def _tokens(spec: str | Iterable[str]) -> list[str]:
    items = spec.split(",") if isinstance(spec, str) else list(spec)
    return [t.strip() for t in items if t and t.strip()]


def resolve_many(spec: str | Iterable[str]) -> list[Country]:
    """The countries of a comma-separated list (or an iterable), de-duplicated, in first-seen order.

    ``all-known`` expands to :data:`KNOWN_RANKED`. Every unknown token is named in one error, so a
    user fixes a long list in one go.

    Raises:
        UnknownCountry: for the first unknown token; its message names all of them.
    """
    found: list[Country] = []
    unknown: list[UnknownCountry] = []
    for token in _tokens(spec):
        if _key(token) == _key(ALL_KNOWN):
            found.extend(_BY_SLUG[slug] for slug in KNOWN_RANKED)
            continue
        try:
            found.append(resolve(token))
        except UnknownCountry as e:
            unknown.append(e)
    if unknown:
        raise _combined(unknown)
    return list(dict.fromkeys(found))


def _combined(errors: list[UnknownCountry]) -> UnknownCountry:
    """One error for several unknown tokens: the first's token, everyone's names and suggestions."""
    first = errors[0]
    if len(errors) == 1:
        return first
    parts = [
        f"{e.token!r} (did you mean {', '.join(e.suggestions)}?)" if e.suggestions else repr(e.token)
        for e in errors
    ]
    suggestions = list(dict.fromkeys(s for e in errors for s in e.suggestions))
    combined = UnknownCountry(first.token, suggestions)
    combined.args = (f"unknown countries: {', '.join(parts)}",)
    return combined


def by_slug(slug: str) -> Country:
    """The country of an exact slug (data coming from WorkerPool itself, not from a user)."""
    return _BY_SLUG[slug]
