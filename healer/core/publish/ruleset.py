"""The ordered detector list every ``Sanitizer`` runs, and the finders and callbacks it needs.

Order matters: each detector runs on the text the ones before it left (most specific first, so
later ones see markers, not secrets). The vendor, command-line and keyword tables live in
``secret_rules``, the personal-data ones in ``pii_rules``; how a detector finds its windows and
how the pre-filter census works is ``detectors``.
"""

from __future__ import annotations

import ipaddress
import re
import string
from collections.abc import Callable

from healer.core.publish import pii_rules, secret_rules
from healer.core.publish.detectors import (
    PLACEHOLDERS,
    CustomDetector,
    Detector,
    Hit,
    View,
    boundary_ok,
    expand,
    folded,
    has_mark,
    hints,
    keep_ip,
    long_tokens,
    luhn,
    marker,
    needles,
    random_looking,
)

# A host name ends in one of these. "Strong" endings are never Python attribute chains, so two
# labels suffice; "weak" ones collide with identifiers (``request.app``) and need three.
_STRONG_TLDS = "com|net|org|edu|gov|mil|internal|corp|intranet|lan"
_WEAK_TLDS = (
    "io|dev|ai|app|cloud|co|me|info|biz|xyz|tech|online|site|local|home|us|uk|de|fr|nl|eu|ca|"
    "au|jp|cn|ru|br|ch|se|no|es|it|pl|in"
)
_LABEL = r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?"
_CODE_WORDS = frozenset({"self", "cls", "this", "super", "os", "sys"})
_EMAIL_ALLOWED = re.compile(r"^(?:no-?reply@|.*@users\.noreply\.github\.com$)", re.I)


