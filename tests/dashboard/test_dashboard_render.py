"""The pure parts that keep hostile text harmless: Markdown, cutting, links, redirects."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from healer.api.dashboard.incidents import agent_runs
from healer.api.dashboard.render import MAX_VALUE, cut, markdown, render, web_url
from healer.api.dashboard.routes import _local
from healer.config import load_settings


class TestMarkdown:
    @pytest.mark.parametrize("source", [
        "<script>alert(1)</script>", "<img src=x onerror=alert(1)>",
        '<a href="javascript:alert(1)">x</a>', "<iframe src=//evil></iframe>"])
    def test_raw_html_is_text(self, source: str) -> None:
        out = markdown(source)
        assert "<script" not in out and "<img" not in out and "<iframe" not in out
        assert "&lt;" in out

    @pytest.mark.parametrize("link", ["javascript:alert(1)", "JaVaScRiPt:alert(1)",
                                      "vbscript:x", "data:text/html,<script>x</script>",
                                      "file:///etc/passwd", "//evil.example/x"])
    def test_only_safe_links_become_links(self, link: str) -> None:
        assert "href" not in markdown(f"[x]({link})")

    def test_web_and_local_links_stay(self) -> None:
        out = markdown("[a](https://example.com/r) [b](/ui/fleet) [c](mailto:ops@example.com)")
        assert out.count("href=") == 3 and 'rel="noopener noreferrer nofollow"' in out

    def test_images_are_not_loaded(self) -> None:
        assert "<img" not in markdown("![x](https://example.com/p.png)")


class TestCutting:
    def test_every_printed_value_is_cut(self) -> None:
        html = render("problem.html", request=_Req(), access=1, can_act=False, csrf="",
                      can_log_in=True, topics="", self_url="/", waiting=0, code=400,
                      reason="<b>" + "x" * (1 << 20))
        assert len(html) < 20_000 and "more characters cut" in html and "<b>x" not in html

    def test_short_values_are_untouched(self) -> None:
        assert cut("abc") == "abc" and len(cut("y" * (MAX_VALUE + 1))) < MAX_VALUE + 60


class TestLinks:
    @pytest.mark.parametrize("url", ["javascript:alert(1)", "data:,x", "ftp://x", "http://",
                                     "x" * 3000, 42])
    def test_data_links_must_be_http(self, url: object) -> None:
        assert web_url(url) == ""

    def test_http_links_pass(self) -> None:
        assert web_url("https://github.com/o/r/pull/1") == "https://github.com/o/r/pull/1"

    @pytest.mark.parametrize("target", ["//evil.example", "/\\evil.example", "https://evil",
                                        "/x\r\nSet-Cookie: a=b", "javascript:x"])
    def test_login_redirects_stay_on_this_site(self, target: str) -> None:
        assert _local(target) == "/"

    def test_local_paths_are_kept(self) -> None:
        assert _local("/ui/human?x=1") == "/ui/human?x=1"


class _Req:
    """What the base template reads of a request."""

    class url:  # mimics request.url
        path = "/"
        query = ""


class TestAgentRuns:
    def test_run_files_are_scrubbed_and_only_their_tail_is_read(self, tmp_path: Path) -> None:
        """A run's output with a secret and a 1 MB line: the secret is gone, 64 KiB are kept."""
        settings = load_settings(env={}, overrides=[f"state_dir={tmp_path}"])
        run = tmp_path / "agents" / "runs" / "run-abc"
        run.mkdir(parents=True)
        secret = "ghp_" + "a1B2" * 9
        (run / "output.log").write_text("<script>" * (1 << 17) + f"\ntoken {secret}\n")
        (run / "transcript.jsonl").write_text(json.dumps({"type": "assistant", "message": {
            "content": [{"type": "text", "text": f"using {secret}"},
                        {"type": "tool_use", "name": "Bash", "input": {"command": "ls"}}]}}))
        (tmp_path / "agents" / "runs" / "run-other").mkdir()
        [found] = agent_runs(settings, ["run-abc"])
        files = {f["name"]: f for f in found["files"]}
        assert secret not in files["output.log"]["text"] and files["output.log"]["cut"] > 0
        assert len(files["output.log"]["text"]) <= 64 * 1024
        assert files["transcript.jsonl"]["text"].startswith("assistant: using [REDACTED")
        assert "[tool Bash]" in files["transcript.jsonl"]["text"]
