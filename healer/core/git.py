"""Running git: the one helper, inert by construction, and its error.

Core, because the healing clones (``healer.selfheal.worktree``), the forge that pushes their
branches (``healer.core.publish.forge``), the living context and the fleet's git channel all
run git. Every git command healer runs goes through ``git()`` or ``git_async()``, and neither
lets git run anything a repository, the machine or healer's own environment asks for:

1. **An environment from an allow-list** (``ENV_ALLOW``: ``PATH``, locale, ``TZ``, ``TMPDIR``,
   TLS trust and proxy variables). Nothing else is inherited: no ``GIT_*`` (``GIT_DIR``,
   ``GIT_SSH_COMMAND``, ``GIT_CONFIG_PARAMETERS`` …), no ``SSH_AUTH_SOCK``, no askpass, no token.
   ``HOME`` points nowhere, so neither ``~/.gitconfig``, ``~/.config/git/*`` nor ``~/.netrc``
   is read; no terminal prompt (``GIT_TERMINAL_PROMPT=0``).
2. **No system or global config**: ``GIT_CONFIG_NOSYSTEM=1``, ``GIT_CONFIG_GLOBAL=/dev/null``.
3. **Overrides on the command line** (``OVERRIDES``; ``-c`` beats every config file and what it
   includes): no hooks (``core.hooksPath=/dev/null``), no fsmonitor, no credential helper, no
   askpass, ssh command, pager or editor, protocols ``file`` and ``http(s)`` only, no background
   gc or maintenance, no submodule recursion, no signing or signature checks, no global
   attributes or excludes file.
4. **What config can name but ``-c`` cannot switch off** (``filter.<driver>``,
   ``diff.<driver>.textconv``, ``url.<base>.insteadOf``): diffs pass ``--no-ext-diff`` and
   ``--no-textconv``, and healer runs work-tree commands and pushes only in git dirs whose config
   it wrote itself and checked (``healer.selfheal.gitdir``).
5. **Credentials only from healer's settings**: a caller hands them over as ``secret_config``
   (``http.extraHeader`` …), which git reads from ``GIT_CONFIG_COUNT``/``KEY_n``/``VALUE_n`` in
   its environment — never from argv, where ``ps`` would show them.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from healer.core import proc
from healer.errors import UsageError

GIT_TIMEOUT_S = 120.0
BRANCH_PREFIX = "healer/"  # healing branches: the only ones a forge pushes or records

# Inherited from healer's environment when set; everything else is dropped.
ENV_ALLOW = frozenset({
    "PATH", "LANG", "LANGUAGE", "LC_ALL", "LC_CTYPE", "LC_MESSAGES", "TZ", "TMPDIR",
    "SSL_CERT_FILE", "SSL_CERT_DIR",
    "http_proxy", "https_proxy", "no_proxy", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY",
})
# What a caller may add for one command (a commit's identity and date).
EXTRA_ALLOW = frozenset({
    "GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "GIT_AUTHOR_DATE",
    "GIT_COMMITTER_NAME", "GIT_COMMITTER_EMAIL", "GIT_COMMITTER_DATE",
})
NOWHERE = "/nonexistent/healer-git-home"

OVERRIDES: tuple[tuple[str, str], ...] = (
    ("core.hooksPath", "/dev/null"),
    ("core.fsmonitor", "false"),
    ("core.sshCommand", "false"),
    ("core.askPass", ""),
    ("core.pager", "cat"),
    ("core.editor", "false"),
    ("sequence.editor", "false"),
    ("core.attributesFile", "/dev/null"),
    ("core.excludesFile", "/dev/null"),
    ("core.alternateRefsCommand", ""),
    ("credential.helper", ""),  # an empty value empties the list of helpers
    ("diff.external", ""),
    ("protocol.allow", "never"),
    ("protocol.file.allow", "always"),
    ("protocol.https.allow", "always"),
    ("protocol.http.allow", "always"),
    ("submodule.recurse", "false"),
    ("fetch.recurseSubmodules", "false"),
    ("gc.auto", "0"),
    ("maintenance.auto", "false"),
    ("fetch.writeCommitGraph", "false"),
    ("commit.gpgSign", "false"),
    ("tag.gpgSign", "false"),
    ("push.gpgSign", "false"),
    ("log.showSignature", "false"),
    ("core.quotePath", "false"),
)


class GitError(UsageError):
    """A git command failed (``argv``, ``stderr``)."""

    def __init__(self, argv: tuple[str, ...], stderr: str):
        self.argv = argv
        self.stderr = stderr.strip()
        shown = [a for a in argv if a != "-c"][:1] + _verb(argv)
        super().__init__(f"{' '.join(shown)}: {self.stderr.splitlines()[-1:] or 'failed'}")


def _verb(argv: tuple[str, ...]) -> list[str]:
    """The words after the overrides (``git -c … -C repo log …`` → ``-C repo log …``)."""
    rest = list(argv[1:])
    while rest[:1] == ["-c"]:
        rest = rest[2:]
    return rest[:4]


def git_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of every git command healer runs (see the module docstring)."""
    env = {k: v for k, v in os.environ.items() if k in ENV_ALLOW}
    env.setdefault("PATH", os.defpath)
    env.update(HOME=NOWHERE, GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL=os.devnull,
               GIT_TERMINAL_PROMPT="0", GIT_PAGER="cat")
    for key, value in (extra or {}).items():
        if key not in EXTRA_ALLOW:
            raise ValueError(f"{key} may not be passed to git (allowed: {sorted(EXTRA_ALLOW)})")
        env[key] = value
    return env


