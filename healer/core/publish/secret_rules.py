"""What secrets look like to the scrubber: the categories, as tables and small finders.

The categories follow what the best scrubbers cover (Sentry Relay's PII rules, gitleaks' rules,
detect-secrets' plugins); the code is healer's own:

* **provider keys** — a vendor's prefix and a body of known shape (``PROVIDERS``: AI APIs,
  payments, clouds, code hosting, messaging …), one detector each so the one-pass census
  runs only the few whose prefix occurs;
* **keyword assignments** — a value under a name that says secret (``password``, ``api_key``,
  ``AccountKey``, ``X-Amz-Signature``, ``--api-token`` …) in any syntax a report quotes:
  ``=``, ``:``, ``=>``, ``:=``, JSON (also JSON-escaped, ``\\"password\\": \\"…\\"``), YAML,
  headers, query strings, command-line flags, ``.netrc`` lines;
* **generic assignments** — a random value under *any* name (``x=…``, ``ENCRYPTION_SEED:``);
* **tokens in URL paths** — Telegram's ``/bot<id>:<token>/``, Discord's and Slack's webhook
  paths without their host, a generated value after a segment named for a credential
  (``/token/…``, ``/with/key/…``, ``/hooks/…``): the token goes, the route stays;
* **command lines** — passwords given to tools' options, as a shell line or as argv items in
  any quoting (``mysql -pSECRET``, ``['mysql', '-pSECRET']``, ``["mysql","-pSECRET"]``,
  ``'-pSECRET'``, ``sshpass -p``, ``curl -u user:SECRET``, ``docker login -p``,
  ``redis-cli -a``, ``mongosh -p``, ``ldapsearch -w``, ``sqlcmd -P``, ``keytool -storepass``,
  ``zip -P``, ``7z -p``); a bare ``-p`` counts only after a tool that means a password by it;
* **wrapped tokens** — a key a logger or a string literal broke onto the next line.

Personal data (IBAN, MAC, IMEI) is in ``pii_rules``.
"""

from __future__ import annotations

import math
import re
import string
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from healer.core.publish.detectors import (
    PLACEHOLDERS,
    Detector,
    Hit,
    Locator,
    View,
    boundary_ok,
    expand,
    has_mark,
    hints,
    looks_secret,
    marker,
    needles,
)

KEY_CHARS = string.ascii_letters + string.digits + "_-"
_KEY_RUN = frozenset(KEY_CHARS + "+/=")


# --- provider keys ----------------------------------------------------------------------------

@dataclass(frozen=True)
class Provider:
    """One vendor's key: ``pattern`` (anchored nowhere; a key character just before it means
    it is part of a longer word, unless ``bounded`` is off), found near ``find`` (literals)
    or ``hint`` (a literal-first regex) — which also feed the census."""

    name: str
    pattern: str
    find: tuple[str, ...] = ()
    hint: str = ""
    back: int = 4
    bounded: bool = True
    gate: tuple[str, ...] = ()  # literals for the pre-filter without Hyperscan (see Census)


