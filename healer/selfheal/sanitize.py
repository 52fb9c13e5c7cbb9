"""Scrubbing secrets and personal data, and the validator that guards everything outbound.

Two halves, which work differently on purpose:

* ``Sanitizer.scrub(text)`` replaces each hit of its rules with a readable marker
  (``[REDACTED-EMAIL]``, ``[REDACTED-API-KEY]`` …), turns paths inside the repository into
  repo-relative ones and home directories into ``~``. It runs on every report before anything
  is stored, fingerprinted or rendered into a prompt.
* ``validate(text)`` / ``ensure_publishable(text, what)`` re-scan text that is about to leave
  the machine (PR title/body/diff, forge issues, seed files, prompts) and block it on any hit:
  the same rules, then an entropy census (``entropy``) that knows no shapes and no names and
  flags any token random enough to be a key. What the first pass has no rule for, the second
  still blocks (``HIGH-ENTROPY``). Other parts of healer call these before they publish.

The rules (categories after Sentry Relay's PII rules, gitleaks and detect-secrets; the tables
are in ``secret_rules`` and ``pii_rules``): private keys (PEM, PuTTY); keys cut across lines;
database URLs with userinfo; chat webhooks; URL credentials; JWTs; some 50 vendors' keys by
prefix and shape; ``Authorization`` headers and bearer/basic credentials; passwords on command
lines (``mysql -p…``, ``curl -u``, ``sshpass``, ``docker login``, ``redis-cli -a``); values
under secret names in any syntax (``=``, ``:``, ``=>``, JSON also JSON-escaped, YAML, headers,
query strings, flags, ``.netrc``); e-mail addresses; UUIDs; IBANs; IMEIs; card numbers; US SSNs;
MAC addresses; IPv4/IPv6 addresses (loopback, unspecified and broadcast kept); phone numbers;
home paths; host names not on the allow list; random values under any name; long random
tokens.

Speed matters (every report goes through here): patterns are compiled once; each detector
runs its full pattern only in small windows a cheap locator found (see ``detectors``); and a
pre-filter decides before any of them runs which can match at all — one Hyperscan pass when
Hyperscan is installed, literal gates otherwise.
"""

from __future__ import annotations