def build(host_allowed: Callable[[str], bool]) -> list[Detector | CustomDetector]:
    """The detectors, most specific first. ``host_allowed``: the sanitizer's allow list (a
    host it accepts stays)."""
    hosts = _HostFinder(host_allowed)
    d, c, e = Detector, re.compile, re.escape
    return [
        d("PRIVATE-KEY", c(r"-----BEGIN[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----.*?"
                           r"(?:-----END[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----|\Z)", re.S),
          _const("PRIVATE-KEY"), needles("PRIVATE KEY", back=40, fwd=32),
          census=("PRIVATE KEY",)),
        d("PRIVATE-KEY", c(r"PuTTY-User-Key-File-[0-9]+:.*?(?:Private-MAC:[ \t]*[0-9a-fA-F]+"
                           r"|\Z)", re.S),
          _const("PRIVATE-KEY"), needles("PuTTY-User-Key-File", back=1, fwd=32),
          census=("PuTTY-User-Key-File",)),
        # Before every single-line rule: a key cut in two must be seen whole.
        CustomDetector("SECRET", secret_rules.wrapped_hits,
                       census=secret_rules.WRAPPED_CENSUS, gate=("\n",)),
        # With userinfo only: without it a database URL names a host (the host rules
        # decide) and a port, which help the reader (``redis://localhost:6379``).
        d("DB-URL", c(r"\b(?:postgres(?:ql)?|mysql|mariadb|mongodb(?:\+srv)?|rediss?|amqps?|"
                      r"mssql|sqlserver|oracle|cockroachdb|clickhouse|couchdb|neo4j|"
                      r"cassandra)(?:\+[a-z0-9]+)?://[^\s/@'\"<>`]*@[^\s'\"<>`]+"),
          _const("DB-URL"), needles("://", back=24, fwd=200), lower=True, census=("://",)),
        d("WEBHOOK-URL", c(r"https?://(?:hooks\.slack\.com/(?:services|workflows|triggers)|"
                           r"(?:ptb\.|canary\.)?discord(?:app)?\.com/api(?:/v[0-9]+)?/webhooks|"
                           r"[a-z0-9-]+\.webhook\.office\.com)/[^\s'\"<>`]+"),
          _const("WEBHOOK-URL"), needles(*_WEBHOOK_WORDS, back=80, fwd=48, lower=True),
          lower=True, census=tuple(e(w) for w in _WEBHOOK_WORDS)),
        # Tokens carried in a URL's path (Telegram's /bot<token>/, webhooks without their
        # host, /token/<t>): the token only, the route stays readable.
        *secret_rules.path_detectors(),
        d("CREDENTIALS", c(r"://[^\s/@:'\"<>\[\]]+(?::[^\s/@'\"<>\[\]]*)?@"),
          _const_text("://" + marker("CREDENTIALS") + "@"), _gate("://"), census=("://",)),
        d("JWT", c(r"eyJ[A-Za-z0-9_-]{5,}\.eyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]*"),
          lambda m: marker("JWT") if boundary_ok(m, _KEY_CHARS, "") else None,
          _gate("eyJ"), census=("eyJ",)),
        *secret_rules.provider_detectors(),
        d("TOKEN", c(r"\b(authorization[\"']?\s*[:=]\s*[\"']?)((?:\w+\s+)?)([^\s\"',;]+)"),
          _auth_header, needles("authorization", back=1, fwd=64, lower=True),
          lower=True, census=("authorization",)),
        d("TOKEN", c(r"\b(bearer|basic)(\s+)([a-z0-9._~+/-]{8,}=*)"),
          _auth_scheme, needles("bearer", "basic", back=1, fwd=24, lower=True),
          lower=True, census=("bearer", "basic")),
        *secret_rules.cli_detectors(),
        CustomDetector("SECRET", secret_rules.keyword_hits,
                       census=secret_rules.NAME_WORDS, lower=True),
        CustomDetector("EMAIL", _emails, census=("@",)),
        d("UUID", c(r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-"
                    r"[0-9a-fA-F]{12}\b"),
          _const("UUID"), hints(_UUID_HINT, back=9, fwd=30), census=(_UUID_HINT,),
          gate=("-",)),
        # Any name, a random value; then long random tokens nothing above claimed. Before
        # the address-like kinds below (none of them is random), so the markers these leave
        # only ever change the context of detectors still to run (the census sees to it).
        CustomDetector("SECRET", secret_rules.generic_hits, census=_GENERIC_CENSUS,
                       gate=("=", ":")),
        d("SECRET", c(r"(?<![A-Za-z0-9+/_=-])[A-Za-z0-9+/_-]{24,}={0,2}"
                      r"(?![A-Za-z0-9+/_=-])"),
          lambda m: marker("SECRET") if random_looking(m.group(0)) else None,
          long_tokens(24), census=_ENTROPY_CENSUS),
        CustomDetector("IBAN", pii_rules.iban_hits, census=pii_rules.IBAN_CENSUS),
        # Before cards: an IMEI is fifteen digits that pass Luhn too.
        d("IMEI", pii_rules.IMEI, pii_rules.imei_replace,
          needles("imei", back=1, fwd=48, lower=True), lower=True, census=("imei",)),
        d("CARD", c(r"[3456][0-9]{3}(?:[ -]?[0-9]{4}){2}[ -]?[0-9]{1,7}"), _card,
          folded(rb"0000[ -]?0000[ -]?0000", back=8, fwd=16, fallback=_CARD_HINT),
          census=(_CARD_HINT,)),
        d("SSN", c(r"[0-9]{3}-[0-9]{2}-[0-9]{4}"),
          lambda m: marker("SSN") if boundary_ok(m, _DIGITS + "-", _DIGITS + "-") else None,
          folded(rb"000-00-0000", back=1, fwd=1, fallback=r"-[0-9]{2}-[0-9]{4}"),
          census=("[0-9]{3}-[0-9]{2}-[0-9]{4}",)),
        CustomDetector("MAC", pii_rules.mac_hits, census=pii_rules.MAC_CENSUS, gate=(":",)),
        d("IP", c(r"(?<![\w:.])(?:[0-9A-Fa-f]{0,4}:){2,7}(?:[0-9A-Fa-f]{1,4}|"
                  r"\d{1,3}(?:\.\d{1,3}){3})?(?:%\w+)?(?![\w:])"),
          lambda m: None if keep_ip(m.group(0)) else marker("IP"),
          _ip6_locate, census=_IP6_HINTS, gate=(":",)),
        d("IP", c(r"(?<![\w.])(?:(?:25[0-5]|2[0-4][0-9]|1?[0-9]?[0-9])\.){3}"
                  r"(?:25[0-5]|2[0-4][0-9]|1?[0-9]?[0-9])(?![\w]|\.[0-9])"),
          lambda m: None if keep_ip(m.group(0)) else marker("IP"),
          # The hint on the text itself: its only literal is the "." either way, so the
          # digit-folded copy of the text (a pass over all of it) would buy nothing here.
          hints(_IP4_HINT, back=4, fwd=4), census=(_IP4_HINT,)),
        d("PHONE", c(
            r"(?<![\w+])(?:\+[0-9]{1,3}[\s.-]?(?:\([0-9]{1,4}\)[\s.-]?)?[0-9]{1,4}"
            r"(?:[\s.-]?[0-9]{2,4}){2,3}|\([0-9]{3}\)\s?[0-9]{3}[\s.-][0-9]{4}"
            r"|[0-9]{3}[\s.-][0-9]{3}[\s.-][0-9]{4})(?![\w.-])"),
          _const("PHONE"),
          folded(rb"\+0", rb"\(000\)", rb"000-0000", rb"000\.0000", rb"000 0000",
                 back=12, fwd=24, fallback=r"[+(]|[0-9]{3}[ .-][0-9]{4}"),
          census=(r"\+[0-9]", r"\([0-9]{3}\)", r"[0-9]{3}[ .-][0-9]{4}")),
        d("HOME-PATH", c(r"(?:/home|/Users)/[^/\s\"':]+|(?<![\w.])/root(?=[/\s\"']|$)"
                         r"|\b[A-Za-z]:\\Users\\[^\\\s\"']+"),
          _const_text("~"), needles(*_HOME_WORDS, back=3, fwd=2),
          census=tuple(e(w) for w in _HOME_WORDS)),
        CustomDetector("HOST", hosts.bare, census=(_TLD_HINT.pattern,)),
        CustomDetector("HOST", hosts.in_urls, census=("://", r"\]@")),
    ]


