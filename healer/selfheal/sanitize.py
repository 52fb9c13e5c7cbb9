"""Scrubbing secrets and personal data, and the validator that guards everything outbound.

Two public halves share one list of detectors:

* ``Sanitizer.scrub(text)`` replaces each hit with a readable marker (``[REDACTED-EMAIL]``,
  ``[REDACTED-API-KEY]`` …), turns paths inside the repository into repo-relative ones and
  home directories into ``~``. It runs on every report before anything is stored, fingerprinted
  or rendered into a prompt.
* ``validate(text)`` / ``ensure_publishable(text, what)`` re-scan text that is about to leave
  the machine (PR title/body/diff, forge issues, seed files, prompts) and block it on any hit.
  Other parts of healer call these before they publish anything.

What is detected (REFERENCE.md, "Scrubbing"): JWTs; API keys (Anthropic, OpenAI, AWS, GitHub,
Slack, Stripe, Google, GitLab, npm, Hugging Face); bearer/basic credentials and
``Authorization`` headers; ``password=…``-style assignments; URLs with credentials; database
URLs; chat webhook URLs; private keys; e-mail addresses; phone numbers; card numbers; US SSNs;
IPv4/IPv6 addresses (loopback, unspecified and broadcast kept); absolute home paths; host names
not on the allow list; UUIDs; long high-entropy tokens.

Speed matters (every report goes through here): the patterns are compiled once, and each
detector has a cheap substring pre-filter so text that cannot contain its kind of secret is
never run through its regex.
"""

from __future__ import annotations

import ipaddress
import math
import re
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from healer.errors import HealerError

MARK = "[REDACTED-"

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
_SECRETISH_VALUE = re.compile(r"[A-Za-z0-9+/=_~!@#$%^*.-]{4,}")
_DOTTED_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")
_PLACEHOLDERS = frozenset({"", "none", "null", "nil", "true", "false", "***", "xxx", "changeme",
                           "redacted", "secret", "password", "token", "<redacted>", "..."})


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


Replacer = Callable[[re.Match[str]], str | None]


@dataclass(frozen=True)
class _Detector:
    kind: str
    pattern: re.Pattern[str]
    replace: Replacer  # the replacement text, or None when the match is harmless after all
    triggers: tuple[str, ...] = ()  # substrings of which one must occur (empty: always run)
    lower: bool = False  # match triggers against the lower-cased text

    def may_match(self, text: str, low: str) -> bool:
        if not self.triggers:
            return True
        hay = low if self.lower else text
        return any(t in hay for t in self.triggers)


def _const(marker: str) -> Replacer:
    return lambda _m: marker


def _marker(kind: str) -> str:
    return f"{MARK}{kind}]"


# --- predicates used by several detectors -----------------------------------------------------


def _has_mark(value: str) -> bool:
    return MARK in value


def _looks_secret(value: str) -> bool:
    """An unquoted assignment value that is a credential rather than code (``token=token``)."""
    if _has_mark(value) or value.lower() in _PLACEHOLDERS:
        return False
    if not _SECRETISH_VALUE.fullmatch(value):
        return False
    if _DOTTED_IDENT.fullmatch(value) and not any(c.isdigit() for c in value):
        return False
    return any(c.isdigit() for c in value) or any(c in "+/=~!@#$%^*" for c in value)


_ALNUM_RUN = re.compile(r"[A-Za-z0-9]{20,}")


def _random_looking(token: str) -> bool:
    """A generated key rather than a path, an identifier or a git SHA: a long alphanumeric run,
    upper and lower case mixed throughout (not CamelCase), digits, high character entropy."""
    if not _ALNUM_RUN.search(token):
        return False
    upper = sum(c.isupper() for c in token)
    lower = sum(c.islower() for c in token)
    digits = sum(c.isdigit() for c in token)
    if digits < 2 or not upper or not lower or not 0.2 <= upper / (upper + lower) <= 0.8:
        return False
    counts = Counter(token)
    n = len(token)
    entropy = -sum(c / n * math.log2(c / n) for c in counts.values())
    return entropy >= 3.8


def _luhn(digits: str) -> bool:
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = ord(ch) - 48
        if i % 2:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return total % 10 == 0


def _keep_ip(text: str) -> bool:
    try:
        ip = ipaddress.ip_address(text.split("%", 1)[0])
    except ValueError:
        return True  # not an address at all (a time, a C++ scope): leave it
    if ip.is_loopback or ip.is_unspecified:
        return True
    return isinstance(ip, ipaddress.IPv4Address) and str(ip) == "255.255.255.255"


