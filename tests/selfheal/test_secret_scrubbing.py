"""The scrubber against the secret corpus, and the validator's independent second pass."""

from __future__ import annotations

import random

import pytest
from secret_corpus import BENIGN, BY_ID, CATEGORIES, FORMS, NEAR_MISSES, Form

from healer.core.publish import AnonymizationError, Sanitizer, ensure_publishable, entropy, validate

HYPERSCAN = Sanitizer()
LITERAL = Sanitizer(prefilter="literal")
REFERENCE = Sanitizer(prefilter=False)
IDS = [f.id for f in FORMS]


def leaked(form: Form, text: str) -> list[str]:
    return [s for s in form.secrets if s in text]


class TestCorpus:
    def test_corpus_covers_the_categories(self) -> None:
        """At least 80 forms across every category the issue names, 40+ benign strings."""
        assert len(FORMS) >= 80
        assert set(CATEGORIES) >= {"keyword", "generic", "provider", "cloud", "cli", "header",
                                   "private-key", "split", "pii"}
        assert len(BENIGN) >= 40
        for needed in ("gen-encryption-key", "gen-x", "azure-storage-account-key",
                       "azure-service-bus-key", "twilio-api-key", "mailgun-key",
                       "kw-private-key-id", "iban-de", "netrc-one-line", "mysql-p-attached",
                       "kw-json-escaped", "split-wrapped-log"):
            assert needed in BY_ID


class TestScrub:
    @pytest.mark.parametrize("form", FORMS, ids=IDS)
    def test_every_form_is_redacted(self, form: Form) -> None:
        """No raw secret survives, and a marker of the expected kind stands in its place."""
        out = HYPERSCAN.scrub(form.text)
        assert leaked(form, out) == []
        assert f"[REDACTED-{form.kind}]" in out

    @pytest.mark.parametrize("form", FORMS, ids=IDS)
    def test_scrubbed_text_passes_the_whole_validator(self, form: Form) -> None:
        """What the scrubber leaves is publishable: no rule and not the census finds more."""
        assert validate(HYPERSCAN.scrub(form.text)) == []

    @pytest.mark.parametrize("form", FORMS, ids=IDS)
    def test_prefilters_change_nothing(self, form: Form) -> None:
        """Hyperscan census, literal gates and no pre-filter at all give the same text."""
        out = REFERENCE.scrub(form.text)
        assert HYPERSCAN.scrub(form.text) == out
        assert LITERAL.scrub(form.text) == out

    def test_all_forms_in_one_report(self) -> None:
        """Every form at once, one after another, is redacted just the same."""
        text = "\n".join(f.text for f in FORMS)
        out = HYPERSCAN.scrub(text)
        assert [f.id for f in FORMS if leaked(f, out)] == []
        assert HYPERSCAN.scrub(out) == out

    def test_structure_stays_readable(self) -> None:
        """Names, syntax and the rest of the line stay around the marker."""
        assert HYPERSCAN.scrub(BY_ID["kw-json-escaped"].text).endswith(
            '\\"password\\": \\"[REDACTED-SECRET]\\"}"')
        mysql = HYPERSCAN.scrub(BY_ID["mysql-p-attached"].text)
        assert "mysql -uroot -p[REDACTED-SECRET] -h 127.0.0.1 app" in mysql
        azure = HYPERSCAN.scrub(BY_ID["azure-storage-account-key"].text)
        assert "AccountKey=[REDACTED-SECRET];EndpointSuffix=" in azure
        assert "No such bank account [REDACTED-IBAN]" in HYPERSCAN.scrub(BY_ID["iban-de"].text)


class TestBenign:
    @pytest.mark.parametrize("text", BENIGN)
    def test_debugging_text_survives(self, text: str) -> None:
        """Paths, line numbers, exception names, git SHAs, ports, localhost stay as they are,
        and the validator lets them out."""
        assert HYPERSCAN.scrub(text) == text
        assert REFERENCE.scrub(text) == text
        assert validate(text) == []

    def test_old_harmless_corpus_still_survives(self) -> None:
        """Nothing the first corpus called harmless is redacted now."""
        from selfheal_corpus import HARMLESS

        assert [t for t in HARMLESS if HYPERSCAN.scrub(t) != t] == []