PROVIDERS: tuple[Provider, ...] = (
    # AI services
    Provider("anthropic/openai", r"sk-(?:ant-|proj-|svcacct-|admin-)?[A-Za-z0-9_-]{20,}",
             ("sk-",)),
    Provider("groq", r"gsk_[A-Za-z0-9]{40,}", ("gsk_",)),
    Provider("xai", r"xai-[A-Za-z0-9]{40,}", ("xai-",)),
    Provider("perplexity", r"pplx-[A-Za-z0-9]{40,}", ("pplx-",)),
    Provider("replicate", r"r8_[A-Za-z0-9]{30,}", ("r8_",)),
    Provider("huggingface", r"hf_[A-Za-z0-9]{30,}", ("hf_",)),
    # payments
    Provider("stripe", r"(?:sk|pk|rk)_(?:live|test)_[A-Za-z0-9]{16,}", ("k_live_", "k_test_")),
    Provider("stripe-webhook", r"whsec_[A-Za-z0-9+/]{24,}", ("whsec_",)),
    Provider("square", r"sq0(?:atp|csp|idp)-[A-Za-z0-9_-]{22,}", ("sq0",)),
    Provider("square-prod", r"EAAA[A-Za-z0-9_-]{40,}", ("EAAA",)),
    # clouds and platforms
    Provider("aws", r"(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA|ANVA|AIPA)[A-Z0-9]{16}",
             ("AKIA", "ASIA", "AGPA", "AIDA", "AROA", "ANPA", "ANVA", "AIPA")),
    Provider("google-api", r"AIza[0-9A-Za-z_-]{35}", ("AIza",)),
    Provider("google-oauth-secret", r"GOCSPX-[A-Za-z0-9_-]{24,}", ("GOCSPX-",)),
    Provider("google-oauth-token", r"ya29\.[A-Za-z0-9_-]{20,}", ("ya29.",)),
    Provider("azure-ad-secret", r"[A-Za-z0-9_~.-]{3}[0-9]Q~[A-Za-z0-9_~.-]{31,34}", ("Q~",),
             back=6),
    Provider("digitalocean", r"do[opr]_v1_[a-f0-9]{64}", ("dop_v1_", "doo_v1_", "dor_v1_")),
    Provider("heroku", r"HRKU-[A-Za-z0-9_-]{40,}", ("HRKU-",)),
    Provider("terraform-cloud", r"[A-Za-z0-9]{14}\.atlasv1\.[A-Za-z0-9_=-]{60,}",
             (".atlasv1.",), back=16),
    Provider("supabase", r"sbp_[a-f0-9]{40}", ("sbp_",)),
    Provider("pulumi", r"pul-[a-f0-9]{40}", ("pul-",)),
    Provider("databricks", r"dapi[a-f0-9]{32}(?:-[0-9])?", ("dapi",)),
    Provider("vault", r"hv[sbr]\.[A-Za-z0-9_-]{24,}", ("hvs.", "hvb.", "hvr.")),
    Provider("doppler", r"dp\.(?:pt|st|sa|ct|scim|audit)\.[A-Za-z0-9]{40,}", ("dp.",)),
    Provider("newrelic", r"NR(?:AK|AA|II|JS)-[A-Za-z0-9]{19,}", ("NRAK-", "NRAA-", "NRII-",
                                                                   "NRJS-")),
    Provider("sentry", r"sntry[su]_[A-Za-z0-9+/=_-]{30,}", ("sntry",)),
    # code hosting, packages, CI
    Provider("github", r"gh[pousr]_[A-Za-z0-9]{30,}", ("ghp_", "gho_", "ghu_", "ghs_", "ghr_")),
    Provider("github-fine", r"github_pat_[A-Za-z0-9_]{22,}", ("github_pat_",)),
    Provider("gitlab", r"gl(?:pat|dt|rt|ptt|ft|soat|cbt|imt)-[A-Za-z0-9_-]{20,}",
             ("glpat-", "gldt-", "glrt-", "glptt-", "glft-", "glsoat-", "glcbt-", "glimt-")),
    Provider("grafana-service", r"glsa_[A-Za-z0-9]{32}_[A-Fa-f0-9]{8}", ("glsa_",)),
    Provider("grafana-cloud", r"glc_[A-Za-z0-9+/]{32,}={0,2}", ("glc_",)),
    Provider("npm", r"npm_[A-Za-z0-9]{36}", ("npm_",)),
    Provider("pypi", r"pypi-Ag[A-Za-z0-9_-]{50,}", ("pypi-Ag",)),
    Provider("dockerhub", r"dckr_pat_[A-Za-z0-9_-]{20,}", ("dckr_pat_",)),
    Provider("artifactory", r"AKCp[A-Za-z0-9]{60,}", ("AKCp",)),
    Provider("atlassian", r"ATATT[A-Za-z0-9_=-]{40,}", ("ATATT",)),
    Provider("postman", r"PMAK-[a-f0-9]{24}-[a-f0-9]{34}", ("PMAK-",)),
    Provider("linear", r"lin_api_[A-Za-z0-9]{40}", ("lin_api_",)),
    Provider("shopify", r"shp(?:at|ss|ca|pa)_[a-fA-F0-9]{32}", ("shpat_", "shpss_", "shpca_",
                                                                  "shppa_")),
    Provider("age", r"AGE-SECRET-KEY-1[0-9A-Z]{58}", ("AGE-SECRET-KEY-1",)),
    # messaging and e-mail
    Provider("slack", r"xox[abposre]-[A-Za-z0-9_-]{10,}",
             ("xoxa-", "xoxb-", "xoxp-", "xoxo-", "xoxs-", "xoxr-", "xoxe-")),
    Provider("slack-app", r"xapp-[0-9]-[A-Za-z0-9_-]{10,}", ("xapp-",)),
    Provider("telegram-bot", r"(?:(?<=bot)|(?<![A-Za-z0-9_-]))[0-9]{5,16}:AA[A-Za-z0-9_-]{33}",
             (":AA",), back=18, bounded=False),
    Provider("discord-bot", r"[MNO][A-Za-z0-9_-]{23,25}\.[A-Za-z0-9_-]{6}\.[A-Za-z0-9_-]{27,38}",
             hint=r"\.[A-Za-z0-9_-]{6}\.[A-Za-z0-9_-]{27}", back=27),
    Provider("sendgrid", r"SG\.[A-Za-z0-9_-]{22}\.[A-Za-z0-9_-]{43}", ("SG.",)),
    Provider("twilio", r"(?:SK|AC)[0-9a-f]{32}", hint=r"(?:SK|AC)[0-9a-f]{8}",
             gate=("SK", "AC")),
    Provider("mailgun", r"(?:pub)?key-[0-9a-zA-Z]{32}", ("key-",), back=7),
    Provider("mailchimp", r"[0-9a-f]{32}-us[0-9]{1,2}", hint=r"-us[0-9]", back=33,
             gate=("-us",)),
)


