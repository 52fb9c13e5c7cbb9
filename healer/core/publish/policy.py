"""Which fixes a person must see before they are published: the diff's paths and lines decide.

A fix the healing agent wrote is as untrusted as the text that reached it. Before a PR is
opened (both code roads' publish step) its unified diff is classified; any finding holds the
fix (attempt ``awaiting_approval``, the branch kept) until a person approves publication
(``healer.core.approval``, stage ``publish``); the PR then says why it was held and who
approved.

================  ===================================================  ============================
category          paths (a name matches at any depth; ``dir/`` any      why it needs a person
                  file below a folder of that name; ``/x`` from the
                  repository root)
================  ===================================================  ============================
``ci``            ``.github/`` (workflows, actions, CODEOWNERS,         runs in CI with its secrets,
                  dependabot), ``.gitlab-ci.yml``, ``.gitlab/``,        or on every developer's
                  ``Jenkinsfile*``, ``.circleci/``, ``.travis.yml``,    machine, without a code
                  ``azure-pipelines.yml``, ``.azure-pipelines/``,       path anyone reviews for it
                  ``.buildkite/``, ``bitbucket-pipelines.yml``,
                  ``.drone.yml``, ``.woodpecker.yml``, ``.woodpecker/``,
                  ``appveyor.yml``, ``.cirrus.yml``, ``cloudbuild.yaml``,
                  ``buildspec.yml``, ``.semaphore/``; build automation
                  CI runs: ``Makefile``, ``GNUmakefile``, ``*.mk``,
                  ``Dockerfile*``, ``Containerfile``, ``tox.ini``,
                  ``noxfile.py``, ``justfile``, ``Taskfile.yml``;
                  hooks and tool set-up: ``.pre-commit-config.yaml``,
                  ``.husky/``, ``.githooks/``, ``lefthook.yml``,
                  ``.gitattributes``, ``.devcontainer/``, ``.vscode/``
``dependencies``  manifests and lock files: ``package.json``,           what gets downloaded and
                  ``package-lock.json``, ``npm-shrinkwrap.json``,       executed at install (a
                  ``yarn.lock``, ``pnpm-lock.yaml``, ``bun.lock*``,     typo-squatted package, a
                  ``.npmrc``, ``.yarnrc*``, ``requirements*.txt``,      post-install script, an
                  ``constraints*.txt``, ``requirements/``,              index URL)
                  ``pyproject.toml``, ``setup.py``, ``setup.cfg``,
                  ``poetry.lock``, ``uv.lock``, ``pdm.lock``,
                  ``Pipfile*``, ``pip.conf``, ``environment.yml``,
                  ``go.mod``, ``go.sum``, ``go.work*``, ``Cargo.toml``,
                  ``Cargo.lock``, ``Gemfile*``, ``*.gemspec``,
                  ``composer.json``, ``composer.lock``, ``pom.xml``,
                  ``build.gradle*``, ``settings.gradle*``,
                  ``gradle.properties``, ``gradle/wrapper/``,
                  ``mix.exs``, ``mix.lock``, ``Package.swift``,
                  ``Package.resolved``, ``Podfile*``, ``*.csproj``,
                  ``packages.config``, ``Directory.*.props``,
                  ``nuget.config``, ``pubspec.*``, ``deno.json*``,
                  ``deno.lock``, ``flake.nix``, ``flake.lock``
``healer-config`` healer's and its agents' own configuration:           it decides what healer and
                  ``healer.yaml``/``.yml``, ``.healer/``,               the next agents do: gates,
                  ``cto-config.json``, ``.multifleet/``,                executors, hooks, prompts
                  ``.fleet-messages/``, the living-context folder
                  (``context.dir``), ``.mcp.json``, ``.claude/``,
                  ``CLAUDE.md``, ``AGENTS.md``
``tests``         a deleted test file; a test file whose change         a fix must not pass by
                  removes test functions or more assertions than it     editing the checks that
                  adds; an added skip, xfail or ``.only`` in a test     judge it
                  file; any change to a scenario file
                  (``*.scenarios.yaml``) or a test runner's
                  configuration (``pytest.ini``, ``conftest.py``
                  deletions, ``jest.config.*``, ``vitest.config.*``,
                  ``karma.conf.*``, ``.mocharc*``, ``phpunit.xml*``,
                  ``.coveragerc``)
================  ===================================================  ============================

Test files are found by their path: a folder named ``tests``, ``test``, ``__tests__``,
``spec`` or ``e2e``, or a name like ``test_*.py``, ``*_test.py``, ``conftest.py``,
``*_test.go``, ``*.test.ts``/``*.spec.js`` (any JS/TS extension), ``*Test.java``,
``*Tests.cs``, ``*_spec.rb``. **What the heuristic cannot see**: a test whose expected value
changed (one assertion for another), a test made meaningless without removing its assert, a
check that lives outside any test file. That is why the verifier runs the base branch's
checks, not the agent's. A fix that only adds tests, or edits them keeping their functions
and assertions, is not held.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import Any

CI, DEPENDENCIES, HEALER_CONFIG, TESTS = "ci", "dependencies", "healer-config", "tests"
CATEGORIES = (CI, DEPENDENCIES, HEALER_CONFIG, TESTS)
DESCRIBE = {
    CI: "touches CI or automation",
    DEPENDENCIES: "changes dependency manifests or lock files",
    HEALER_CONFIG: "changes healer's or its agents' configuration",
    TESTS: "deletes or weakens tests or scenario files",
}

# A pattern ending in "/" is a folder name at any depth (or, with a leading "/", from the
# root); one with "/" inside is a path from the root; otherwise a file name at any depth.
_PATHS: dict[str, tuple[str, ...]] = {
    CI: (
        ".github/", ".gitlab-ci.yml", ".gitlab/", "Jenkinsfile", "Jenkinsfile.*", "*.jenkinsfile",
        ".circleci/", ".travis.yml", "azure-pipelines.yml", "azure-pipelines.yaml",
        ".azure-pipelines/", ".buildkite/", "bitbucket-pipelines.yml", ".drone.yml",
        ".woodpecker.yml", ".woodpecker/", "appveyor.yml", ".appveyor.yml", ".cirrus.yml",
        "cloudbuild.yaml", "cloudbuild.yml", "buildspec.yml", ".semaphore/",
        "Makefile", "makefile", "GNUmakefile", "*.mk", "Dockerfile", "Dockerfile.*",
        "*.Dockerfile", "*.dockerfile", "Containerfile", "tox.ini", "noxfile.py", "justfile",
        "Justfile", "Taskfile.yml", "Taskfile.yaml",
        ".pre-commit-config.yaml", ".pre-commit-hooks.yaml", ".husky/", ".githooks/",
        "lefthook.yml", ".lefthook.yml", ".gitattributes", ".devcontainer/", ".vscode/",
    ),
    DEPENDENCIES: (
        "package.json", "package-lock.json", "npm-shrinkwrap.json", "yarn.lock",
        "pnpm-lock.yaml", "pnpm-workspace.yaml", "bun.lock", "bun.lockb", ".npmrc", ".yarnrc",
        ".yarnrc.yml", ".pnpmfile.cjs", "deno.json", "deno.jsonc", "deno.lock",
        "requirements*.txt", "requirements*.in", "constraints*.txt", "requirements/",
        "pyproject.toml", "setup.py", "setup.cfg", "poetry.lock", "uv.lock", "pdm.lock",
        "Pipfile", "Pipfile.lock", "pip.conf", "environment.yml", "environment.yaml",
        "go.mod", "go.sum", "go.work", "go.work.sum", "Cargo.toml", "Cargo.lock",
        "rust-toolchain", "rust-toolchain.toml", "Gemfile", "Gemfile.lock", "*.gemspec",
        "composer.json", "composer.lock", "pom.xml", "build.gradle", "build.gradle.kts",
        "settings.gradle", "settings.gradle.kts", "gradle.properties", "gradle/wrapper/",
        ".mvn/", "mix.exs", "mix.lock", "Package.swift", "Package.resolved", "Podfile",
        "Podfile.lock", "Cartfile", "Cartfile.resolved", "*.csproj", "*.fsproj", "*.vbproj",
        "packages.config", "packages.lock.json", "Directory.Packages.props",
        "Directory.Build.props", "nuget.config", "NuGet.Config", "global.json",
        "pubspec.yaml", "pubspec.lock", "flake.nix", "flake.lock", "vcpkg.json",
    ),
    HEALER_CONFIG: (
        "/healer.yaml", "/healer.yml", ".healer/", "cto-config.json", ".multifleet/",
        ".fleet-messages/", ".mcp.json", ".claude/", "CLAUDE.md", "AGENTS.md",
    ),
}
_SCENARIO_FILES = ("*.scenarios.yaml", "*.scenarios.yml")
_TEST_CONFIG = ("pytest.ini", "jest.config.*", "vitest.config.*", "karma.conf.*", ".mocharc*",
                "phpunit.xml", "phpunit.xml.dist", ".coveragerc")
_TEST_DIRS = frozenset({"tests", "test", "__tests__", "spec", "specs", "e2e"})
_TEST_NAMES = ("test_*.py", "*_test.py", "conftest.py", "*_test.go", "*Test.java",
               "*Tests.java", "*Test.kt", "*Tests.cs", "*Test.cs", "*_spec.rb", "*_test.rb",
               "*Test.php", "*.test.*", "*.spec.*")

_TEST_DEF = re.compile(r"^\s*(?:async\s+)?def\s+test\w*\s*\(|^\s*func\s+(?:Test|Benchmark)\w*\("
                       r"|^\s*(?:it|test|describe)\s*\(|^\s*@Test\b|^\s*def\s+test_\w*\b"
                       r"|^\s*class\s+Test\w*|^\s*\[(?:Test|Fact|Theory)\]")
_ASSERTION = re.compile(r"\bassert\w*\b|\bexpect\s*\(|\brequire\.\w+\(|\bt\.(?:Errorf?|Fatalf?|"
                        r"Fail(?:Now)?)\(|\.should\b|\bpytest\.raises\b|\bself\.fail\(|"
                        r"\bAssert\.\w+\(")
_SKIP = re.compile(r"@pytest\.mark\.(?:skip|skipif|xfail)\b|\bpytest\.(?:skip|xfail|importorskip)"
                   r"\s*\(|@unittest\.(?:skip\w*|expectedFailure)\b|\bself\.skipTest\(|"
                   r"\b(?:it|test|describe|context)\.(?:skip|todo|only)\s*\(|"
                   r"\bx(?:it|describe|test)\s*\(|\bf(?:it|describe)\s*\(|"
                   r"\bt\.Skip(?:Now|f)?\(|@(?:Disabled|Ignore)\b|\[(?:Ignore|Skip)\b|"
                   r"\bskip\s*[:=]\s*(?:true|True)\b|\.only\s*\(")

_HEADER = re.compile(r'^diff --git (?:"?a/(?P<a>.+?)"?) (?:"?b/(?P<b>.+?)"?)$')


@dataclass(frozen=True)
class Finding:
    """One reason a fix waits: its category, the path and what about it."""

    category: str
    path: str
    why: str

    def text(self) -> str:
        return f"{DESCRIBE[self.category]}: {self.path} ({self.why})"


@dataclass(frozen=True)
class Hold:
    """The verdict on one diff: held when it has findings."""

    findings: tuple[Finding, ...] = ()

    @property
    def held(self) -> bool:
        return bool(self.findings)

    @property
    def categories(self) -> list[str]:
        return [c for c in CATEGORIES if any(f.category == c for f in self.findings)]

    def reasons(self) -> list[str]:
        """One line per finding (at most 50), for records, status and the PR."""
        return [f.text() for f in self.findings[:50]]

    def as_dict(self) -> dict[str, Any]:
        return {"categories": self.categories, "reasons": self.reasons()}


@dataclass
class _File:
    old: str = ""
    new: str = ""
    deleted: bool = False
    added: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)

    @property
    def paths(self) -> list[str]:
        return list(dict.fromkeys(p for p in (self.new, self.old) if p))


def _files(diff: str) -> list[_File]:
    out: list[_File] = []
    cur: _File | None = None
    in_hunk = False
    for line in diff.splitlines():
        if line.startswith("diff --git "):
            cur = _File()
            out.append(cur)
            in_hunk = False
            m = _HEADER.match(line)
            if m:
                cur.old, cur.new = m.group("a"), m.group("b")
            continue
        if cur is None:
            continue
        if line.startswith("@@"):
            in_hunk = True
        elif not in_hunk:
            if line.startswith("deleted file mode"):
                cur.deleted = True
            elif line.startswith("rename from "):
                cur.old = line[len("rename from "):]
            elif line.startswith("rename to "):
                cur.new = line[len("rename to "):]
            elif line.startswith("--- "):
                cur.old = _side(line[4:], "a/") or cur.old
            elif line.startswith("+++ "):
                side = _side(line[4:], "b/")
                if side is None:
                    cur.deleted = True
                else:
                    cur.new = side
        elif line.startswith("+"):
            cur.added.append(line[1:])
        elif line.startswith("-"):
            cur.removed.append(line[1:])
    for f in out:
        if f.deleted:
            f.new = ""
    return out


def _side(text: str, prefix: str) -> str | None:
    text = text.strip().strip('"')
    if text == "/dev/null":
        return None
    return text[len(prefix):] if text.startswith(prefix) else text


def _matches(path: str, pattern: str) -> bool:
    parts = path.split("/")
    if pattern.endswith("/"):
        folder = pattern.rstrip("/")
        if folder.startswith("/"):
            return path.startswith(folder[1:] + "/")
        if "/" in folder:
            return path.startswith(folder + "/") or f"/{folder}/" in f"/{path}"
        return folder in parts[:-1]
    if pattern.startswith("/"):
        return fnmatchcase(path, pattern[1:])
    if "/" in pattern:
        return fnmatchcase(path, pattern)
    return fnmatchcase(parts[-1], pattern)


def is_test_file(path: str) -> bool:
    parts = path.split("/")
    return bool(_TEST_DIRS.intersection(parts[:-1])) or any(
        fnmatchcase(parts[-1], p) for p in _TEST_NAMES)


def _count(lines: Iterable[str], pattern: re.Pattern[str]) -> int:
    return sum(1 for line in lines if pattern.search(line))


def _tests(f: _File) -> list[str]:
    """Why a change to a test, scenario or test-config file weakens the checks, if it does."""
    path = f.new or f.old
    name = path.rsplit("/", 1)[-1]
    if any(fnmatchcase(name, p) for p in _SCENARIO_FILES):
        return ["a scenario file changed" if not f.deleted else "a scenario file was deleted"]
    if any(fnmatchcase(name, p) for p in _TEST_CONFIG):
        return ["the test runner's configuration changed"]
    was_test = bool(f.old) and is_test_file(f.old)
    if was_test and (f.deleted or not is_test_file(f.new)):
        return ["a test file was deleted" if f.deleted else "a test file was moved out of the "
                "tests"]
    if not is_test_file(path):
        return []
    why = []
    gone = _count(f.removed, _TEST_DEF) - _count(f.added, _TEST_DEF)
    if gone > 0:
        why.append(f"{gone} test definition(s) removed")
    weaker = _count(f.removed, _ASSERTION) - _count(f.added, _ASSERTION)
    if weaker > 0:
        why.append(f"{weaker} assertion(s) fewer")
    if _count(f.added, _SKIP):
        why.append("a skip, xfail or .only added")
    return why


def classify(diff: str, *, config_dirs: Iterable[str] = ()) -> Hold:
    """The findings of one unified diff (``git diff base head``). ``config_dirs``: more
    repository-relative folders that hold healer's configuration (the living context when
    ``context.dir`` lies inside the repository)."""
    extra = tuple(d.strip("/") + "/" for d in config_dirs if d.strip("/ ."))
    findings: list[Finding] = []
    for f in _files(diff):
        for path in f.paths:
            for category, patterns in _PATHS.items():
                hit = next((p for p in patterns if _matches(path, p)), None)
                if hit is None and category == HEALER_CONFIG:
                    hit = next((d for d in extra if path.startswith(d)), None)
                if hit is not None:
                    findings.append(Finding(category, path, f"matches {hit.lstrip('/')}"))
        findings += [Finding(TESTS, f.new or f.old, why) for why in _tests(f)]
    unique = list(dict.fromkeys(findings))
    return Hold(tuple(unique))


def pr_section(reasons: list[str], *, by: str, via: str, at: str, comment: str = "") -> str:
    """The PR's account of the hold: why it waited and who let it through."""
    lines = ["", "### Held for a person's approval", "",
             "healer held this fix before publishing it, because it:", ""]
    lines += [f"- {r}" for r in reasons] or ["- (no reason recorded)"]
    lines += ["", f"Publication approved by **{by}** (via {via}) at {at}."]
    if comment:
        lines += ["", "> " + "\n> ".join(comment.splitlines())]
    lines += ["", "Review these parts with particular care: they run with more privileges "
              "than the code they fix, or decide how it is checked."]
    return "\n".join(lines) + "\n"