class Sanitizer:
    """Scrubs and validates text. ``root``: the repository whose paths become relative;
    ``allowed_hosts``: extra host names (and their subdomains) that may stay."""

    def __init__(self, *, root: Path | str | None = None, allowed_hosts: Iterable[str] = ()):
        self.root = str(Path(root).resolve()) if root else ""
        hosts = {h.lower().strip(".") for h in (*DEFAULT_ALLOWED_HOSTS, *allowed_hosts) if h}
        self._allowed = frozenset(hosts)
        self._allowed_suffixes = tuple("." + h for h in hosts) + _RESERVED_SUFFIXES
        self._detectors = self._build()

    # --- public -------------------------------------------------------------------------------

    def scrub(self, text: str) -> str:
        """``text`` with every secret and personal datum replaced by a marker."""
        if not text:
            return text
        if self.root and self.root in text:
            text = text.replace(self.root + "/", "").replace(self.root, ".")
        low = text.lower()
        for det in self._detectors:
            if det.may_match(text, low):
                new = det.pattern.sub(lambda m, r=det.replace: r(m) or m.group(0), text)
                if new != text:
                    text = new
                    low = text.lower()
        return text

    def findings(self, text: str) -> list[Finding]:
        """Every hit in ``text`` (empty when it is safe to publish)."""
        if not text:
            return []
        low = text.lower()
        found: list[Finding] = []
        for det in self._detectors:
            if not det.may_match(text, low):
                continue
            for m in det.pattern.finditer(text):
                if det.replace(m) is not None:
                    found.append(Finding(det.kind, m.start(), m.end(), _mask(m.group(0))))
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

    def _build(self) -> list[_Detector]:
        d = _Detector
        return [
            d("PRIVATE-KEY", re.compile(
                r"-----BEGIN[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----.*?"
                r"(?:-----END[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----|\Z)", re.S),
              _const(_marker("PRIVATE-KEY")), ("PRIVATE KEY",)),
            d("DB-URL", re.compile(
                r"\b(?:postgres(?:ql)?|mysql|mariadb|mongodb(?:\+srv)?|rediss?|amqps?|mssql|"
                r"sqlserver|oracle|cockroachdb|clickhouse|couchdb|neo4j|cassandra)"
                r"(?:\+[a-z0-9]+)?://[^\s'\"<>`]+", re.I),
              _const(_marker("DB-URL")), ("://",)),
            d("WEBHOOK-URL", re.compile(
                r"https?://(?:hooks\.slack\.com/(?:services|workflows|triggers)|"
                r"(?:ptb\.|canary\.)?discord(?:app)?\.com/api/webhooks|"
                r"[a-z0-9-]+\.webhook\.office\.com)/[^\s'\"<>`]+", re.I),
              _const(_marker("WEBHOOK-URL")), ("hooks.slack", "discord", "webhook.office")),
            d("CREDENTIALS", re.compile(
                r"\b([a-z][a-z0-9+.-]{1,20}://)[^\s/@:'\"<>\[\]]+(?::[^\s/@'\"<>\[\]]*)?@", re.I),
              lambda m: m.group(1) + _marker("CREDENTIALS") + "@", ("://",)),
            d("JWT", re.compile(r"\beyJ[A-Za-z0-9_-]{5,}\.eyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]*"),
              _const(_marker("JWT")), ("eyJ",)),
            d("API-KEY", re.compile(
                r"\b(?:sk-(?:ant-|proj-|svcacct-|admin-)?[A-Za-z0-9_-]{20,}"
                r"|(?:sk|pk|rk)_(?:live|test)_[A-Za-z0-9]{16,}"
                r"|(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA|ANVA|AIPA)[A-Z0-9]{16}"
                r"|gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{22,}"
                r"|xox[abposre]-[A-Za-z0-9-]{10,}|xapp-\d-[A-Za-z0-9-]{10,}"
                r"|AIza[0-9A-Za-z_-]{35}|glpat-[A-Za-z0-9_-]{20,}|npm_[A-Za-z0-9]{36}"
                r"|hf_[A-Za-z0-9]{30,})"),
              _const(_marker("API-KEY")),
              ("sk-", "_live_", "_test_", "AKIA", "ASIA", "AGPA", "AIDA", "AROA", "ANPA", "ANVA",
               "AIPA", "ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_", "xox", "xapp-",
               "AIza", "glpat-", "npm_", "hf_")),
            d("TOKEN", re.compile(r"(?i)\b(authorization[\"']?\s*[:=]\s*[\"']?)((?:\w+\s+)?)"
                                  r"([^\s\"',;]+)"),
              self._auth_header, ("authorization",), lower=True),
            d("TOKEN", re.compile(r"\b([Bb]earer|BEARER|[Bb]asic)(\s+)([A-Za-z0-9._~+/-]{8,}=*)"),
              self._auth_scheme, ("bearer", "basic"), lower=True),
            d("SECRET", re.compile(
                r"(?i)\b((?:[a-z0-9]+[_-])*(?:password|passwd|passphrase|secret|token|"
                r"api[_-]?key|apikey|access[_-]?key|private[_-]?key|credentials?|session[_-]?id|"
                r"cookie|auth))([\"']?\s*[:=]\s*)(?:([\"'])([^\"'\n]*)\3|([^\s\"',;&}\])]+))"),
              self._assignment,
              ("pass", "secret", "token", "key", "credential", "session", "cookie", "auth"),
              lower=True),
            d("EMAIL", re.compile(r"\b[A-Za-z0-9._%+-]+@(?:[A-Za-z0-9-]+\.)+[A-Za-z]{2,}\b"),
              lambda m: None if _EMAIL_ALLOWED.match(m.group(0)) else _marker("EMAIL"), ("@",)),
            d("UUID", re.compile(r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-"
                                 r"[0-9a-fA-F]{12}\b"),
              _const(_marker("UUID")), ("-",)),
            d("CARD", re.compile(r"(?<![\d-])(?:4\d{3}|5[1-5]\d{2}|3[47]\d{2}|6011)"
                                 r"(?:[ -]?\d{4}){2}[ -]?\d{1,7}(?![\d-])"),
              self._card),
            d("SSN", re.compile(r"(?<![\d-])\d{3}-\d{2}-\d{4}(?![\d-])"), _const(_marker("SSN")),
              ("-",)),
            d("IP", re.compile(r"(?<![\w:.])(?:[0-9A-Fa-f]{0,4}:){2,7}(?:[0-9A-Fa-f]{1,4}|"
                               r"\d{1,3}(?:\.\d{1,3}){3})?(?:%\w+)?(?![\w:])"),
              lambda m: None if _keep_ip(m.group(0)) else _marker("IP"), ("::", ":")),
            d("IP", re.compile(r"(?<![\w.])(?:(?:25[0-5]|2[0-4]\d|1?\d?\d)\.){3}"
                               r"(?:25[0-5]|2[0-4]\d|1?\d?\d)(?![\w]|\.\d)"),
              lambda m: None if _keep_ip(m.group(0)) else _marker("IP"), (".",)),
            d("PHONE", re.compile(
                r"(?<![\w+])(?:\+\d{1,3}[\s.-]?(?:\(\d{1,4}\)[\s.-]?)?\d{1,4}(?:[\s.-]?\d{2,4}){2,3}"
                r"|\(\d{3}\)\s?\d{3}[\s.-]\d{4}|\d{3}[\s.-]\d{3}[\s.-]\d{4})(?![\w.-])"),
              _const(_marker("PHONE"))),
            d("HOME-PATH", re.compile(r"(?:/home|/Users)/[^/\s\"':]+|(?<![\w.])/root(?=[/\s\"']|$)"
                                      r"|\b[A-Za-z]:\\Users\\[^\\\s\"']+"),
              self._home, ("/home/", "/Users/", "/root", "\\Users\\")),
            d("HOST", re.compile(
                rf"(?<![\w./-])((?:{_LABEL}\.)+(?:{_STRONG_TLDS})"
                rf"|(?:{_LABEL}\.){{2,}}(?:{_WEAK_TLDS}))(?![\w-]|\.[a-z0-9]|\()"),
              self._host, (".",)),
            d("HOST", re.compile(rf"(?:(?<=://)|(?<=CREDENTIALS\]@))((?:{_LABEL}\.)+{_LABEL})"
                                 rf"(?=[:/\s\"'>]|$)"),
              self._host, ("://",)),
            d("SECRET", re.compile(r"(?<![A-Za-z0-9+/_=-])[A-Za-z0-9+/_-]{32,}={0,2}"
                                   r"(?![A-Za-z0-9+/_=-])"),
              lambda m: _marker("SECRET") if _random_looking(m.group(0)) else None),
        ]

    # --- replacement callbacks ----------------------------------------------------------------

    @staticmethod
    def _auth_header(m: re.Match[str]) -> str | None:
        value = m.group(3)
        if _has_mark(value) or value.lower() in _PLACEHOLDERS:
            return None
        return m.group(1) + m.group(2) + _marker("TOKEN")

    @staticmethod
    def _auth_scheme(m: re.Match[str]) -> str | None:
        value = m.group(3)
        if not (any(c.isdigit() or c.isupper() or c in "+/=._~-" for c in value)):
            return None  # "bearer authentication failed": prose, not a credential
        return m.group(1) + m.group(2) + _marker("TOKEN")

    @staticmethod
    def _assignment(m: re.Match[str]) -> str | None:
        quote, quoted, bare = m.group(3), m.group(4), m.group(5)
        if quote:
            if _has_mark(quoted) or quoted.strip().lower() in _PLACEHOLDERS or len(quoted) < 3:
                return None
            if quoted.startswith(("<", "${", "{{", "%(")):
                return None  # a template placeholder, not a value
            return f"{m.group(1)}{m.group(2)}{quote}{_marker('SECRET')}{quote}"
        if not _looks_secret(bare):
            return None
        return f"{m.group(1)}{m.group(2)}{_marker('SECRET')}"

    @staticmethod
    def _card(m: re.Match[str]) -> str | None:
        digits = "".join(c for c in m.group(0) if c.isdigit())
        if 13 <= len(digits) <= 19 and _luhn(digits):
            return _marker("CARD")
        return None

    @staticmethod
    def _home(m: re.Match[str]) -> str:
        return "~"

    def _host(self, m: re.Match[str]) -> str | None:
        host = m.group(1)
        if _has_mark(host) or self.host_allowed(host):
            return None
        try:
            ipaddress.ip_address(host)
            return None  # an address: the IP detector decides
        except ValueError:
            pass
        if host.split(".", 1)[0] in _CODE_WORDS:
            return None
        return _marker("HOST")


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