def provider_detectors() -> list[Detector]:
    """One ``API-KEY`` detector per provider. A match runs on to the end of the key's
    characters, so a body longer than the shape says never leaves a tail behind."""
    out = []
    for p in PROVIDERS:
        pattern = re.compile(f"(?:{p.pattern})[A-Za-z0-9_-]*")
        # The window must hold the longest fixed part of a key: a match cut short by the
        # window's end is matched again, but a pattern that cannot match at all is not.
        locate: Locator = (needles(*p.find, back=p.back, fwd=256) if p.find
                           else hints(p.hint, back=p.back, fwd=256))
        census = tuple(re.escape(f) for f in p.find) if p.find else (p.hint,)
        out.append(Detector("API-KEY", pattern, _bounded if p.bounded else _always,
                            locate, census=census, gate=p.gate))
    return out


def _bounded(m: re.Match[str]) -> str | None:
    return marker("API-KEY") if boundary_ok(m, KEY_CHARS, "") else None


def _always(_m: re.Match[str]) -> str:
    return marker("API-KEY")


def provider_at(text: str) -> re.Match[str] | None:
    """The first provider key in a short text (for wrapped tokens)."""
    best: re.Match[str] | None = None
    for p in _PROVIDER_SEARCH:
        m = p.search(text)
        if m and (best is None or m.start() < best.start()):
            best = m
    return best


_PROVIDER_SEARCH = [re.compile(f"(?:{p.pattern})[A-Za-z0-9_-]*") for p in PROVIDERS]


# --- tokens in URL paths ---------------------------------------------------------------------

