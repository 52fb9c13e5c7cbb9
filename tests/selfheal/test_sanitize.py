"""The sanitiser and the validator, over a corpus of secrets in realistic tracebacks."""

from __future__ import annotations

import string
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from selfheal_corpus import CASES, HARMLESS

from healer.core.publish import AnonymizationError, Sanitizer, ensure_publishable, scrub, validate
from healer.core.publish.forge import LocalForge, PullRequest

FAST = Sanitizer()
PURE_RE = Sanitizer(prefilter=False)


def marker(kind: str) -> str:
    return "~" if kind == "HOME-PATH" else f"[REDACTED-{kind}]"


class TestCorpus:
    def test_corpus_is_big_enough(self) -> None:
        """The corpus covers at least 40 forms of secret and personal data."""
        assert len(CASES) >= 40
        assert len({c.kind for c in CASES}) >= 14

    @pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
    def test_every_form_is_redacted(self, case) -> None:  # type: ignore[no-untyped-def]
        """The secret is gone and a readable marker of the right kind stands in its place."""
        out = FAST.scrub(case.text)
        assert case.secret not in out
        assert marker(case.kind) in out

    @pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
    def test_validator_catches_every_form_unsanitised(self, case) -> None:  # type: ignore[no-untyped-def]
        """If the sanitiser were bypassed, the validator blocks the text, naming the kind."""
        kinds = {f.kind for f in validate(case.text)}
        assert case.kind in kinds
        with pytest.raises(AnonymizationError) as err:
            ensure_publishable(case.text, "pr body")
        assert case.kind in str(err.value) and case.secret not in str(err.value)

    @pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
    def test_sanitised_text_passes_the_validator(self, case) -> None:  # type: ignore[no-untyped-def]
        """What the sanitiser produces is publishable: no finding is left."""
        assert validate(FAST.scrub(case.text)) == []

    @pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
    def test_prefilter_changes_nothing(self, case) -> None:  # type: ignore[no-untyped-def]
        """The Hyperscan pre-filter gives exactly the pure-re results."""
        assert FAST.scrub(case.text) == PURE_RE.scrub(case.text)
        assert [f.kind for f in FAST.findings(case.text)] == \
            [f.kind for f in PURE_RE.findings(case.text)]

    def test_all_secrets_in_one_report(self) -> None:
        """Every form at once, in one long text, is redacted just the same."""
        text = "\n".join(c.text for c in CASES)
        out = FAST.scrub(text)
        leaked = [c.id for c in CASES if c.secret in out]
        assert leaked == []
        assert validate(out) == []

    def test_a_report_scrubbed_at_once_is_scrubbed_as_each_text_alone(self) -> None:
        """``scrub_many`` (a report's texts in one call) gives each text exactly what
        ``scrub`` gives it: secrets, repository paths, empty and already clean texts."""
        texts = ["", "KeyError", *(c.text for c in CASES),
                 'File "/srv/work/app/src/x.py", line 3, in f\n  user a@b.io', "KeyError"]
        alone = Sanitizer(root="/srv/work/app")
        together = Sanitizer(root="/srv/work/app")
        assert together.scrub_many(texts) == [alone.scrub(t) for t in texts]