# --- custom finders ---------------------------------------------------------------------------


def _emails(v: View) -> list[Hit]:
    text, out, last = v.text, [], 0
    for i in v.positions("@"):
        if i < last:
            continue
        start, _ = expand(text, i, i, _EMAIL_LOCAL)
        _, end = expand(text, i + 1, i + 1, _EMAIL_DOMAIN)
        m = _EMAIL.match(text, start, end)
        if m and not _EMAIL_ALLOWED.match(m.group(0)):
            out.append((start, m.end(), marker("EMAIL")))
            last = m.end()
    return out


class _HostFinder:
    """Host names not on the allow list (``allowed``): bare ones and those in URLs."""

    def __init__(self, allowed: Callable[[str], bool]):
        self.allowed = allowed

    def in_urls(self, v: View) -> list[Hit]:
        """The host of every URL (``scheme://host``, ``…CREDENTIALS]@host``), whatever its TLD."""
        text, out = v.text, []
        # "]@" only after the credentials marker: a URL's userinfo, not any marker before "@".
        cred = marker("CREDENTIALS")
        starts = [i + 3 for i in v.positions("://")] + [
            i + 2 for i in v.positions("]@") if text.endswith(cred, 0, i + 1)]
        for start in sorted(starts):
            _, end = expand(text, start, start, _URL_HOST_CHARS)
            if end == start or (end < len(text) and text[end] not in _URL_HOST_END):
                continue
            if _URL_HOST.fullmatch(text, start, end) and (rep := self.marker(
                    text[start:end])):
                out.append((start, end, rep))
        return out

    def bare(self, v: View) -> list[Hit]:
        """Host names by their ending (``.com``, three labels for the weak endings)."""
        text, out, last = v.text, [], 0
        for t in _TLD_HINT.finditer(text):
            start, _ = expand(text, t.start(), t.start(), _HOST_CHARS)
            end = t.end()
            while start < end and text[start] in ".-":
                start += 1
            if start < last or (start > 0 and text[start - 1] in _HOST_BEFORE):
                continue
            if end < len(text) and (text[end] in "-(" or _DOT_LABEL.match(text, end)):
                continue  # the name goes on (a longer host, a call, a module path)
            m = _HOST.fullmatch(text, start, end)
            if m and (rep := self.marker(m.group(0))):
                out.append((start, end, rep))
                last = end
        return out

    def marker(self, host: str) -> str | None:
        if has_mark(host) or self.allowed(host):
            return None
        try:
            ipaddress.ip_address(host)
            return None  # an address: the IP detector decides
        except ValueError:
            pass
        if host.split(".", 1)[0] in _CODE_WORDS:
            return None
        return marker("HOST")


# --- replacement callbacks --------------------------------------------------------------------


def _auth_header(m: re.Match[str]) -> str | None:
    value = m.group(3)
    if has_mark(value) or value.lower() in PLACEHOLDERS:
        return None
    return m.group(1) + m.group(2) + marker("TOKEN")


def _auth_scheme(m: re.Match[str]) -> str | None:
    if m.group(1) not in ("Bearer", "bearer", "BEARER", "Basic", "basic", "BASIC"):
        return None
    value = m.group(3)
    if not (any(c.isdigit() or c.isupper() or c in "+/=._~-" for c in value)):
        return None  # "bearer authentication failed": prose, not a credential
    return m.group(1) + m.group(2) + marker("TOKEN")