# Services that carry the credential as a path segment, so a logged request line, an HTTP
# error quoting its URL or a proxy's access log repeats it. Each: the census literals, the
# pattern (the token is group ``v``; the rest of the URL stays), the marker's kind, and
# whether the token must also look generated (``generated_segment``) — for the generic segment
# names, where a word (``/tokens/revoke``) or a slug is a route, not a key.
_SEGMENT_END = r"(?=[/?#&\s\"'`)\]>,;|\\]|:(?!\w)|$)"
PATH_RULES: tuple[tuple[tuple[str, ...], str, str, bool], ...] = (
    # Telegram: /bot<bot id>:<token>/<method>, also /file/bot…/<path>; any host (a local Bot
    # API server, a proxy), any token shape after the id.
    (("/bot",), r"/bot(?P<v>[0-9]{5,16}:[A-Za-z0-9_-]{20,})" + _SEGMENT_END, "API-KEY", False),
    # Discord webhooks, any API version, any host or none: /webhooks/<id>/<token>.
    (("/webhooks/",), r"/webhooks/[0-9]{15,21}/(?P<v>[A-Za-z0-9_-]{40,})" + _SEGMENT_END,
     "TOKEN", False),
    # Slack webhooks without their host: /services/T…/B…/<secret>, workflows, triggers.
    (("/services/T", "/workflows/T", "/triggers/T"),
     r"/(?:services|workflows|triggers)/T[A-Z0-9]{6,12}/(?:[A-Za-z0-9]{6,24}/){1,2}"
     r"(?P<v>[A-Za-z0-9]{16,})" + _SEGMENT_END, "TOKEN", False),
    # A segment named for a credential, then a generated value: /token/<t>, /key/<k> (IFTTT's
    # /with/key/…), /api-key/…, /hooks/<id> (Mattermost, Rocket.Chat).
    (("/token", "/key", "/api", "/secret", "/access", "/hooks/"),
     r"/(?P<n>tokens?|keys?|api[_-]?keys?|apikey|api[_-]?tokens?|secrets?|access[_-]?tokens?|"
     r"hooks)/(?P<v>[A-Za-z0-9_-]{16,128})" + _SEGMENT_END, "TOKEN", True),
)


def path_detectors() -> list[Detector]:
    """One detector per ``PATH_RULES`` row: the token goes, the path around it stays
    (``/bot[REDACTED-API-KEY]/sendMessage``)."""
    out = []
    for words, pattern, kind, random_only in PATH_RULES:
        out.append(Detector(kind, re.compile(pattern), _path_token(kind, random_only),
                            needles(*words, back=0, fwd=256),
                            census=tuple(re.escape(w) for w in words)))
    return out


def _path_token(kind: str, random_only: bool) -> Callable[[re.Match[str]], str | None]:
    def replace(m: re.Match[str]) -> str | None:
        value = m.group("v")
        if has_mark(value) or (random_only and not generated_segment(value)):
            return None
        s, e = m.span("v")
        return m.group(0)[:s - m.start()] + marker(kind) + m.group(0)[e - m.start():]

    return replace


_SLUG_PART = re.compile(r"[a-z]+|[0-9]+")
_UUID = re.compile(r"[0-9a-fA-F]{8}-(?:[0-9a-fA-F]{4}-){3}[0-9a-fA-F]{12}")


def generated_segment(value: str) -> bool:
    """A path segment that a generator made (a token) rather than a person (a route word, a
    slug such as ``ssh-deploy-key-2024``) or a database (an id: short hex, a UUID — the UUID
    rule has those). Looser than ``random_value``: a 22-character base64url key may hold
    whole lower-case runs and only two digits."""
    if len(value) < 16 or not any(c.isdigit() for c in value):
        return False
    if not any(c.isalpha() for c in value) or _UUID.fullmatch(value):
        return False
    if all(c in string.hexdigits for c in value):
        return len(value) >= 32  # shorter: an object id (24 hex), a short digest
    parts = re.split(r"[-_.]", value)
    if len(parts) > 1 and all(_SLUG_PART.fullmatch(p) for p in parts if p):
        return False
    return _entropy(value) >= 3.3


# --- keyword assignments ----------------------------------------------------------------------

# Substrings that locate candidate names (in the lower-cased text); ``secret_name`` decides.
NAME_WORDS = ("pass", "pwd", "secret", "token", "key", "credential", "session", "cookie",
              "auth", "sig")
_NAME_CHARS = frozenset(string.ascii_lowercase + string.digits + "_-")
# The name without separators ends in one of these (``PGPASSWORD``, ``clientSecret``,
# ``x-api-key``, ``AccountKey``, ``private_key_id``); ``cache_key`` or ``max_tokens`` do not.
_SECRET_END = re.compile(
    r"(?:password|passwd|passphrase|passcode|secret|token|credentials?|cookie|session|auth|"
    r"signature|privkey|sessionid|sharedaccesssignature|"
    r"(?:api|access|account|private|secret|signing|encryption|master|client|app|auth|service|"
    r"session|license|shared|sharedaccess|consumer|webhook|hmac|jwt|ssh|deploy|root|db|"
    r"database|storage|subscription|admin|write|read|ingest|sas|primary|secondary)key)"
    r"(?:id|value|hex|b64|base64|str|string)?$")