import heapq
import ipaddress
import re
import string
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from healer.errors import HealerError
from healer.selfheal import entropy, pii_rules, secret_rules
from healer.selfheal.detectors import (
    MARK,
    PLACEHOLDERS,
    Census,
    CustomDetector,
    Detector,
    Hit,
    View,
    apply,
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

# Hosts that identify nobody: loopback, the RFC 2606/6761 reserved names, and the public
# services a fix PR naturally mentions. ``selfheal.allowed_hosts`` adds to these.
DEFAULT_ALLOWED_HOSTS = (
    "localhost", "example.com", "example.net", "example.org", "github.com", "githubusercontent.com",
    "python.org", "pypi.org", "anthropic.com", "claude.ai", "readthedocs.io", "npmjs.com",
)
_RESERVED_SUFFIXES = (".localhost", ".example", ".test", ".invalid")

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


class AnonymizationError(HealerError):
    """Text about to be published still contains secrets or personal data.

    ``what`` names the text (``"pr body"``, ``"diff"``, ``"seed file"``); ``findings`` lists
    the kinds found, never the values.
    """

    def __init__(self, what: str, findings: list[Finding]):
        self.what = what
        self.findings = findings
        kinds = ", ".join(sorted({f.kind for f in findings}))
        super().__init__(f"{what}: blocked, it still contains {kinds}")


@dataclass(frozen=True)
class Finding:
    """One hit of the validator: the kind, where, and a masked excerpt (never the value)."""

    kind: str
    start: int
    end: int
    hint: str

    def as_dict(self) -> dict[str, object]:
        return {"kind": self.kind, "start": self.start, "end": self.end, "hint": self.hint}


class Sanitizer:
    """Scrubs and validates text. ``root``: the repository whose paths become relative;
    ``allowed_hosts``: extra host names (and their subdomains) that may stay; ``prefilter``:
    decide which detectors can match before running any — ``True`` with the one-pass
    Hyperscan census when Hyperscan is installed, else with literal gates; ``"literal"`` /
    ``"hyperscan"`` to choose; ``False`` runs every detector (the reference: same results,
    slower)."""

    def __init__(self, *, root: Path | str | None = None, allowed_hosts: Iterable[str] = (),
                 prefilter: bool | str = True):
        self.root = str(Path(root).resolve()) if root else ""
        # The root as a whole path component: "/srv/app/x" → "x", "/srv/app" → ".", but
        # "/srv/application" stays.
        self._root_re = re.compile(re.escape(self.root) + r"(?:/|(?![\w.-]))") if root else None
        hosts = {h.lower().strip(".") for h in (*DEFAULT_ALLOWED_HOSTS, *allowed_hosts) if h}
        self._allowed = frozenset(hosts)
        self._allowed_suffixes = tuple("." + h for h in hosts) + _RESERVED_SUFFIXES
        self._detectors = self._build()
        engine = prefilter if isinstance(prefilter, str) else "auto"
        self._census = Census(self._detectors if prefilter else [], engine)
        self._brought_cache: dict[str, frozenset[int]] = {}
        self._clean: set[str] = set()

    # --- public -------------------------------------------------------------------------------

    def scrub(self, text: str) -> str:
        """``text`` with every secret and personal datum replaced by a marker.

        The detectors run in list order, each on the text the ones before it left, so later
        ones see markers, not secrets (an e-mail's domain is not reported again as a host).
        A marker can also complete a match for a detector that already ran (a token now ends
        at ``[``, a host name now ends before it): such detectors run again, so that
        scrubbing the result a second time changes nothing.
        """
        if not text or text in self._clean:
            return text
        original = text
        if self._root_re is not None and self.root in text:
            text = self._root_re.sub(lambda m: "" if m.group(0).endswith("/") else ".", text)
        view = View(text)
        census = self._census(text)
        everyone = range(len(self._detectors))
        # Only the detectors the census let through; with no census, all.
        todo = list(everyone) if census is None else sorted(census)
        for _pass in range(_MAX_PASSES):
            heapq.heapify(todo)
            again: set[int] = set()
            done = -1
            while todo:
                i = heapq.heappop(todo)
                if i <= done:
                    continue
                done = i
                hits = self._detectors[i].find(view)
                if not hits:
                    continue
                before = view.text
                view = View(apply(before, hits))
                woken = everyone if census is None else self._brought(before, hits)
                for j in woken:
                    if j > i:
                        heapq.heappush(todo, j)
                    else:
                        again.add(j)
            if not again:
                break
            todo = list(again)
        if view.text == original and len(original) <= _CLEAN_MAX_LEN:
            # Short texts that come back unchanged recur (error types, tool names, call
            # sites): remember them. Only clean ones, so no secret is kept in memory.
            if len(self._clean) >= _CLEAN_MAX_ITEMS:
                self._clean.clear()
            self._clean.add(original)
        return view.text

    def _brought(self, text: str, hits: list[Hit]) -> frozenset[int]:
        """The detectors the replacements of ``hits`` may wake: the census of each
        replacement (its markers collapsed to ``[]``, whose words wake nobody) with the text
        glued to it — the run of non-space characters before (up to 64: a host's
        ``.internal``, a key now ending at ``[``) and after (up to 3: ``]@host``, ``[]::1``).
        Cached when the glue is short (then it holds nothing worth keeping secret)."""
        parts = set()
        n = len(text)
        for s, e, rep in hits:
            if ((s == 0 or text[s - 1] in _NEUTRAL) and (e == n or text[e] in _NEUTRAL)
                    and rep.startswith(MARK) and rep.find("]") == len(rep) - 1):
                parts.add("[]")  # the common case: one marker between spaces or brackets
                continue
            left = text[max(0, s - _GLUE_BEFORE):s]
            left = left[max(left.rfind(" "), left.rfind("\n"), left.rfind("\t")) + 1:]
            right = text[e:e + _GLUE_AFTER].split(None, 1)[0] if text[e:e + 1].strip() else ""
            parts.add(left + _MARKERS.sub("[]", rep) + right)
        key = "\n".join(sorted(parts))
        found = self._brought_cache.get(key)
        if found is None:
            found = frozenset(self._census(key) or ())
            if len(key) <= 48 and len(self._brought_cache) < 512:
                self._brought_cache[key] = found
        return found

    def findings(self, text: str, *, entropy_census: bool = True) -> list[Finding]:
        """Every hit in ``text`` (empty when it is safe to publish): the rules' hits, then the
        entropy census's (``HIGH-ENTROPY``: random tokens no rule knows; see ``entropy``).

        ``entropy_census=False``: the rules only — what ``scrub`` guarantees to leave clean.
        """
        if not text:
            return []
        view = View(text)
        census = self._census(text)
        found = [Finding(det.kind, start, end, _mask(text[start:end]))
                 for i, det in enumerate(self._detectors)
                 if census is None or i in census
                 for start, end, _rep in det.find(view)]
        if entropy_census:
            found += [Finding(entropy.KIND, start, end, _mask(text[start:end]))
                      for start, end in entropy.census(text)]
        return found

    def ensure_publishable(self, text: str, what: str) -> str:
        """Return ``text`` unchanged, or raise ``AnonymizationError`` if anything is found."""
        hits = self.findings(text)
        if hits:
            raise AnonymizationError(what, hits)
        return text

    def host_allowed(self, host: str) -> bool:
        host = host.lower().rstrip(".")
        return host in self._allowed or host.endswith(self._allowed_suffixes)

    # --- the detectors, most specific first ---------------------------------------------------

    def _build(self) -> list[Detector | CustomDetector]:
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
                               r"(?:ptb\.|canary\.)?discord(?:app)?\.com/api/webhooks|"
                               r"[a-z0-9-]+\.webhook\.office\.com)/[^\s'\"<>`]+"),
              _const("WEBHOOK-URL"), needles(*_WEBHOOK_WORDS, back=80, fwd=48, lower=True),
              lower=True, census=tuple(e(w) for w in _WEBHOOK_WORDS)),
            d("CREDENTIALS", c(r"://[^\s/@:'\"<>\[\]]+(?::[^\s/@'\"<>\[\]]*)?@"),
              _const_text("://" + marker("CREDENTIALS") + "@"), _gate("://"), census=("://",)),
            d("JWT", c(r"eyJ[A-Za-z0-9_-]{5,}\.eyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]*"),
              lambda m: marker("JWT") if boundary_ok(m, _KEY_CHARS, "") else None,
              _gate("eyJ"), census=("eyJ",)),
            *secret_rules.provider_detectors(),
            d("TOKEN", c(r"\b(authorization[\"']?\s*[:=]\s*[\"']?)((?:\w+\s+)?)([^\s\"',;]+)"),
              self._auth_header, needles("authorization", back=1, fwd=64, lower=True),
              lower=True, census=("authorization",)),
            d("TOKEN", c(r"\b(bearer|basic)(\s+)([a-z0-9._~+/-]{8,}=*)"),
              self._auth_scheme, needles("bearer", "basic", back=1, fwd=24, lower=True),
              lower=True, census=("bearer", "basic")),
            *secret_rules.cli_detectors(),
            CustomDetector("SECRET", secret_rules.keyword_hits,
                           census=secret_rules.NAME_WORDS, lower=True),
            CustomDetector("EMAIL", self._emails, census=("@",)),
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
            d("CARD", c(r"[3456][0-9]{3}(?:[ -]?[0-9]{4}){2}[ -]?[0-9]{1,7}"), self._card,
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
              folded(rb"\.0{1,3}\.0{1,3}\.0", back=4, fwd=4, fallback=_IP4_HINT),
              census=(_IP4_HINT,)),
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
            CustomDetector("HOST", self._hosts, census=(_TLD_HINT.pattern,)),
            CustomDetector("HOST", self._url_hosts, census=("://", r"\]@")),
        ]

    # --- custom finders -----------------------------------------------------------------------

    def _emails(self, v: View) -> list[Hit]:
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

    def _url_hosts(self, v: View) -> list[Hit]:
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
            if _URL_HOST.fullmatch(text, start, end) and (rep := self._host_marker(
                    text[start:end])):
                out.append((start, end, rep))
        return out

    def _hosts(self, v: View) -> list[Hit]:
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
            if m and (rep := self._host_marker(m.group(0))):
                out.append((start, end, rep))
                last = end
        return out

    # --- replacement callbacks ----------------------------------------------------------------

    @staticmethod
    def _auth_header(m: re.Match[str]) -> str | None:
        value = m.group(3)
        if has_mark(value) or value.lower() in PLACEHOLDERS:
            return None
        return m.group(1) + m.group(2) + marker("TOKEN")

    @staticmethod
    def _auth_scheme(m: re.Match[str]) -> str | None:
        if m.group(1) not in ("Bearer", "bearer", "BEARER", "Basic", "basic", "BASIC"):
            return None
        value = m.group(3)
        if not (any(c.isdigit() or c.isupper() or c in "+/=._~-" for c in value)):
            return None  # "bearer authentication failed": prose, not a credential
        return m.group(1) + m.group(2) + marker("TOKEN")

    @staticmethod
    def _card(m: re.Match[str]) -> str | None:
        if not boundary_ok(m, _DIGITS + "-", _DIGITS + "-"):
            return None
        digits = "".join(c for c in m.group(0) if c.isdigit())
        if not (13 <= len(digits) <= 19 and luhn(digits)):
            return None
        if not digits.startswith(("4", "51", "52", "53", "54", "55", "34", "37", "6011")):
            return None
        return marker("CARD")

    def _host(self, m: re.Match[str]) -> str | None:
        return self._host_marker(m.group(1))

    def _host_marker(self, host: str) -> str | None:
        if has_mark(host) or self.host_allowed(host):
            return None
        try:
            ipaddress.ip_address(host)
            return None  # an address: the IP detector decides
        except ValueError:
            pass
        if host.split(".", 1)[0] in _CODE_WORDS:
            return None
        return marker("HOST")


