"""Tokens in URL paths and passwords inside argv quoting: the scrubber and the validator agree.

Found in peers' test suites (issue 35): a Telegram token in ``/bot<id>:<token>/sendMessage``
and ``['mysql', '-u', 'root', '-pSECRET']`` as ``CalledProcessError`` prints it. The forms
are the ``url-path`` and ``cli`` rows of ``secret_corpus`` (the corpus-wide tests run them
too); here: the validator's rules alone find each in the raw text, nothing of it is left after
scrubbing, the route or argv around it stays readable, and the near misses stay intact.
"""

from __future__ import annotations

import pytest
from secret_corpus import BENIGN, BY_ID, FORMS, NEAR_MISSES, Form

from healer.core.publish import AnonymizationError, Sanitizer, ensure_publishable, validate

HYPERSCAN = Sanitizer()
LITERAL = Sanitizer(prefilter="literal")
REFERENCE = Sanitizer(prefilter=False)
NEW = [f for f in FORMS if f.category == "url-path"] + [
    BY_ID[i] for i in (
        "mysql-argv-list", "mysql-json-array", "mysql-shell-quoted", "mariadb-dump-json-escaped",
        "password-equals-argv", "password-two-argv-items", "sshpass-argv", "docker-login-argv",
        "redis-cli-argv", "curl-user-argv", "mongosh-p", "ldapsearch-w", "sqlcmd-P",
        "keytool-storepass", "7z-p-attached", "token-flag-quoted", "secret-flag-argv",
        "pgpassword-argv")]


def _covered(form: Form, spans: list[tuple[int, int]]) -> list[str]:
    """The secrets of ``form`` that no span covers entirely."""
    missed = []
    for secret in form.secrets:
        at = form.text.index(secret)
        if not any(s <= at and at + len(secret) <= e for s, e in spans):
            missed.append(secret)
    return missed


class TestScrubberAndValidatorAgree:
    @pytest.mark.parametrize("form", NEW, ids=[f.id for f in NEW])
    def test_the_validator_finds_it_raw_and_nothing_is_left_after_scrubbing(
            self, form: Form) -> None:
        """The rules alone (no entropy census) cover each secret in the raw text, so the
        validator blocks it even where the census would not; scrubbed, no secret is left and
        the whole validator lets the text out."""
        rules = HYPERSCAN.findings(form.text, entropy_census=False)
        assert _covered(form, [(f.start, f.end) for f in rules]) == []
        with pytest.raises(AnonymizationError):
            ensure_publishable(form.text, "pr body")
        out = HYPERSCAN.scrub(form.text)
        assert [s for s in form.secrets if s in out] == []
        assert f"[REDACTED-{form.kind}]" in out
        assert validate(out) == []
        assert HYPERSCAN.scrub(out) == out

    @pytest.mark.parametrize("form", NEW, ids=[f.id for f in NEW])
    def test_every_engine_scrubs_it_the_same(self, form: Form) -> None:
        out = REFERENCE.scrub(form.text)
        assert HYPERSCAN.scrub(form.text) == out
        assert LITERAL.scrub(form.text) == out


def _scrub(form_id: str) -> str:
    return HYPERSCAN.scrub(BY_ID[form_id].text)


class TestStructureStaysReadable:
    def test_telegram_token_goes_the_method_stays(self) -> None:
        """Whatever the token's shape, on any host: ``/bot[…]/sendMessage``."""
        assert _scrub("telegram-path-any-shape").endswith("/bot[REDACTED-API-KEY]/sendMessage'")
        assert "/file/bot[REDACTED-API-KEY]/photos/file_12.jpg: 404" in _scrub(
            "telegram-file-path")
        assert ("http://127.0.0.1:8081/bot[REDACTED-API-KEY]/getUpdates?timeout=30"
                in _scrub("telegram-local-bot-api"))

    def test_webhook_and_segment_tokens_keep_the_route(self) -> None:
        assert ('"POST /api/webhooks/112233445566778899/[REDACTED-TOKEN] HTTP/1.1" 401'
                in _scrub("discord-webhook-path"))
        assert ("POST /services/T0ABCDEF1/B0ABCDEF2/[REDACTED-TOKEN] (hooks)"
                in _scrub("slack-webhook-path"))
        assert "GET /v1/token/[REDACTED-TOKEN]/refresh" in _scrub("path-token-segment")
        assert "/trigger/deploy/with/key/[REDACTED-TOKEN]" in _scrub("ifttt-key-segment")
        assert "&key=[REDACTED-SECRET]'" in _scrub("query-key")
        assert _scrub("discord-webhook-versioned").endswith("404 POST [REDACTED-WEBHOOK-URL]")

    def test_argv_items_keep_their_quotes_and_neighbours(self) -> None:
        assert ("Command '['mysql', '-u', 'root', '-p[REDACTED-SECRET]', 'app']' returned"
                in _scrub("mysql-argv-list"))
        assert '["mysql","-h","db","-p[REDACTED-SECRET]"], "rc": 1}' in _scrub(
            "mysql-json-array")
        assert "mysql -u root '-p[REDACTED-SECRET]' app: Access denied" in _scrub(
            "mysql-shell-quoted")
        assert '[\\"mariadb-dump\\", \\"-p[REDACTED-SECRET]\\", \\"shop\\"]' in _scrub(
            "mariadb-dump-json-escaped")
        assert "['sshpass', '-p', '[REDACTED-SECRET]', 'ssh', 'deploy@127.0.0.1']" in _scrub(
            "sshpass-argv")
        assert "'--password', '[REDACTED-SECRET]']' returned" in _scrub(
            "password-two-argv-items")
        assert '"--token=[REDACTED-SECRET]" "--api-key=[REDACTED-SECRET]"' in _scrub(
            "token-flag-quoted")
        assert "-p'[REDACTED-SECRET]' shop" in _scrub("mysqldump-p-quoted")


class TestNearMisses:
    @pytest.mark.parametrize("text", NEAR_MISSES)
    def test_ports_plugins_prompts_routes_and_password_files_survive(self, text: str) -> None:
        """``-p`` as a port (ssh, docker, uvicorn, redis-cli) or a plugin (pytest), mysql's
        prompting ``-p``, ``$VAR``, ``/bot/`` with no token, ``/tokens/revoke``, a password
        *file*'s path, ``--password-stdin``, ``?key=users``: unchanged, and publishable."""
        assert HYPERSCAN.scrub(text) == text
        assert REFERENCE.scrub(text) == text
        assert validate(text) == []

    def test_the_benign_corpus_is_whole(self) -> None:
        """The 55 debugging strings are all still there (the corpus test checks each)."""
        assert len(BENIGN) == 55

    def test_a_short_query_key_is_a_field_a_long_one_a_secret(self) -> None:
        """``key`` alone names a secret only as a query parameter with a value an API key
        could be (16+ characters)."""
        assert HYPERSCAN.scrub("GET /items?key=user_42") == "GET /items?key=user_42"
        long = "GET /items?key=Zq8mW3kP0aB7tR2yLx5N"
        assert HYPERSCAN.scrub(long) == "GET /items?key=[REDACTED-SECRET]"