# Short words count only as a whole name or a name's last part (``db_pass``, ``sig``; not
# ``bypass``).
_SHORT_END = re.compile(r"(?:^|[_.-])(?:pass|pwd|pw|sig)$")
_SEP = re.compile(r"(\\{0,3}[\"'])?[ \t]*(=>|:=|(?<![=!<>:])=(?!=)|:(?![:/]))[ \t]*")
_FLAG_SEP = re.compile(r"[\"']?,?[ \t]+(?=[\"']?[^\s\"'-])")
_WORD_SEP = re.compile(r"[ \t]+(?=\S)")
_PREFIX = re.compile(r"[rbuf]{1,2}(?=[\"'])|@(?=[\"'])")
_QUOTED = re.compile(r"(\\{0,3}[\"'`])([^\n]*?)\1")
_BARE = re.compile(r"[^\s\"'`,;&}\])<>|\\]+")
_NETRC_LOGIN = re.compile(r"\b(?:login|machine|default)[ \t]+\S+[ \t]+$")


# A bare ``key`` names a secret only as a query parameter (``?key=…``: Google's, Trello's,
# Bing's API keys) — and then only a long value (``&key=user_42`` is a cache key).
_QUERY_KEY = "key"
_QUERY_KEY_MIN = 16


def secret_name(name: str) -> bool:
    """Whether an identifier (lower case, any separators) names a secret."""
    squashed = name.replace("_", "").replace("-", "").replace(".", "")
    return bool(_SECRET_END.search(squashed) or _SHORT_END.search(name))


def keyword_hits(v: View) -> list[Hit]:
    """``password=…``, ``"api_key": "…"``, ``AccountKey=…;``, ``--token X``, netrc's
    ``password X`` — the value goes, the name and the syntax stay."""
    text, low = v.text, v.low
    names: set[tuple[int, int]] = set()
    for word in NAME_WORDS:  # plain finds: no other detector shares these positions
        i = low.find(word)
        while i != -1:
            names.add(expand(low, i, i + len(word), _NAME_CHARS))
            i = low.find(word, i + len(word))
    out: list[Hit] = []
    last = 0
    for start, end in sorted(names):
        if start < last or (start > 0 and text[start - 1] == "["):
            continue  # inside a value already taken, or a redaction marker
        name = low[start:end]
        # The separator first (one C-level match): most names in prose have none.
        if (_SEP.match(text, end) is None and not name.startswith("-")
                and name != "password"):
            continue
        query_key = name == _QUERY_KEY and start > 0 and text[start - 1] in "?&;"
        if not query_key and not secret_name(name.strip("-")):
            continue
        hit = _assigned(text, start, end, name)
        if hit is not None and query_key and hit[1] - hit[0] < _QUERY_KEY_MIN:
            continue  # ``?key=users`` names a field; an API key is longer
        if hit is not None:
            out.append(hit)
            last = hit[1]
    return out


def _assigned(text: str, start: int, end: int, name: str) -> Hit | None:
    """The value assigned to the name at ``[start, end)``, as a hit, if it is one."""
    m = _SEP.match(text, end)
    loose = False  # a separator that is only whitespace: flags and netrc lines
    if m is None:
        if name.startswith("-"):
            m = _FLAG_SEP.match(text, end)
        elif name == "password":
            line = text[text.rfind("\n", 0, start) + 1:start]
            if not line.strip() or _NETRC_LOGIN.search(line):
                m = _WORD_SEP.match(text, end)
        if m is None:
            return None
        loose = True
    pos = m.end()
    if (p := _PREFIX.match(text, pos)) is not None:
        pos = p.end()
    q = _QUOTED.match(text, pos)
    if q is not None:
        value = q.group(2)
        if (has_mark(value) or value.strip().lower() in PLACEHOLDERS or len(value) < 3
                or value.startswith(("<", "${", "{{", "%(", "$("))):
            return None  # empty, a placeholder or a template: not a value
        return (q.start(2), q.end(2), marker("SECRET"))
    b = _BARE.match(text, pos)
    if b is None:
        return None
    value = b.group(0)
    if has_mark(value):
        return None
    if not looks_secret(value) and not (loose and name == "password" and len(value) >= 6
                                        and not value.isalpha()):
        return None
    return (b.start(), b.end(), marker("SECRET"))


