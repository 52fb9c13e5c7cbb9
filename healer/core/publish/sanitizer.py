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

The rules (categories after Sentry Relay's PII rules, gitleaks and detect-secrets; their order
is ``ruleset``, the tables are in ``secret_rules`` and ``pii_rules``; ``Finding`` and
``AnonymizationError`` are in ``findings``): private keys (PEM, PuTTY); keys cut across lines;
database URLs with userinfo; chat webhooks; tokens carried in a URL's path (Telegram's
``/bot<id>:<token>/sendMessage`` and ``/file/bot…/`` on any host, Discord's
``/webhooks/<id>/<token>`` and Slack's ``/services/T…/B…/<secret>`` without their host,
a generated value after a segment named ``token``/``key``/``secret``/``hooks`` …: the token
goes, the route stays); URL credentials; JWTs; some 50 vendors' keys by prefix and shape;
``Authorization`` headers and bearer/basic credentials; passwords on command lines, also as
argv items inside any quoting (``mysql -pX``, ``['mysql', '-u', 'root', '-pX']``,
``["mysql","-pX"]``, ``mysql '-pX'``, ``'--password', 'X'``, ``sshpass -p``, ``curl -u``,
``docker login -p``, ``redis-cli -a``, ``mongosh -p``, ``ldapsearch -w``, ``sqlcmd -P``,
``keytool -storepass``, ``zip -P``, ``7z -pX`` — ``-p`` only for the tools that mean a
password by it, never ssh's or docker's port); values under secret names in any syntax (``=``,
``:``, ``=>``, JSON also JSON-escaped, YAML, headers, query strings — ``?key=`` too when the
value is 16+ characters —, flags, ``PGPASSWORD=``, ``--token=``, ``--api-key=``, ``.netrc``; a
``--password-file`` path is not a secret and stays); e-mail addresses; UUIDs; IBANs; IMEIs;
card numbers; US SSNs; MAC addresses; IPv4/IPv6 addresses (loopback, unspecified and broadcast
kept); phone numbers; home paths; host names not on the allow list; random values under any
name; long random tokens.

