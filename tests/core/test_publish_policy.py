"""Which fixes wait for a person before publication: the classifier over real git diffs.

Every diff here is made by git in a real repository, so the parser sees what the publish
steps give it (``git diff base head``): renames, deletions, mode changes, quoted paths."""

from __future__ import annotations

from pathlib import Path

import pytest

from healer.core.publish import policy
from healer.testing.git import git


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    r = tmp_path / "repo"
    files = {
        "app/cart.py": "def add(x):\n    return x + 1\n",
        "tests/test_cart.py": "from app.cart import add\n\n\ndef test_add():\n"
                              "    assert add(1) == 2\n    assert add(2) == 3\n\n\n"
                              "def test_more():\n    assert add(0) == 1\n",
        "features/cart.scenarios.yaml": "- id: S1\n",
        "README.md": "shop\n",
    }
    for name, text in files.items():
        (r / name).parent.mkdir(parents=True, exist_ok=True)
        (r / name).write_text(text)
    git(r.parent, "init", "-q", "-b", "main", str(r))
    for args in (("config", "user.email", "t@example.com"), ("config", "user.name", "T"),
                 ("add", "-A"), ("commit", "-qm", "base")):
        git(r, *args)
    return r


def change(repo: Path, files: dict[str, str | None]) -> policy.Hold:
    """Write (or delete, with None) files, commit, and classify base..HEAD."""
    base = git(repo, "rev-parse", "HEAD").strip()
    for name, text in files.items():
        path = repo / name
        if text is None:
            path.unlink()
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "fix")
    diff = git(repo, "diff", "--no-color", "--no-ext-diff", "--find-renames", base, "HEAD")
    return policy.classify(diff, config_dirs=[".healer/context"])


@pytest.mark.parametrize(("path", "category"), [
    (".github/workflows/x.yml", "ci"), ("sub/.github/CODEOWNERS", "ci"),
    (".gitlab-ci.yml", "ci"), ("Jenkinsfile", "ci"), (".circleci/config.yml", "ci"),
    (".travis.yml", "ci"), ("azure-pipelines.yml", "ci"), (".buildkite/pipeline.yml", "ci"),
    ("Makefile", "ci"), ("docker/Dockerfile", "ci"), (".pre-commit-config.yaml", "ci"),
    ("package.json", "dependencies"), ("web/package-lock.json", "dependencies"),
    ("yarn.lock", "dependencies"), ("pnpm-lock.yaml", "dependencies"),
    ("requirements-dev.txt", "dependencies"), ("pyproject.toml", "dependencies"),
    ("poetry.lock", "dependencies"), ("uv.lock", "dependencies"), ("Pipfile", "dependencies"),
    ("go.mod", "dependencies"), ("go.sum", "dependencies"), ("Cargo.toml", "dependencies"),
    ("Cargo.lock", "dependencies"), ("Gemfile.lock", "dependencies"),
    ("healer.yaml", "healer-config"), (".healer/context/invariants.yaml", "healer-config"),
    ("cto-config.json", "healer-config"), (".multifleet/config.json", "healer-config"),
    (".claude/settings.json", "healer-config"), (".mcp.json", "healer-config"),
])
def test_sensitive_paths_are_held(repo: Path, path: str, category: str) -> None:
    hold = change(repo, {path: "x: 1\n"})
    assert hold.held and hold.categories == [category], hold.reasons()
    assert any(path in r for r in hold.reasons())


def test_an_ordinary_fix_and_a_new_test_are_not_held(repo: Path) -> None:
    hold = change(repo, {
        "app/cart.py": "def add(x):\n    return int(x) + 1\n",
        "tests/test_cart.py": (repo / "tests/test_cart.py").read_text()
        + "\n\ndef test_strings():\n    assert add('1') == 2\n",
        "docs/healer.yaml": "not the config: it is not at the root\n"})
    assert not hold.held, hold.reasons()


@pytest.mark.parametrize(("files", "why"), [
    ({"tests/test_cart.py": None}, "a test file was deleted"),
    ({"tests/test_cart.py": "from app.cart import add\n\n\ndef test_add():\n"
                            "    assert add(1) == 2\n"}, "test definition(s) removed"),
    ({"tests/test_cart.py": "from app.cart import add\n\n\ndef test_add():\n"
                            "    add(1)\n    add(2)\n\n\ndef test_more():\n"
                            "    assert add(0) == 1\n"}, "2 assertion(s) fewer"),
    ({"tests/test_cart.py": "import pytest\nfrom app.cart import add\n\n\n"
                            "@pytest.mark.skip(reason='flaky')\ndef test_add():\n"
                            "    assert add(1) == 2\n    assert add(2) == 3\n\n\n"
                            "def test_more():\n    assert add(0) == 1\n"},
     "a skip, xfail or .only added"),
    ({"features/cart.scenarios.yaml": "- id: S1\n  test_command: 'true'\n"},
     "a scenario file changed"),
    ({"pytest.ini": "[pytest]\naddopts = -k nothing\n"},
     "the test runner's configuration changed"),
])
def test_weakened_tests_are_held(repo: Path, files: dict[str, str | None], why: str) -> None:
    hold = change(repo, files)
    assert hold.categories == ["tests"], hold.reasons()
    assert any(why in r for r in hold.reasons()), hold.reasons()


def test_a_test_moved_out_of_the_tests_is_held(repo: Path) -> None:
    git(repo, "mv", "tests/test_cart.py", "app/cart_check.py")
    hold = change(repo, {})
    assert any("moved out of the tests" in r for r in hold.reasons()), hold.reasons()


def test_the_pr_section_says_why_and_who() -> None:
    text = policy.pr_section(["touches CI or automation: .github/workflows/x.yml (matches "
                              ".github/)"], by="alice", via="cli", at="2026-12-05 10:00:00 UTC",
                             comment="checked the workflow")
    assert "Held for a person's approval" in text and ".github/workflows/x.yml" in text
    assert "approved by **alice** (via cli)" in text and "> checked the workflow" in text