# --- generic assignments ----------------------------------------------------------------------

# No "." in a value: dotted values are names, hosts, versions (and a JWT has its own rule).
_GEN_VALUE = re.compile(r"[ \t]*(\\{0,3}[\"'`])?([A-Za-z0-9+_~!@#$%^*-][A-Za-z0-9+/=_~!@#$%^*-]"
                        r"{11,255})")
_ID_NAME = re.compile(r"(?:^|[_.-])(?:id|ids|sha\d*|hash|digest|commit|rev|revision|etag|"
                      r"checksum|fingerprint|fp|trace|span|request|req|event|object|oid|md5|"
                      r"crc\d*|uuid|guid|build|run|ref|head|base|parent|tree|blob|version)$"
                      r"|(?:id|sha|hash)$")
_NAME_BEFORE = frozenset(string.ascii_letters + string.digits + "_.-")
_CAMEL_WORD = re.compile(r"[A-Z][a-z]{2,}|[a-z]{3,}")


def generic_hits(v: View) -> list[Hit]:
    """A random value under any name: ``x=Zk3p…``, ``"nonce_seed": "…"``, ``hmac: …``."""
    text = v.text
    found: list[Hit] = []
    for sep in "=:":
        i = text.find(sep)
        while i != -1:
            hit = _generic_at(text, i)
            if hit is not None:
                found.append(hit)
            i = text.find(sep, i + 1)
    out: list[Hit] = []
    last = 0
    for hit in sorted(found):
        if hit[0] >= last:
            out.append(hit)
            last = hit[1]
    return out


def _generic_at(text: str, i: int) -> Hit | None:
    """The value after the separator at ``i``, if it is random and named."""
    # The value first: it is what almost every separator in a traceback lacks (``retries=3``).
    after = i + 2 if text.startswith(("=>", ":="), i) else i + 1
    m = _GEN_VALUE.match(text, after)
    if m is None:
        return None
    if after == i + 1 and (text.startswith(("==", "://", "::"), i)
                           or (i > 0 and text[i - 1] in "=!<>:")):
        return None  # a comparison, a URL, a scope
    quote, value = m.group(1), m.group(2)
    if quote and not text.startswith(quote, m.end()):
        return None  # the quoted text goes on: prose, not a token
    j = i
    while j > 0 and text[j - 1] in " \t\"'\\":
        j -= 1
    k, _ = expand(text, j, j, _NAME_BEFORE)
    name = text[k:j].lower()
    if not name or not (name[0].isalpha() or name[0] == "_") or has_mark(value):
        return None
    if not random_value(name, value):
        return None
    return (m.start(2), m.end(2), marker("SECRET"))


def _entropy(s: str) -> float:
    n = len(s)
    return -sum(c / n * math.log2(c / n) for c in Counter(s).values())


def random_value(name: str, value: str) -> bool:
    """Whether an assigned value was generated (a key) rather than written (a word, a number,
    a path, a version, a digest under a digest's name)."""
    v = value.rstrip("=")
    n = len(v)
    if n < 12 or v.lower() in PLACEHOLDERS:
        return False
    digits = sum(c.isdigit() for c in v)
    letters = sum(c.isalpha() for c in v)
    if not digits or not letters:
        return False
    if all(c in string.hexdigits for c in v):
        if _ID_NAME.search(name) or n < 16 or (n in (40, 64) and not secret_name(name)):
            return False
        return len(set(v)) >= 10
    if letters < 0.4 * n or "/" in v[:1]:
        return False
    worded = sum(len(w) for w in _CAMEL_WORD.findall(v))
    if worded > 0.6 * letters:
        return False  # identifiers, dotted names, file names
    return _entropy(v) >= min(3.6, math.log2(n) - 0.5)