def secret_env(config: Mapping[str, str]) -> dict[str, str]:
    """``GIT_CONFIG_COUNT``/``KEY_n``/``VALUE_n`` for config git must not get on its argv."""
    if not config:
        return {}
    env = {"GIT_CONFIG_COUNT": str(len(config))}
    for n, (key, value) in enumerate(config.items()):
        env[f"GIT_CONFIG_KEY_{n}"] = key
        env[f"GIT_CONFIG_VALUE_{n}"] = value
    return env


def git_argv(repo: Path | str, *args: str, git_dir: Path | str | None = None) -> list[str]:
    """``git -c <overrides>… -C repo [--git-dir D --work-tree repo] args…``."""
    argv = ["git"]
    for key, value in OVERRIDES:
        argv += ["-c", f"{key}={value}"]
    argv += ["-C", str(repo)]
    if git_dir is not None:
        argv += [f"--git-dir={git_dir}", f"--work-tree={repo}"]
    return [*argv, *args]


def git(repo: Path | str, *args: str, check: bool = True, timeout: float = GIT_TIMEOUT_S,
        env: Mapping[str, str] | None = None, secret_config: Mapping[str, str] | None = None,
        git_dir: Path | str | None = None, input: str | None = None) -> proc.ProcResult:
    """Run ``git -C repo args…`` inert (argv, timeout); ``GitError`` on failure when ``check``.

    ``env``: a commit identity (``EXTRA_ALLOW``); ``secret_config``: config passed through the
    environment; ``git_dir``: the git dir, given explicitly instead of discovered from ``repo``.
    """
    full_env = {**git_env(env), **secret_env(secret_config or {})}
    res = proc.run(git_argv(repo, *args, git_dir=git_dir), timeout=timeout, env=full_env,
                   input=input)
    if check and not res.ok:
        raise GitError(res.argv, res.stderr or ("timed out" if res.timed_out else "failed"))
    return res


async def git_async(repo: Path | str, *args: str, timeout: float = GIT_TIMEOUT_S,
                    env: Mapping[str, str] | None = None) -> proc.ProcResult:
    """``git`` for an event loop (never raises for a failed command: read ``.ok``)."""
    return await proc.run_async(git_argv(repo, *args), timeout=timeout, env=git_env(env))
