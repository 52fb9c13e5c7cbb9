"""Path logic: errors name files many ways; layers match them by path, never by substring."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as hs

from healer.context.paths import clean_pattern, match, normalise


class TestNormalise:
    @pytest.mark.parametrize(("raw", "expected"), [
        ("app/payment.py", "app/payment.py"),
        ("./app/payment.py", "app/payment.py"),
        ("app/./sub/../payment.py", "app/payment.py"),
        ("app\\payment.py", "app/payment.py"),
        ("webpack:///./src/cart.ts", "src/cart.ts"),
        ("app:///static/js/main.js?v=3", "static/js/main.js"),
        ("../outside.py", ""),
        ("", ""),
        ("   ", ""),
    ])
    def test_relative_forms(self, raw: str, expected: str) -> None:
        """Relative paths, URL-ish frame names and Windows separators become repo paths."""
        assert normalise(raw) == expected

    def test_absolute_inside_the_repo_is_made_relative(self, tmp_path: Path) -> None:
        """A path under the repository root loses the root."""
        assert normalise(f"{tmp_path}/app/payment.py", tmp_path) == "app/payment.py"

    def test_deployed_copy_maps_to_the_longest_existing_suffix(self, tmp_path: Path) -> None:
        """/srv/releases/42/app/payment.py maps to app/payment.py when the repo has it."""
        (tmp_path / "app").mkdir()
        (tmp_path / "app" / "payment.py").write_text("")
        (tmp_path / "payment.py").write_text("")
        assert normalise("/srv/releases/42/app/payment.py", tmp_path) == "app/payment.py"

    def test_windows_drive_is_dropped(self) -> None:
        """C:\\build\\src\\x.py becomes build/src/x.py."""
        assert normalise("C:\\build\\src\\x.py") == "build/src/x.py"

    def test_non_strings_name_nothing(self) -> None:
        """None or numbers from a malformed payload are no file."""
        assert normalise(None) == "" and normalise(42) == ""


class TestMatch:
    @pytest.mark.parametrize(("pattern", "path", "expected"), [
        ("app/payment.py", "app/payment.py", True),
        ("app/payment.py", "old_app/payment.py", False),
        ("app/payment.py", "app/payment.py.bak", False),
        ("payment.py", "app/payment.py", False),
        ("app/*.py", "app/payment.py", True),
        ("app/*.py", "app/sub/payment.py", False),
        ("app/**/*.py", "app/payment.py", True),
        ("app/**/*.py", "app/a/b/payment.py", True),
        ("app/**", "app/a/b/c.txt", True),
        ("**/payment.py", "app/payment.py", True),
        ("app/", "app/a/b.py", True),
        ("app/", "apps/b.py", False),
        ("app/pay?ent.py", "app/payment.py", True),
        ("app/[pq]ayment.py", "app/payment.py", True),
        ("app/[!p]ayment.py", "app/payment.py", False),
        ("./app/payment.py", "app/payment.py", True),
    ])
    def test_cases(self, pattern: str, path: str, expected: bool) -> None:
        """Exact, folder, and glob matches by path component, never by substring."""
        assert match(pattern, path) is expected

    @given(hs.lists(hs.from_regex(r"[a-z]{1,6}", fullmatch=True), min_size=1, max_size=5))
    def test_a_path_always_matches_itself_and_never_a_longer_name(self, parts: list[str]
                                                                  ) -> None:
        """Any plain path matches itself and not the same path with a suffix added."""
        path = "/".join(parts) + ".py"
        assert match(path, path)
        assert not match(path, path + "x")
        assert not match(path, "x" + path)

    def test_clean_pattern_keeps_a_folder_slash(self) -> None:
        """``./app/`` is the folder app/."""
        assert clean_pattern("./app/") == "app/"