# --- command lines ----------------------------------------------------------------------------

# Where an option starts: after a blank, or as an argv item the way a report prints one — a
# quote after a blank, a comma or a bracket (``['mysql', '-pX']``, ``["mysql","-pX"]``,
# ``mysql -u root '-pX'``), JSON-escaped too (``[\"mysql\", \"-pX\"]``).
_OPT = r"[ \t,\[](?P<o>\\{0,3}[\"'])?"
# Between an option and its value when they are two words (``-p X``) or two argv items
# (``'-p', 'X'``, ``"-p","X"``).
_GAP = r"(?:[ \t]+|\\{0,3}[\"'][ \t]*,[ \t]*\\{0,3}[\"'])"
# The value: quoted (the quotes stay, their content goes) or bare, up to a blank, a quote or a
# backslash (the end of an argv item); never an option (``-p -h db``). Inside an argv item
# (``o``: the option opened with a quote) a quote closes the item, so ``'-p', 'db'`` is not
# ``-p`` with the value ``, ``.
_VALUE = (r"(?:(?(o)(?!)|(?P<q>[\"'])(?P<v>[^\s\"',][^\n\"']*)(?P=q))"
          r"|(?P<b>[^\s\"'\\-][^\s\"'\\]*))")
_LINE = r"[^\n|;&]*?"  # the rest of one command: no pipe, no next command
CLI_RULES: tuple[tuple[tuple[str, ...], str], ...] = (
    # The mysql clients take the password glued to ``-p`` only: ``-p X`` prompts and X is the
    # database.
    (("mysql", "mariadb"),
     r"\b(?:mysql(?:dump|admin|import|check|sh|binlog|slap|pump)?|mariadb(?:-dump|-admin|"
     r"-import|-check)?)\b" + _LINE + _OPT + "-p" + _VALUE),
    (("sshpass",), r"\bsshpass\b[^\n]*?" + _OPT + "-p" + f"{_GAP}?" + _VALUE),
    (("redis-cli",), r"\bredis-cli\b" + _LINE + _OPT + "(?:-a|--pass)" + _GAP + _VALUE),
    (("curl",), r"\bcurl\b[^\n]*?" + _OPT + r"(?:-u|-U|--user(?![\w-])|--proxy-user(?![\w-]))"
                + f"{_GAP}?" + r"[\"']?[^\s:\"'@]+:(?P<v>[^\s\"'\\]+)"),
    (("docker", "podman", "buildah", "skopeo", "nerdctl", "helm"),
     r"\b(?:docker|podman|buildah|skopeo|nerdctl|helm)\b[^\n]*?\blogin\b[^\n]*?"
     + _OPT + "(?:-p|--password)" + f"(?:{_GAP}|=)" + _VALUE),
    # The MongoDB tools take ``-p X`` / ``-pX`` as the password.
    (("mongo",), r"\bmongo(?:sh|dump|restore|export|import|stat|top|files)?\b" + _LINE + _OPT
                 + "-p" + f"{_GAP}?" + _VALUE),
    # OpenLDAP's clients: ``-w X`` is the bind password (``-W`` prompts).
    (("ldap",), r"\bldap(?:search|add|modify|delete|whoami|passwd|compare|modrdn|exop|url)\b"
                + _LINE + _OPT + "-w" + f"{_GAP}?" + _VALUE),
    # SQL Server's clients: ``-P X`` (``-p`` prints statistics).
    (("sqlcmd", "bcp"), r"\b(?:sqlcmd|bcp)\b" + _LINE + _OPT + "-P" + f"{_GAP}?" + _VALUE),
    # Java's key tools: ``-storepass X``, ``-keypass X`` (``-storepass:env VAR`` names one).
    (("keytool", "jarsigner"),
     r"\b(?:keytool|jarsigner)\b" + _LINE + _OPT + "-(?:src|dest|new)?(?:storepass|keypass)"
     + _GAP + _VALUE),
    # Archives: ``zip -P X``, ``7z a -pX``.
    (("zip",), r"\b(?:zip|unzip|zipcloak)\b" + _LINE + _OPT + "-P" + _GAP + _VALUE),
    (("7z",), r"\b7z[ar]?\b" + _LINE + _OPT + "-p" + _VALUE),
)
# A port mapping after a ``-p`` the tool did not mean as a password (``docker run --name
# mongo -p 27017:27017``).
_PORTS = re.compile(r"[0-9.:\[\]]*[0-9]:[0-9]+(?:-[0-9]+)?(?:/(?:tcp|udp|sctp))?")