_MAX_PASSES = 3
_GLUE_BEFORE = 64
_GLUE_AFTER = 3
_MARKERS = re.compile(re.escape(MARK) + r"[A-Z0-9-]+\]")
# Characters next to a marker that no census expression can use to match across its edge:
# no key, host, address or assignment character.
_NEUTRAL = frozenset(" \t\r\n\"'`(),;[]{}<>|")
_CLEAN_MAX_LEN = 256
_CLEAN_MAX_ITEMS = 4096
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


def _mask(value: str) -> str:
    """A hint that says where a hit was without repeating it."""
    flat = value.replace("\n", " ")
    if len(flat) <= 6:
        return "*" * len(flat)
    return flat[:3] + "…" + f"({len(flat)} chars)"


_DEFAULT: Sanitizer | None = None


def default() -> Sanitizer:
    """A shared sanitizer with the default allow list and no repository root."""
    global _DEFAULT
    if _DEFAULT is None:
        _DEFAULT = Sanitizer()
    return _DEFAULT


def scrub(text: str) -> str:
    """Scrub ``text`` with the default sanitizer."""
    return default().scrub(text)


def validate(text: str, *, allowed_hosts: Iterable[str] = ()) -> list[Finding]:
    """The validator: every secret or personal datum left in ``text`` (empty = publishable).

    Call this on anything that leaves the machine: PR titles, bodies and diffs, forge issues,
    escalation seed files, prompts sent to a model.
    """
    s = Sanitizer(allowed_hosts=allowed_hosts) if allowed_hosts else default()
    return s.findings(text)


def ensure_publishable(text: str, what: str, *, allowed_hosts: Iterable[str] = ()) -> str:
    """Return ``text``, or raise ``AnonymizationError`` (kinds only, no values) on any hit."""
    hits = validate(text, allowed_hosts=allowed_hosts)
    if hits:
        raise AnonymizationError(what, hits)
    return text