def _card(m: re.Match[str]) -> str | None:
    if not boundary_ok(m, _DIGITS + "-", _DIGITS + "-"):
        return None
    digits = "".join(c for c in m.group(0) if c.isdigit())
    if not (13 <= len(digits) <= 19 and luhn(digits)):
        return None
    if not digits.startswith(("4", "51", "52", "53", "54", "55", "34", "37", "6011")):
        return None
    return marker("CARD")


_KEY_CHARS = string.ascii_letters + string.digits + "_-"
_DIGITS = "0123456789"
_EMAIL_LOCAL = frozenset(_KEY_CHARS + ".%+")
_EMAIL_DOMAIN = frozenset(string.ascii_letters + string.digits + ".-")
_EMAIL = re.compile(r"[A-Za-z0-9._%+-]+@(?:[A-Za-z0-9-]+\.)+[A-Za-z]{2,}")
_HOST_CHARS = frozenset(string.ascii_lowercase + string.digits + ".-")
_HOST_BEFORE = frozenset(string.ascii_letters + string.digits + "_./-@")
_TLD_HINT = re.compile(rf"\.(?:{_STRONG_TLDS}|{_WEAK_TLDS})\b")
_HOST = re.compile(rf"(?:{_LABEL}\.)+(?:{_STRONG_TLDS})|(?:{_LABEL}\.){{2,}}(?:{_WEAK_TLDS})")
# The name goes on after the dot — also when what follows was already redacted, so that
# scrubbing twice finds no new host in ``svc.internal.[REDACTED-SECRET]``.
_DOT_LABEL = re.compile(r"\.(?:[a-z0-9]|\[REDACTED-)")
_URL_HOST = re.compile(rf"(?:{_LABEL}\.)+{_LABEL}", re.I)
_URL_HOST_CHARS = frozenset(string.ascii_letters + string.digits + ".-")
_URL_HOST_END = frozenset(":/ \t\n\"'>?#")
_WEBHOOK_WORDS = ("hooks.slack", "discord", "webhook.office")
_HOME_WORDS = ("/home/", "/Users/", "/root", "\\Users\\")
_UUID_HINT = r"-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-"
# An IPv6 address has "::" or at least six colons (eight groups, or six and a dotted quad);
# a time of day ("10:05:00") has neither.
_IP6_HINTS = (r"::", r"(?:[0-9A-Fa-f]{1,4}:){6}")
# A random key has a run of 20+ letters and digits (``random_looking``); paths, snake_case
# names and most class names do not.
_ENTROPY_CENSUS = (r"[A-Za-z0-9]{20}",)
_CARD_HINT = r"[0-9]{4}[ -]?[0-9]{4}[ -]?[0-9]{4}"
_IP4_HINT = r"\.[0-9]{1,3}\.[0-9]{1,3}\.[0-9]"
# An assignment of something at least twelve key characters long.
_GENERIC_CENSUS = (r"[=:][>=]?[ \t]*(\\{0,3}[\"'`])?[A-Za-z0-9+_~!@#$%^*-]"
                   r"[A-Za-z0-9+/=_~!@#$%^*-]{11}",)


_IP6_COMPRESSED = needles("::", back=48, fwd=48)
_IP6_FULL = hints(_IP6_HINTS[1], back=48, fwd=48)


def _ip6_locate(v: View) -> list[tuple[int, int]]:
    """``::``, or six colon groups — looked for (a slow, class-first regex) only when the text
    has six colons at all (``str.count`` is cheap; a traceback seldom has)."""
    found = _IP6_COMPRESSED(v) or []
    if v.text.count(":") >= 6:
        found = sorted(found + (_IP6_FULL(v) or []))
        merged: list[tuple[int, int]] = []
        for ws, we in found:
            if merged and ws <= merged[-1][1]:
                merged[-1] = (merged[-1][0], max(merged[-1][1], we))
            else:
                merged.append((ws, we))
        return merged
    return found


def _gate(needle: str) -> Callable[[View], list[tuple[int, int]] | None]:
    """Scan the whole text, but only if ``needle`` occurs (for literal-first patterns)."""
    return lambda v: None if v.positions(needle) else []


def _const(kind: str) -> Callable[[re.Match[str]], str]:
    text = marker(kind)
    return lambda _m: text


def _const_text(text: str) -> Callable[[re.Match[str]], str]:
    return lambda _m: text