def cli_detectors() -> list[Detector]:
    out = []
    for words, pattern in CLI_RULES:
        out.append(Detector("SECRET", re.compile(pattern), _only_value,
                            needles(*words, back=1, fwd=400),
                            census=tuple(re.escape(w) for w in words)))
    return out


def _only_value(m: re.Match[str]) -> str | None:
    group = "b" if m.groupdict().get("b") is not None else "v"
    value = m.group(group)
    if (has_mark(value) or value.lower() in PLACEHOLDERS or value.startswith("$")
            or _PORTS.fullmatch(value)):
        return None  # a placeholder, a variable the shell expands, a port mapping
    s, e = m.span(group)
    return m.group(0)[:s - m.start()] + marker("SECRET") + m.group(0)[e - m.start():]


# --- tokens wrapped onto the next line --------------------------------------------------------

# What may stand between the cut and the line break: a closing quote, a continuation mark
# (``\``, ``+``), a carriage return. ``WRAPPED_CENSUS`` says the same for the pre-filter.
_LINE_END = re.compile(r"(?:[\"']? ?[+\\] ?|[\"'\\])?\r?\n$")
# (Two expressions, not one alternation: Hyperscan scans them at half the cost.)
WRAPPED_CENSUS = (r"[A-Za-z0-9+/=_-]{8}[\"'\\]?\r?\n",
                  r"[A-Za-z0-9+/=_-]{8}[\"']? ?[+\\] ?\r?\n")
# A line break, then (after indentation and a quote) six key characters that are not a plain
# word: lines of a traceback start with words ("File", "result", "Traceback"), so this
# literal-first pattern skips them in C (possessive: no backtracking into the indentation).
_NEXT_LINE = re.compile(r"\n[ \t>|]*+[\"']?+(?!(?:[A-Z]?[a-z]+|[A-Z]+|[a-z_]+)(?![A-Za-z0-9+/_=-]))"
                        r"([A-Za-z0-9+/_-]{6,}={0,2})")
_TAIL_CHARS = frozenset("\"'\\+ \r")


def wrapped_hits(v: View) -> list[Hit]:
    """A key cut by a line break (a logger's wrap, ``"abc"\\n "def"``, a ``\\`` continuation):
    both halves go when the joined token is a provider key or random."""
    text = v.text
    out: list[Hit] = []
    last = 0
    for m in _NEXT_LINE.finditer(text):
        here = m.start()
        if here < 8:
            continue
        end = text[here - 1]
        if end in _KEY_RUN:
            k = here  # the common case, no regex: the line ends in a key character
        elif end in _TAIL_CHARS:
            tail = _LINE_END.search(text, max(0, here - 6), here + 1)
            k = tail.start() if tail else here
        else:
            continue
        if k < 8 or not _KEY_RUN.issuperset(text[k - 8:k]):
            continue  # fewer than eight key characters before the break
        a, _ = expand(text, k, k, _KEY_RUN)
        if a < last:
            continue
        kind = _cut_key(text[a:k], m.group(1))
        if kind is None:
            continue
        out.append((a, k, marker(kind)))
        out.append((m.start(1), m.end(1), marker(kind)))
        last = m.end(1)
    return out


def _cut_key(left: str, right: str) -> str | None:
    """The kind of key ``left`` + ``right`` is, if the cut went through one."""
    joined = left + right
    found = provider_at(joined)
    if found is not None and found.start() < len(left) < found.end():
        return "API-KEY"
    if random_value("", joined) and random_value("", left[-12:] + right[:12]):
        return "SECRET"
    return None
