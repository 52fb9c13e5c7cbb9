"""Fingerprints: stable across runs, line numbers and ids; distinct for distinct bugs."""

from __future__ import annotations

import random
import re
import subprocess
import sys

import pytest

from healer.core.identity import (
    call_site_from_traceback,
    fingerprint,
    identify,
    normalise_call_site,
    normalise_message,
)

ROOT = "/srv/app"


def frames(*frames: tuple[str, int, str], error: str = "KeyError: 'x'") -> str:
    body = "".join(f'  File "{p}", line {n}, in {f}\n    code()\n' for p, n, f in frames)
    return "Traceback (most recent call last):\n" + body + error + "\n"


class TestNormalisation:
    def test_placeholders(self) -> None:
        """UUIDs, timestamps and words with digits become placeholders; the rest stays."""
        msg = ("user 3f0c2a6e-8b1d-4c7e-9a5f-2d4b6c8e0a1b missing at 2024-05-01T10:00:00Z "
               "in shard7 after 3 tries")
        assert normalise_message(msg) == "user <UUID> missing at <TS> in <ID> after <ID> tries"

    def test_cut_to_500(self) -> None:
        """The normalised message is at most 500 characters."""
        assert len(normalise_message("word " * 400)) == 500

    def test_whitespace_does_not_matter(self) -> None:
        """Line breaks and runs of spaces normalise away."""
        assert normalise_message("a  b\n c") == "a b c"

    def test_same_as_the_four_plain_passes(self) -> None:
        """The faster normalisation gives what the four plain regex passes gave (so every
        fingerprint already stored stays the same): on a random mix of words, digits,
        separators, times, UUIDs and Unicode digits and spaces."""
        uuid_re = re.compile(r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-"
                             r"[0-9a-fA-F]{12}\b")
        ts_re = re.compile(
            r"\b\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:[.,]\d+)?)?(?:Z|[+-]\d{2}:?"
            r"\d{2})?)?\b|\b\d{1,2}:\d{2}:\d{2}(?:[.,]\d+)?\b")
        digit_re = re.compile(r"\w*\d\w*(?:[.:/-]\w*\d\w*)*")

        def reference(message: str) -> str:
            text = digit_re.sub("<ID>", ts_re.sub("<TS>", uuid_re.sub("<UUID>", message)))
            return re.sub(r"\s+", " ", text).strip()[:500]

        rng = random.Random(38)
        parts = ["a", "b1", "Z9", "_", "-", ".", ":", "/", " ", "\t", "\n", "\u00e9", "\u0663",
                 "\u00b2", "\x1c", "\x85", "\xa0", "\u2028", "x0", "T", "+", ",", "2024-05-01",
                 "10:00:00", "Z", "3f0c2a6e-8b1d-4c7e-9a5f-2d4b6c8e0a1b", "[REDACTED-UUID]"]
        for _ in range(20000):
            msg = "".join(rng.choice(parts) for _ in range(rng.randrange(0, 25)))
            assert normalise_message(msg) == reference(msg), repr(msg)


class TestStability:
    def test_same_bug_different_values(self) -> None:
        """Two occurrences differing in ids, times and line numbers share one fingerprint."""
        a = identify("KeyError", "row 17 has no user_id at 2024-05-01 10:00:00",
                     traceback=frames((f"{ROOT}/src/app/tools.py", 2, "lookup")), root=ROOT)
        b = identify("KeyError", "row 923 has no user_id at 2025-01-09 23:59:59",
                     traceback=frames((f"{ROOT}/src/app/tools.py", 97, "lookup")), root=ROOT)
        assert a.fingerprint == b.fingerprint
        assert a.call_site == "src/app/tools.py:lookup"

    @pytest.mark.e2e
    def test_stable_across_processes(self) -> None:
        """The fingerprint does not depend on the process (no salted hashing)."""
        code = ("from healer.core.identity import fingerprint;"
                "print(fingerprint('KeyError', 'src/a.py:f', 'no key 42'))")
        outs = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                               check=True).stdout.strip() for _ in range(2)}
        assert outs == {fingerprint("KeyError", "src/a.py:f", "no key 7")}

    def test_different_bugs_differ(self) -> None:
        """Another exception type or another function is another fingerprint."""
        base = fingerprint("KeyError", "src/a.py:f", "missing")
        assert fingerprint("ValueError", "src/a.py:f", "missing") != base
        assert fingerprint("KeyError", "src/a.py:g", "missing") != base
        assert fingerprint("KeyError", "src/a.py:f", "missing key") != base
        assert len(base) == 64 and int(base, 16) >= 0


class TestCallSite:
    def test_innermost_project_frame(self) -> None:
        """Library and standard-library frames below the project's are skipped."""
        tb = frames((f"{ROOT}/src/app/main.py", 10, "main"),
                    (f"{ROOT}/src/app/tools.py", 2, "lookup"),
                    ("/usr/lib/python3.11/site-packages/asyncpg/connection.py", 317, "execute"),
                    ("/usr/lib/python3.11/asyncio/tasks.py", 500, "wait_for"))
        assert call_site_from_traceback(tb, ROOT) == "src/app/tools.py:lookup"

    def test_relative_paths_are_the_project(self) -> None:
        """Relative frame paths (already sanitised) count as the project's."""
        tb = frames(("src/app/tools.py", 2, "lookup"), ("<frozen importlib._bootstrap>", 1,
                                                         "_call"))
        assert call_site_from_traceback(tb) == "src/app/tools.py:lookup"

    def test_only_library_frames(self) -> None:
        """Without a project frame, the innermost frame names the library file."""
        tb = frames(("/venv/lib/python3.11/site-packages/httpx/_client.py", 1, "send"))
        assert call_site_from_traceback(tb, ROOT) == "httpx/_client.py:send"

    def test_no_traceback(self) -> None:
        """No frames at all: the call site is unknown."""
        assert call_site_from_traceback("Traceback (most recent call last):...") == "<unknown>"

    def test_javascript_stack(self) -> None:
        """A JavaScript stack (innermost first) gives its innermost project frame."""
        tb = ("TypeError: x is undefined\n    at render (src/ui/view.js:12:5)\n"
              "    at node_modules/react/index.js:40:1\n")
        assert call_site_from_traceback(tb) == "src/ui/view.js:render"

    def test_caller_call_site_is_tidied(self) -> None:
        """A caller's call site loses line numbers and the repository prefix."""
        assert normalise_call_site(f"{ROOT}/src/a.py:42:handler", ROOT) == "src/a.py:handler"
        assert normalise_call_site("src/a.py:handler:42") == "src/a.py:handler"
        assert normalise_call_site("./src/a.py") == "src/a.py"

    def test_caller_call_site_wins(self) -> None:
        """When the caller names a call site, it is used as given (tidied)."""
        ident = identify("KeyError", "x", traceback=frames(("src/b.py", 1, "g")),
                         call_site="src/a.py:f")
        assert ident.call_site == "src/a.py:f"
        assert ident.short == ident.fingerprint[:12]