class TestNoOverRedaction:
    @pytest.mark.parametrize("text", HARMLESS)
    def test_ordinary_text_is_untouched(self, text: str) -> None:
        """Words, git SHAs, versions, loopback addresses, code and public docs URLs stay."""
        assert scrub(text) == text
        assert validate(text) == []

    def test_identifiers_healer_minted_pass_only_when_declared(self) -> None:
        """An incident key such as ``sentry-<20 hex>`` (what an SDK event with no Sentry
        issue id is filed under) looks random to the census: a PR body naming it is
        publishable when the caller declares it its own, and the same shape from anywhere
        else is still blocked."""
        body = "Heals incident `sentry-61c4038fbe057fd02708` (attempt 20261202T185516-ab12cd34)."
        sanitizer = Sanitizer()
        with pytest.raises(AnonymizationError):
            sanitizer.ensure_publishable(body, "PR body")
        own = ("sentry-61c4038fbe057fd02708", "20261202T185516-ab12cd34")
        assert sanitizer.ensure_publishable(body, "PR body", own=own) == body
        other = body + " token slack-9e107d9d372bb6826bd8"
        with pytest.raises(AnonymizationError):
            sanitizer.ensure_publishable(other, "PR body", own=own)

    @pytest.mark.parametrize("key", ["sentry-62ea38b0a1ace7b5d088", "slack-fcb63cd7f39b2fdb33a0"])
    def test_a_minted_key_under_a_name_passes_the_rules_too(self, key: str,
                                                             tmp_path: Path) -> None:
        """The PR body of a Sentry or Slack incident names its key under a name
        (``- incident: `sentry-<20 hex>```), which the rule for random values under a name
        flags as well as the census: with the key declared as healer's own, the body is
        publishable — by the sanitiser and by the forge, which declares the PR's meta — while
        a real secret of the same length in the same place, another key of the same shape,
        or a secret glued to the minted one is still blocked."""
        body = f"- incident: `{key}`\n- attempt: `20261206T023612-cca67e31`\n"
        own = (key, "20261206T023612-cca67e31")
        assert FAST.ensure_publishable(body, "PR body", own=own) == body
        assert PURE_RE.findings(body, own=own) == []
        secret = "Xy7Qp2Lm9Nv4Rt8Ks1Jd6Fh3Gz5aB"[:len(key)]
        other = key[:-20] + "9e107d9d372bb6826bd8"
        for leak in (body.replace(key, secret), body.replace(key, other),
                     body.replace(key, key + "Xy7Qp2Lm9Nv4Rt8K")):
            with pytest.raises(AnonymizationError):
                FAST.ensure_publishable(leak, "PR body", own=own)

        forge = LocalForge(tmp_path / "forge", tmp_path)
        pr = PullRequest(title="fix(healing): ZeroDivisionError in app/payment.py", body=body,
                         head="healer/b1519f6ff57d-cca67e31", base="main", head_sha="0" * 40,
                         base_sha="1" * 40, diff="", meta={"incident": key,
                                                           "attempt_id": own[1]})
        assert forge.open_pr(pr).number == 1
        with pytest.raises(AnonymizationError):
            forge.open_pr(replace(pr, body=body.replace(key, secret)))

    def test_structure_stays_readable(self) -> None:
        """Frames, line numbers and the exception line survive around the markers."""
        text = CASES[0].text
        out = scrub(text)
        assert out.startswith("Traceback (most recent call last):\n")
        assert 'File "src/butlers/modules/memory/tools/facts.py", line 88, in ' in out
        assert out.count("\n") == text.count("\n")


class TestPaths:
    def test_repository_paths_become_relative(self) -> None:
        """Paths inside the repository are shown relative to it; the root itself as '.'."""
        s = Sanitizer(root="/srv/work/app")
        out = s.scrub('File "/srv/work/app/src/x.py", line 1, in f (cwd /srv/work/app)')
        assert out == 'File "src/x.py", line 1, in f (cwd .)'
        assert s.scrub("/srv/work/application/y.py") == "/srv/work/application/y.py"

    def test_home_directories_lose_the_user_name(self) -> None:
        """A home directory outside the repository becomes ~, keeping the rest of the path."""
        assert scrub("open /home/alice/proj/a.py") == "open ~/proj/a.py"

    def test_allowed_hosts_are_kept(self) -> None:
        """Hosts on the configured allow list (and their subdomains) stay; others go."""
        s = Sanitizer(allowed_hosts=["acme-corp.com"])
        assert s.scrub("GET https://grafana.acme-corp.com/x") == \
            "GET https://grafana.acme-corp.com/x"
        assert "[REDACTED-HOST]" in s.scrub("GET https://grafana.other-corp.com/x")


class TestProperties:
    @settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(st.text(alphabet=string.printable, max_size=300))
    def test_scrub_is_idempotent_and_clean(self, text: str) -> None:
        """Scrubbing twice changes nothing more, and no rule finds anything in the result.

        (The validator's entropy census is stricter than the scrubber on purpose — it blocks
        what the rules missed — so a random run of letters in noise may still trip it.)"""
        once = FAST.scrub(text)
        assert FAST.scrub(once) == once
        assert FAST.findings(once, entropy_census=False) == []

    @settings(max_examples=150, deadline=None)
    @given(st.text(max_size=200))
    def test_any_unicode_is_handled(self, text: str) -> None:
        """Arbitrary Unicode never crashes it, and both engines agree."""
        assert FAST.scrub(text) == PURE_RE.scrub(text)

    @settings(max_examples=60, deadline=None)
    @given(st.sampled_from(CASES), st.text(alphabet=string.ascii_letters + " \n.,:()'\"",
                                           max_size=80))
    def test_secrets_are_redacted_in_any_surroundings(self, case, noise: str) -> None:  # type: ignore[no-untyped-def]
        """A corpus secret padded with arbitrary prose still never survives."""
        out = FAST.scrub(f"{noise} {case.text} {noise}")
        assert case.secret not in out