class TestValidator:
    @pytest.mark.parametrize("form", FORMS, ids=IDS)
    def test_blocks_every_raw_form(self, form: Form) -> None:
        """With the scrubber bypassed, the validator refuses the text — by kind, never value."""
        with pytest.raises(AnonymizationError) as err:
            ensure_publishable(form.text, "pr body")
        assert leaked(form, str(err.value)) == []
        assert all(leaked(form, f.hint) == [] for f in err.value.findings)

    @pytest.mark.parametrize("form", [f for f in FORMS if f.census],
                             ids=[f.id for f in FORMS if f.census])
    def test_the_census_alone_blocks_random_forms(self, form: Form) -> None:
        """The second pass works without any rule: its entropy census alone flags a span that
        covers the secret."""
        spans = list(entropy.census(form.text))
        secret_at = form.text.index(form.secrets[0])
        assert any(s <= secret_at < e or secret_at <= s < secret_at + len(form.secrets[0])
                   for s, e in spans), spans

    def test_census_covers_most_of_the_corpus(self) -> None:
        """Most forms are random enough for the census; the rest have rules of their own
        (IBAN checksums, short human passwords, PEM headers)."""
        assert sum(f.census for f in FORMS) >= 0.75 * len(FORMS)

    def test_what_the_scrubber_misses_the_validator_blocks(self) -> None:
        """A key in a shape no rule knows, outside any assignment and too short for the
        scrubber's own entropy rule, survives scrubbing — and is blocked at publish time."""
        text = "upstream refused the request, reference Xk29fLq0aB3m7Qp2Zr8W; retry later"
        scrubbed = HYPERSCAN.scrub(text)
        assert "Xk29fLq0aB3m7Qp2Zr8W" in scrubbed  # the first pass has no rule for it
        assert HYPERSCAN.findings(scrubbed, entropy_census=False) == []
        kinds = {f.kind for f in validate(scrubbed)}
        assert kinds == {entropy.KIND}
        with pytest.raises(AnonymizationError, match="HIGH-ENTROPY"):
            ensure_publishable(scrubbed, "healing prompt")

    def test_census_lets_ordinary_outbound_text_through(self) -> None:
        """Diffs, commit lists, digests, fingerprints and run paths are not random enough."""
        fp = "76348d7253418f6dfc4d0e1af2a97812fa014ec81a7bba1dbe64fc0ea23f0247"
        text = "\n".join([
            "diff --git a/src/app/tools.py b/src/app/tools.py",
            "index 3f2a9c1d8e..8e7b6a5f4e 100644",
            "--- a/src/app/tools.py", "+++ b/src/app/tools.py",
            "@@ -1,2 +1,2 @@", " def lookup(row):", '-    return row["user_id"]',
            '+    return row.get("user_id")',
            "57663265411e2125f92f337e5c8c544ed71430ea fix: tolerate rows without user_id",
            f"fingerprint `{fp}`, branch `healing/{fp[:12]}-a1b2c3`",
            f"result file: `<run-path>/heal-healing-{fp}-1714557600.json`",
            "integrity sha512-" + "Ab3" * 20, "see https://github.com/python/cpython/commit/"
            "96d37dbcd23e65a7a57819aeced9034296aaaaaa",
            "<app.db.Pool object at 0x00007f3a9c1d8e7b>",
        ])
        assert list(entropy.census(text)) == []


# Found by fuzzing: each used to change on a second scrub, or differ between engines.
GLUED = (
    "svc.internal.testEhh36nBxkJiTvAOXOPx86_64-linux-gnu",
    "HtjNXmbiAQdNCv2yUCybF8o5VpndpointSuffix=core.windows.net",
    "logs/20240501T100000-a1b2c3d4.logt_11ABCDEFG0123456789_abcdefghij::8a2e:370:7334",
    "EndpointSuffix=core.windows.net3c:22:fb:1a:7e:09 on eth0",
    "invalid_client for 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re@7.24.5/node_modules/x.js",
    "'api_key'DE89ssword' => 'pa55-daKQny6Fia7']",
)


class TestGluedPieces:
    @pytest.mark.parametrize("text", GLUED)
    def test_glued_pieces_scrub_once_for_all(self, text: str) -> None:
        """Secrets glued to hosts, addresses and names: one scrub is final, on every engine."""
        out = REFERENCE.scrub(text)
        assert HYPERSCAN.scrub(text) == out and LITERAL.scrub(text) == out
        assert HYPERSCAN.scrub(out) == out
        assert HYPERSCAN.findings(out, entropy_census=False) == []

    def test_random_concatenations_of_the_corpus(self) -> None:
        """Pieces of forms and benign strings run together at random: engines agree, a second
        scrub changes nothing, no rule finds anything in the result."""
        rng = random.Random(1313)
        pieces = ([f.text for f in FORMS] + BENIGN + NEAR_MISSES
                  + ["\n", " ", "=", ":", '"', "\\", "İß"])
        for _ in range(300):
            parts = [rng.choice(pieces) for _ in range(rng.randint(1, 5))]
            text = "".join(p[rng.randrange(len(p)):] if rng.random() < 0.3 else p for p in parts)
            out = REFERENCE.scrub(text)
            assert HYPERSCAN.scrub(text) == out and LITERAL.scrub(text) == out, text
            assert HYPERSCAN.scrub(out) == out, text
            assert HYPERSCAN.findings(out, entropy_census=False) == [], text