Speed matters (every report goes through here): patterns are compiled once; each detector
runs its full pattern only in small windows a cheap locator found (see ``detectors``); and a
pre-filter decides before any of them runs which can match at all — one Hyperscan pass when
Hyperscan is installed, literal gates otherwise.
"""


from __future__ import annotations

import heapq
import re
from collections.abc import Iterable, Sequence
from pathlib import Path

from healer.core.publish import entropy, ruleset
from healer.core.publish.detectors import MARK, Census, Hit, View, apply
from healer.core.publish.findings import AnonymizationError, Finding, mask

# Hosts that identify nobody: loopback, the RFC 2606/6761 reserved names, and the public
# services a fix PR naturally mentions. ``selfheal.allowed_hosts`` adds to these.
DEFAULT_ALLOWED_HOSTS = (
    "localhost", "example.com", "example.net", "example.org", "github.com", "githubusercontent.com",
    "python.org", "pypi.org", "anthropic.com", "claude.ai", "readthedocs.io", "npmjs.com",
)
_RESERVED_SUFFIXES = (".localhost", ".example", ".test", ".invalid")


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
        # A root no proper prefix of which ends it cannot overlap itself: then, when every
        # occurrence is followed by "/", a plain replace does what the regex does (faster).
        r = self.root
        self._root_plain = bool(r) and not any(r.endswith(r[:k]) for k in range(1, len(r)))
        hosts = {h.lower().strip(".") for h in (*DEFAULT_ALLOWED_HOSTS, *allowed_hosts) if h}
        self._allowed = frozenset(hosts)
        self._allowed_suffixes = tuple("." + h for h in hosts) + _RESERVED_SUFFIXES
        self._detectors = ruleset.build(self.host_allowed)
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
        prepared = self._prepare(text)
        return text if prepared is None else self._run(*prepared)

    def scrub_many(self, texts: Sequence[str]) -> list[str]:
        """Each of ``texts`` as ``scrub`` returns it. The pre-filter passes of all of them run
        first, back to back: the Hyperscan database (hundreds of KB) is then read from the
        CPU's cache for all but the first text — one report's texts scrubbed one after the
        other each paid for reading it cold again after the detector work in between."""
        prepared = [self._prepare(text) for text in texts]
        return [text if p is None else self._run(*p)
                for text, p in zip(texts, prepared, strict=True)]

    def _prepare(self, text: str) -> tuple[str, str, set[int] | None] | None:
        """``(original, text with the root cut, census)``; None for a text known clean."""
        if not text or text in self._clean:
            return None
        original = text
        if self._root_re is not None and self.root in text:
            if self._root_plain and text.count(self.root) == text.count(self.root + "/"):
                text = text.replace(self.root + "/", "")
            else:
                text = self._root_re.sub(lambda m: "" if m.group(0).endswith("/") else ".", text)
        return original, text, self._census(text)

    def _run(self, original: str, text: str, census: set[int] | None) -> str:
        """The detectors over ``text`` (the root already cut) that ``census`` lets through."""
        view = View(text)
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
            plain = rep.startswith(MARK) and rep.find("]") == len(rep) - 1
            if not plain:  # one marker alone changes all it replaced: nothing to narrow
                s, e, rep = _changed(text, s, e, rep)
                plain = rep.startswith(MARK) and rep.find("]") == len(rep) - 1
            if plain and (s == 0 or text[s - 1] in _NEUTRAL) and (e == n or text[e] in _NEUTRAL):
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

    def findings(self, text: str, *, entropy_census: bool = True,
                 own: Iterable[str] = ()) -> list[Finding]:
        """Every hit in ``text`` (empty when it is safe to publish): the rules' hits, then the
        entropy census's (``HIGH-ENTROPY``: random tokens no rule knows; see ``entropy``).

        ``entropy_census=False``: the rules only — what ``scrub`` guarantees to leave clean.
        ``own``: identifiers healer minted for this text (an incident key such as
        ``sentry-<20 hex>``, an attempt id, a branch): random by construction, so the census
        takes them for keys, and a rule for a random value under a name does too
        (``incident: sentry-…``). A hit that lies wholly within an occurrence of one of them
        is let through, by the census and the rules alike; a hit that reaches past it (a
        secret glued to the id) or any other random value of the same shape is not.
        """
        if not text:
            return []
        view = View(text)
        census = self._census(text)
        mine = _occurrences(text, own)
        found = [Finding(det.kind, start, end, mask(text[start:end]))
                 for i, det in enumerate(self._detectors)
                 if census is None or i in census
                 for start, end, _rep in det.find(view) if not _within(start, end, mine)]
        if entropy_census:
            found += [Finding(entropy.KIND, start, end, mask(text[start:end]))
                      for start, end in entropy.census(text) if not _within(start, end, mine)]
        return found

    def ensure_publishable(self, text: str, what: str, *, own: Iterable[str] = ()) -> str:
        """Return ``text`` unchanged, or raise ``AnonymizationError`` if anything is found
        (``own`` as for ``findings``)."""
        hits = self.findings(text, own=own)
        if hits:
            raise AnonymizationError(what, hits)
        return text

    def host_allowed(self, host: str) -> bool:
        host = host.lower().rstrip(".")
        return host in self._allowed or host.endswith(self._allowed_suffixes)


def _changed(text: str, s: int, e: int, rep: str) -> Hit:
    """The part of a hit its replacement really changes. A replacement that keeps the
    matched text's own start or end around its marker (``Bearer `` before a token's marker,
    ``password=`` before a value's) changes only what lies between: the kept text is glue like
    any other text beside the marker, so ``Bearer [REDACTED-TOKEN]`` wakes nobody (it woke
    the bearer rule itself, which then ran a second time for nothing)."""
    k = rep.find(MARK)
    if k > 0 and text.startswith(rep[:k], s, e):
        s, rep = s + k, rep[k:]
    end = rep.rfind("]") + 1
    if 0 < end < len(rep) and e - (len(rep) - end) >= s and text.endswith(rep[end:], s, e):
        e, rep = e - (len(rep) - end), rep[:end]
    return s, e, rep


def _occurrences(text: str, own: Iterable[str]) -> list[tuple[int, int]]:
    """The spans of ``text`` that are one of healer's own identifiers."""
    spans = []
    for ident in {o for o in own if o and o.strip()}:
        at = text.find(ident)
        while at != -1:
            spans.append((at, at + len(ident)))
            at = text.find(ident, at + 1)
    return spans


def _within(start: int, end: int, spans: list[tuple[int, int]]) -> bool:
    return any(s <= start and end <= e for s, e in spans)


_MAX_PASSES = 3
_GLUE_BEFORE = 64
_GLUE_AFTER = 3
_MARKERS = re.compile(re.escape(MARK) + r"[A-Z0-9-]+\]")
# Characters next to a marker that no census expression can use to match across its edge:
# no key, host, address or assignment character.
_NEUTRAL = frozenset(" \t\r\n\"'`(),;[]{}<>|")
_CLEAN_MAX_LEN = 256
_CLEAN_MAX_ITEMS = 4096


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


def ensure_publishable(text: str, what: str, *, allowed_hosts: Iterable[str] = (),
                       own: Iterable[str] = ()) -> str:
    """Return ``text``, or raise ``AnonymizationError`` (kinds only, no values) on any hit
    (``own``: identifiers healer minted, as for ``Sanitizer.findings``)."""
    s = Sanitizer(allowed_hosts=allowed_hosts) if allowed_hosts else default()
    hits = s.findings(text, own=own)
    if hits:
        raise AnonymizationError(what, hits)
    return text
